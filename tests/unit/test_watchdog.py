"""The launch watchdog: a server outlives no pytest, however pytest ends.

Cheap stand-in processes (``sleep``, a 10-line HTTP responder) are enough here: what is
tested is our process-group cleanup, not vLLM. The same paths with the real testbed are in
``tests/plugin/test_hygiene.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_k3accept.observe.server.launch import ServerProcess, free_port


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _gone_within(pids: list[int], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_normal_stop_disarms_and_reaps_the_watchdog(tmp_path: Path) -> None:
    proc = ServerProcess().start("sleep 300 & sleep 300; wait", log_path=tmp_path / "log")
    assert proc.watchdog is not None and proc.watchdog.pid is not None
    guard = proc.watchdog.pid
    assert _alive(guard)
    proc.stop(grace=2)
    assert not _alive(guard) and proc.watchdog.proc is not None
    assert proc.watchdog.proc.returncode == 0  # disarmed: it exited by itself


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_owner_takes_its_server_down(tmp_path: Path, sig: int) -> None:
    """The owner (a Python process holding a ServerProcess) dies without calling stop()."""
    info = tmp_path / "pids"
    owner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from pytest_k3accept.observe.server.launch import ServerProcess
        p = ServerProcess().start("sleep 300 & sleep 300; wait", log_path=Path({str(tmp_path / 'log')!r}))
        time.sleep(0.5)
        Path({str(info)!r}).write_text(f"{{p.pid}} {{p.watchdog.pid}}")
        time.sleep(300)
    """)])
    try:
        end = time.monotonic() + 30
        while not (info.exists() and info.read_text()) and time.monotonic() < end:
            time.sleep(0.1)
        server, guard = (int(x) for x in info.read_text().split())
        group = [int(p) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == server]
        assert len(group) >= 2  # bash and its sleeps
        owner.send_signal(sig)
        owner.wait(10)
        assert _gone_within(group + [guard], 15), "the server outlived its owner"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def _pgid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split()[2])


RESPONDER = '''
import sys, http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"data": [{"id": "m"}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def test_sigterm_to_pytest_ends_the_session_as_ctrl_c_does(pytester: pytest.Pytester) -> None:
    """What a CI runner (or ``timeout``) does to a job: SIGTERM. The session ends as on
    Ctrl-C: the server is stopped, the record is written (interrupted) and the server log
    the plugin wrote is redacted (vLLM prints its own ``--api-key``)."""
    port = free_port()
    responder = pytester.path / "responder.py"
    responder.write_text(RESPONDER.replace(
        "http.server.HTTPServer(", "print('args:', sys.argv, flush=True)\nhttp.server.HTTPServer("))
    info = pytester.path / "pid"
    pytester.makepyfile(test_inner=f'''
import time
from pathlib import Path

def test_up(k3_server):
    Path({str(info)!r}).write_text(str(k3_server.process.pid))
    time.sleep(300)
''')
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--k3-launch",
         f"{sys.executable} {responder} {port} --api-key SECRETsigterm42",
         "--k3-endpoint", f"http://127.0.0.1:{port}", "--k3-artifacts=artifacts",
         "--k3-record=record.json"], cwd=pytester.path, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 60
        while not (info.exists() and info.read_text()) and time.monotonic() < end:
            time.sleep(0.2)
        server = int(info.read_text())
        assert _alive(server)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        assert proc.returncode == 2  # pytest's "interrupted", after its teardown ...
        assert _gone_within([server], 15)  # ... which stopped the server
        record = json.loads((pytester.path / "record.json").read_text())
        assert record["session"]["interrupted"] is True
        logs = list((pytester.path / "artifacts").glob("server-*.log"))
        assert logs and "args:" in logs[0].read_text()
        assert not any("SECRETsigterm42" in p.read_text(errors="replace")
                       for p in pytester.path.rglob("*") if p.is_file() and p.suffix != ".py")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
