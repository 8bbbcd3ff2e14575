"""Unit tests of the server-process lifecycle (pytest_k3accept.observe.server.launch).

Plain small commands stand in for the server: a stdlib HTTP stub that serves
/v1/models, a command that exits, one that never listens, one that spawns children.
Also covers the cheap, vLLM-free parts of pytest_k3accept.testbed.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_k3accept import testbed
from pytest_k3accept.observe.server.launch import (LaunchError, ServerExited, ServerProcess,
                                                   ServerStartTimeout, free_port)

STUB = textwrap.dedent("""
    import http.server, json, sys
    port, mode = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "ok")

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if mode == "503":
                code, body = 503, b'{"error": "loading"}'
            elif self.path == "/v1/models":
                code, body = 200, json.dumps({"object": "list", "data": [{"id": "stub"}]}).encode()
            else:
                code, body = 404, b"{}"
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    print("stub starting on port", port, flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    path = tmp_path / "stub_server.py"
    path.write_text(STUB)
    return path


@pytest.fixture
def server(tmp_path: Path):
    sp = ServerProcess()
    yield sp
    sp.stop(grace=2)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _live(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def _group_members(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _live(int(entry.name)):
            try:
                fields = (entry / "stat").read_text()
            except OSError:
                continue
            if int(fields[fields.rfind(")") + 2:].split()[2]) == pgid:
                out.append(int(entry.name))
    return out


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


@needs_proc
def test_ready_then_stop(stub: Path, tmp_path: Path, server: ServerProcess) -> None:
    port = free_port()
    before = time.time()
    server.start([sys.executable, str(stub), str(port)], log_path=tmp_path / "stub.log")
    assert server.started_at is not None and before <= server.started_at <= time.time()
    ready = server.wait_ready(f"http://127.0.0.1:{port}/", timeout=30)
    assert server.started_at <= ready <= time.time()
    assert server.startup_seconds is not None and 0 <= server.startup_seconds < 30
    assert server.alive() and _port_open(port)
    assert "stub starting on port" in server.log_tail()
    pgid = server.pid
    assert pgid is not None
    rc = server.stop()
    assert rc == -signal.SIGTERM
    assert not server.alive() and not _port_open(port)
    assert _group_members(pgid) == []
    assert server.stop() == rc  # idempotent


def test_shell_string_runs_under_bash(stub: Path, tmp_path: Path) -> None:
    port = free_port()
    cmd = f"echo via-bash; exec {shlex.quote(sys.executable)} {shlex.quote(str(stub))} {port}"
    with ServerProcess() as sp:
        sp.start(cmd, log_path=tmp_path / "s.log", env={**os.environ, "K3_TEST": "1"}, cwd=tmp_path)
        sp.wait_ready(f"http://127.0.0.1:{port}", timeout=30)
        assert "via-bash" in sp.log_tail()
    assert not sp.alive()


def test_exit_before_ready_is_reported(tmp_path: Path, server: ServerProcess) -> None:
    server.start("echo 'fatal: no model'; sleep 0.3; exit 1", log_path=tmp_path / "x.log")
    with pytest.raises(ServerExited) as info:
        server.wait_ready(f"http://127.0.0.1:{free_port()}", timeout=30)
    err = info.value
    assert err.returncode == 1 and isinstance(err, LaunchError)
    assert "server exited with code 1 before it became ready (after " in str(err)
    assert "last log lines:\nfatal: no model" in str(err)
    assert err.elapsed < 10


def test_killed_by_signal_is_named(tmp_path: Path, server: ServerProcess) -> None:
    server.start("kill -KILL $$", log_path=tmp_path / "k.log")
    with pytest.raises(ServerExited, match="was killed by SIGKILL"):
        server.wait_ready(f"http://127.0.0.1:{free_port()}", timeout=30)


def test_never_listening_times_out(tmp_path: Path, server: ServerProcess) -> None:
    port = free_port()
    server.start("echo still loading; sleep 60", log_path=tmp_path / "t.log")
    t0 = time.monotonic()
    with pytest.raises(ServerStartTimeout) as info:
        server.wait_ready(f"http://127.0.0.1:{port}", timeout=2.0)
    waited = time.monotonic() - t0
    assert 1.9 <= waited < 4.0
    msg = str(info.value)
    assert "did not become ready within 2." in msg and "connection refused" in msg
    assert "still loading" in msg and "still running" in msg
    assert server.alive()  # a timeout leaves the process to the caller
    t1 = time.monotonic()
    server.stop(grace=5)
    assert time.monotonic() - t1 < 5 and not server.alive()


def test_http_error_keeps_polling(stub: Path, tmp_path: Path, server: ServerProcess) -> None:
    port = free_port()
    server.start([sys.executable, str(stub), str(port), "503"], log_path=tmp_path / "h.log")
    with pytest.raises(ServerStartTimeout, match="last poll: HTTP 503"):
        server.wait_ready(f"http://127.0.0.1:{port}", timeout=3.0)


def test_sigterm_ignored_gets_sigkill(tmp_path: Path) -> None:
    sp = ServerProcess().start("trap '' TERM; echo trapped; sleep 300", log_path=tmp_path / "i.log")
    time.sleep(0.3)
    t0 = time.monotonic()
    rc = sp.stop(grace=1.0)
    assert rc == -signal.SIGKILL
    assert time.monotonic() - t0 < 5


@needs_proc
def test_no_orphans_after_stop(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # one child stays in the group; one leaves it with setsid (a "daemonising" helper).
    cmd = (f"sleep 300 & echo $! >> {pids}; "
           f"setsid sleep 301 & echo $! >> {pids}; "
           f"echo spawned; wait")
    sp = ServerProcess().start(cmd, log_path=tmp_path / "o.log")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 2):
        time.sleep(0.05)
    children = [int(p) for p in pids.read_text().split()]
    time.sleep(0.2)  # let setsid exec
    assert all(_live(p) for p in children)
    pgid = sp.pid
    assert pgid is not None
    sp.stop(grace=3)
    assert [p for p in children if _live(p)] == []
    assert _group_members(pgid) == []


def test_start_errors(tmp_path: Path) -> None:
    sp = ServerProcess()
    with pytest.raises(LaunchError, match="before start"):
        sp.wait_ready("http://127.0.0.1:1", timeout=1)
    assert sp.stop() is None and sp.log_tail() == "" and not sp.alive()
    with pytest.raises(LaunchError, match="cannot start server command"):
        sp.start([str(tmp_path / "no-such-binary")], log_path=tmp_path / "n.log")
    sp.start("sleep 30", log_path=tmp_path / "n.log")
    with pytest.raises(LaunchError, match="already started"):
        sp.start("sleep 30", log_path=tmp_path / "n.log")
    sp.stop(grace=2)


def test_log_tail_only_this_run(tmp_path: Path) -> None:
    log = tmp_path / "shared.log"
    log.write_text("old run line\n")
    with ServerProcess() as sp:
        sp.start("for i in $(seq 1 100); do echo line-$i; done; sleep 30", log_path=log)
        deadline = time.monotonic() + 10
        while "line-100" not in sp.log_tail() and time.monotonic() < deadline:
            time.sleep(0.05)
        tail = sp.log_tail(n_lines=3)
        assert tail.splitlines() == ["line-98", "line-99", "line-100"]
        assert "old run line" not in sp.log_tail(n_lines=1000)


# ---------------------------------------------------------------- testbed (no vLLM needed)

def test_server_env_is_offline_and_drops_overrides() -> None:
    env = testbed.server_env({"VLLM_CPU_KVCACHE_SPACE": "4", "PYTHONPATH": "/x", "PATH": "/bin"})
    assert "VLLM_CPU_KVCACHE_SPACE" not in env and "PYTHONPATH" not in env
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["PATH"] == "/bin"


def test_server_command_flags(tmp_path: Path) -> None:
    argv = testbed.server_command(tmp_path, port=8123, max_model_len=4096, kv_cache_bytes=3_000_000,
                                  extra_args=["--disable-log-stats"])
    assert argv[:3] == [str(testbed.venv_python()), "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(argv)
    for part in (f"--model {tmp_path}", "--served-model-name k3-testbed", "--host 127.0.0.1",
                 "--port 8123", "--max-model-len 4096", "--enforce-eager",
                 "--kv-cache-memory-bytes 3000000", "--tool-call-parser hermes"):
        assert part in joined
    assert argv[-1] == "--disable-log-stats" and "--load-format" not in argv
    (tmp_path / "k3-testbed.json").write_text(json.dumps({"weights": False}))
    assert testbed.server_command(tmp_path, port=1)[-2:] == ["--load-format", "dummy"]
    assert "--tool-call-parser" not in testbed.server_command(tmp_path, port=1, tools=False)


def test_launch_command_is_one_shell_string(tmp_path: Path) -> None:
    cmd = testbed.testbed_launch_command(9000, model_dir=tmp_path / "my model", served_name="x y")
    words = shlex.split(cmd)
    assert words[0] == "env" and "VLLM_CPU_KVCACHE_SPACE" in words and "HF_HUB_OFFLINE=1" in words
    assert words[words.index("--model") + 1] == str(tmp_path / "my model")
    assert words[words.index("--served-model-name") + 1] == "x y"
    assert words[words.index("--port") + 1] == "9000"


def test_unavailable_reason_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_TESTBED_VENV", str(tmp_path / "venv"))
    monkeypatch.setenv("K3ACCEPT_CACHE", str(tmp_path / "cache"))
    assert testbed.venv_dir() == tmp_path / "venv" and testbed.cache_dir() == tmp_path / "cache"
    reason = testbed.unavailable_reason()
    assert reason is not None and str(tmp_path / "venv" / "bin" / "python") in reason
    assert testbed.INSTALL_HINT in reason
    with pytest.raises(testbed.TestbedUnavailable):
        testbed.build_model("tiny")
    with pytest.raises(ValueError, match="unknown testbed model variant"):
        testbed.build_model("medium")


def test_testbed_servers_leave_the_last_cpu_to_the_client(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.setattr(testbed.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert testbed.server_cpus() == [0]
    argv = testbed.pinned(["python", "-m", "vllm"])
    assert argv == (["taskset", "-c", "0", "python", "-m", "vllm"]
                    if shutil.which("taskset") else ["python", "-m", "vllm"])
    words = shlex.split(testbed.testbed_launch_command(9000, model_dir=tmp_path))
    assert words[0] == "env" and ("taskset" in words) == bool(shutil.which("taskset"))
    monkeypatch.setattr(testbed.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert testbed.server_cpus() is None and testbed.pinned(["x"]) == ["x"]
