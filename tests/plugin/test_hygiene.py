"""Resource hygiene: a session that launched the real testbed leaves no process and no open
port behind, whether it passed, failed (under xdist) or was interrupted with Ctrl-C.

Each case is a pytest run in a SUBPROCESS with ``--k3-launch testbed``; the inner test writes
the server's process tree (pid + start time, from /proc) and URL to a file; afterwards /proc
must hold none of those processes (zombies aside; the launch watchdog included) and the
port must refuse connections. A pytest killed by SIGTERM/SIGKILL (no teardown at all) is
covered with a cheap process in ``tests/unit/test_watchdog.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from pytest_k3accept import testbed

pytestmark = [pytest.mark.live]

#: read before pytester moves HOME (the testbed cache lives under the real one)
REAL_CACHE = testbed.cache_dir()

INNER = '''
import json, os, time

def _tree(root):
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = open(f"/proc/{name}/stat").read()
            except OSError:
                continue
            fields = raw[raw.rfind(")") + 2:].split()
            table[int(name)] = (int(fields[1]), int(fields[19]))
    found, todo = {root: table[root][1]}, [root]
    while todo:
        pid = todo.pop()
        for child, (ppid, start) in table.items():
            if ppid == pid and child not in found:
                found[child] = start
                todo.append(child)
    return found

def test_server_is_up(k3_server, k3_endpoint):
    tree = _tree(k3_server.process.pid)
    guard = k3_server.process.watchdog  # it must be gone afterwards too
    assert guard is not None and guard.pid is not None
    tree.update(_tree(guard.pid))
    info = {"url": k3_endpoint.base_url, "tree": {str(p): s for p, s in tree.items()}}
    with open(os.environ["K3_HYGIENE_INFO"] + ".tmp", "w") as f:
        json.dump(info, f)
    os.rename(os.environ["K3_HYGIENE_INFO"] + ".tmp", os.environ["K3_HYGIENE_INFO"])
    mode = os.environ["K3_HYGIENE_MODE"]
    assert mode != "fail", "planted failure"
    if mode == "interrupt":
        time.sleep(600)
'''


def _leftovers(tree: dict[str, int]) -> list[str]:
    """Processes of the recorded tree that are still alive (same pid AND start time)."""
    left = []
    for pid, start in tree.items():
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2:].split()
        if int(fields[19]) == start and fields[0] != "Z":
            left.append(f"{pid} {raw[:raw.rfind(')') + 1]}")
    return left


def _port_open(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((parts.hostname or "127.0.0.1", parts.port or 80)) == 0


def _check_clean(info_path: Path) -> dict[str, Any]:
    assert info_path.exists(), "the inner test never saw the server up"
    info = json.loads(info_path.read_text())
    assert len(info["tree"]) >= 2  # the API server and its engine core at least
    deadline = time.monotonic() + 15  # reaping is immediate; allow a slow kernel a moment
    while (_leftovers(info["tree"]) or _port_open(info["url"])) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _leftovers(info["tree"]), f"orphans: {_leftovers(info['tree'])}"
    assert not _port_open(info["url"]), f"{info['url']} still accepts connections"
    return info


def _env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str) -> Path:
    info = pytester.path / "server-info.json"
    monkeypatch.setenv("K3_HYGIENE_INFO", str(info))
    monkeypatch.setenv("K3_HYGIENE_MODE", mode)
    monkeypatch.setenv("K3ACCEPT_CACHE", str(REAL_CACHE))
    pytester.makepyfile(test_inner=INNER)
    return info


ARGS = ("--k3-launch", "testbed", "-p", "no:cacheprovider", "--k3-artifacts=artifacts")


def test_passing_session_stops_its_server(pytester: pytest.Pytester,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    info = _env(pytester, monkeypatch, "pass")
    result = pytester.runpytest_subprocess(*ARGS, timeout=600)
    result.assert_outcomes(passed=1)
    _check_clean(info)


def test_failing_session_under_xdist_stops_its_server(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    info = _env(pytester, monkeypatch, "fail")
    result = pytester.runpytest_subprocess(*ARGS, "-p", "xdist", "-n", "1", timeout=600)
    result.assert_outcomes(failed=1)
    assert "planted failure" in result.stdout.str()
    _check_clean(info)


def test_interrupted_session_stops_its_server(pytester: pytest.Pytester,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    info = _env(pytester, monkeypatch, "interrupt")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *ARGS], cwd=pytester.path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=os.environ.copy())
    try:
        deadline = time.monotonic() + 500
        while not info.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert info.exists(), "the server never came up"
        proc.send_signal(signal.SIGINT)  # what Ctrl-C does to pytest
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.decode(errors="replace")
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, text[-3000:]
    assert "KeyboardInterrupt" in text
    _check_clean(info)
