"""benchmarks/install.py: a peer install that fails is a reason (a table row), never a crash.

A stub interpreter stands in for python: ``-m venv DIR`` makes DIR/bin/python (the stub
again) and ``-m pip install`` fails the way pip does without a registry. Nothing is
downloaded and nothing is installed.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import install  # noqa: E402
import run  # noqa: E402

PIP_ERROR = "ERROR: No matching distribution found for aiperf==0.13.0"
STUB = f"""#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "Looking in indexes: http://127.0.0.1:9/simple"
  echo "WARNING: Retrying after connection broken by NewConnectionError" >&2
  echo "ERROR: Could not find a version that satisfies the requirement aiperf==0.13.0" >&2
  echo "{PIP_ERROR}" >&2
  exit 1
fi
exit 2
"""


@pytest.fixture
def stub_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A failing stub interpreter as K3_PEER_PYTHON, the cache under tmp_path."""
    exe = tmp_path / "python-stub"
    exe.write_text(STUB)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("K3_PEER_PYTHON", str(exe))
    monkeypatch.setenv("K3ACCEPT_CACHE", str(tmp_path / "cache"))
    return exe


def test_a_failed_pip_install_is_a_reason_with_pips_last_error_line(stub_python: Path) -> None:
    peer = install.PEERS["aiperf"]
    venv, why = install.ensure(peer, log=lambda s: None)
    assert venv is None
    assert why == f"install failed: exit 1: {PIP_ERROR}"
    assert not peer.venv().exists(), "a failed install leaves no half virtualenv to reuse"
    log = peer.venv().parent / "aiperf-0.13.0.log"
    assert PIP_ERROR in log.read_text() and "pip install aiperf==0.13.0" in log.read_text()


def test_the_failure_becomes_a_table_row(stub_python: Path) -> None:
    venv, why = install.ensure(install.PEERS["aiperf"], log=lambda s: None)
    row = run.not_ready("aiperf", "c=64", venv, why)
    assert row is not None
    assert row["tool"] == "AIPerf 0.13.0" and row["rps"] is None and row["mode"] == "c=64"
    assert PIP_ERROR in run.table([row])


def test_no_install_keeps_skipping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_CACHE", str(tmp_path))
    monkeypatch.setenv("K3_PEER_PYTHON", "/nonexistent/python")
    venv, why = install.ensure(install.PEERS["inference-perf"], install=False)
    assert venv is None and why.startswith("not installed") and "--no-install" in why
    assert not (tmp_path / "peers").exists()


def test_an_installed_peer_is_reused_without_pip(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_CACHE", str(tmp_path))
    monkeypatch.setenv("K3_PEER_PYTHON", "/nonexistent/python")  # would fail if called
    peer = install.PEERS["guidellm"]
    monkeypatch.delenv("K3_GUIDELLM_VENV", raising=False)
    (peer.venv() / "bin").mkdir(parents=True)
    (peer.venv() / "bin" / "guidellm").touch()
    (peer.venv() / install.MARKER).write_text("{}\n")
    assert install.ensure(peer) == (peer.venv(), "")


def test_guidellm_venv_override_is_used_and_never_installed_into(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3_GUIDELLM_VENV", str(tmp_path / "mine"))
    peer = install.PEERS["guidellm"]
    assert peer.venv() == tmp_path / "mine"
    venv, why = install.ensure(peer)
    assert venv is None and "K3_GUIDELLM_VENV" in why and not (tmp_path / "mine").exists()
    (tmp_path / "mine" / "bin").mkdir(parents=True)
    (tmp_path / "mine" / "bin" / "guidellm").touch()
    assert install.ensure(peer) == (tmp_path / "mine", "")


def test_no_suitable_interpreter_is_a_reason(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_CACHE", str(tmp_path))
    monkeypatch.delenv("K3_PEER_PYTHON", raising=False)
    monkeypatch.setattr(install, "find_python", lambda minimum: None)
    venv, why = install.ensure(install.PEERS["inference-perf"], log=lambda s: None)
    assert venv is None and why == "install failed: no Python >= 3.12 found (set K3_PEER_PYTHON)"


def test_last_error_line() -> None:
    assert install.last_error_line("a\nERROR: one\nb\nERROR: two\n\n") == "ERROR: two"
    assert install.last_error_line("just this\n") == "just this"
    assert install.last_error_line("") == "(no output)"
