"""A REAL Ray cluster on this machine for the live tests: a head node and worker nodes, one
CPU each, in a private temporary directory (``--temp-dir``), usage stats off. Every address
the tests use is 127.0.0.1 (``--node-ip-address``, the GCS, the Ray Client server); Ray 2.60
still registers the nodes under the machine's own address (``node:<ip>`` resources).

``start(workers=1)`` is a context manager yielding a :class:`RayCluster` once every node
is alive (its temporary directory is a short one of its own, removed at the end: Ray's
socket paths must stay under 108 characters); each node is a ``ray start --block`` process in a session of its own, so the end
stops exactly what it started (the workers, then the head; whatever is left of those
sessions is killed by process id), never a machine-wide ``ray stop``. Without Ray the test
skips with the reason, and fails under ``K3ACCEPT_LIVE_REQUIRED=1`` (the root conftest's
``_unavailable``), as in CI, which installs the ``ray`` extra (tox.ini).

The GCS's health checks are tightened (a node is declared dead ~2 s after it stops
answering, not ~15 s) so that a test that kills a worker node sees it lost quickly.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

#: the GCS declares a node dead after this many missed health checks of this period
HEALTH = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
          "RAY_health_check_failure_threshold": "3"}
#: the head's Ray Client server waits this long (not its default 30 s) for the server process
#: it starts per client: on a 2-core CI machine busy with the testbed that start took > 30 s
#: once ("Initialization failure from server"); under RayPlacement's 60 s connect bound
CLIENT_START = {"RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "55"}

_ALIVE = """
import sys, time, ray
import json
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
want, end = int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
alive = []
while time.monotonic() < end:
    alive = [{"id": n["NodeID"], "head": "node:__internal_head__" in n["Resources"]}
             for n in ray.nodes() if n["Alive"]]
    if len(alive) >= want:
        break
    time.sleep(0.25)
print(json.dumps(alive))
"""


@dataclass
class RayCluster:
    """A running loopback cluster: its addresses and processes."""

    gcs: str  #: ``127.0.0.1:PORT`` (a driver on this machine: ``ray.init(address=gcs)``)
    client: str  #: ``ray://127.0.0.1:PORT`` (the Ray Client server)
    temp_dir: Path
    head: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: Ray's node id of the head and of each worker node (in no particular worker order)
    head_id: str = ""
    worker_ids: list[str] = field(default_factory=list)
    #: seconds from the first ``ray start`` until every node was alive
    started_in: float = 0.0

    def kill_worker(self, index: int = 0) -> None:
        """Kill worker node ``index`` at once (SIGKILL of its raylet and every process of
        its session), as a machine that goes away mid-run."""
        _kill_session(self.workers[index].pid, signal.SIGKILL)
        self.workers[index].wait()

    @contextlib.contextmanager
    def killing_client_servers(self, count: int = 1) -> Iterator[list[int]]:
        """While inside, SIGKILL the next ``count`` server processes that the head's Ray
        Client server starts for a client (``--mode=specific-server``) as soon as each
        appears, as one that dies at its start on a busy head; yields their pids. Servers
        already running when it starts (an earlier client's, kept for Ray's reconnect grace
        period) are left alone."""
        killed: list[int] = []
        stop = threading.Event()
        before = set(self.client_servers())

        def watch() -> None:
            while not stop.is_set() and len(killed) < count:
                for pid in self.client_servers():
                    if pid not in before and pid not in killed:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                time.sleep(0.02)
        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            yield killed
        finally:
            stop.set()
            thread.join()

    def client_servers(self) -> list[int]:
        """Pids of the server processes the head's Ray Client server runs for its clients."""
        found = []
        for pid in _session_pids(self.head.pid):
            with contextlib.suppress(OSError):
                if b"specific-server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
        return found

    def client_logs(self) -> str:
        """The end of the Ray Client server's logs (proxy and per-client servers)."""
        found = sorted(self.temp_dir.glob("session_*/logs/ray_client_server*.err"))
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                         for p in found)

    def log(self, name: str = "head") -> str:
        """The end of a node's ``ray start`` log (for failure messages)."""
        path = self.temp_dir / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _ray_command() -> list[str]:
    exe = Path(sys.executable).with_name("ray")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


def _session_pids(sid: int) -> list[int]:
    """Processes whose session id is ``sid`` (the ``ray start`` we started leads it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:  # state ppid pgrp session
            found.append(int(entry.name))
    return found


def _kill_session(sid: int, sig: int) -> None:
    for pid in _session_pids(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM the node's ``ray start --block`` (it stops its own processes), then kill
    whatever of its session is left."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _kill_session(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def start(workers: int = 1, timeout: float = 120.0) -> Iterator[RayCluster]:
    """Run a head node and ``workers`` worker nodes on loopback; yields the cluster."""
    from pytest_k3accept.observe.server.launch import free_port

    if importlib.util.find_spec("ray") is None:
        from conftest import _unavailable  # the root conftest: skip, or fail under CI

        _unavailable("Ray is not installed: pip install 'pytest-k3accept[ray]' "
                     "(tox -e tests installs it)")
        raise AssertionError("unreachable")
    temp = Path(tempfile.mkdtemp(prefix="k3ray."))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **HEALTH, **CLIENT_START}
    env.pop("RAY_ADDRESS", None)
    port, client_port = free_port(), free_port()
    common = ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
              "--object-store-memory", str(80 * 1024 * 1024), "--temp-dir", str(temp),
              "--disable-usage-stats"]
    t0 = time.monotonic()

    def node(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (temp / f"{name}.log").open("wb") as log:
            return subprocess.Popen([*_ray_command(), "start", *args, *common], env=env,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
    head = node("head", ["--head", "--port", str(port), "--ray-client-server-port",
                         str(client_port), "--include-dashboard=false"])
    cluster = RayCluster(gcs=f"127.0.0.1:{port}", client=f"ray://127.0.0.1:{client_port}",
                         temp_dir=temp, head=head)
    try:
        for i in range(workers):
            cluster.workers.append(node(f"worker{i}", ["--address", cluster.gcs]))
        left = max(1.0, timeout - (time.monotonic() - t0))
        try:
            out = subprocess.run([sys.executable, "-c", _ALIVE, cluster.gcs,
                                  str(1 + workers), str(left)], env=env, capture_output=True,
                                 text=True, timeout=left + 30)
            lines = out.stdout.strip().splitlines()
            alive = json.loads(lines[-1]) if lines else []
            why = out.stderr[-2000:]
        except (subprocess.TimeoutExpired, ValueError) as exc:
            alive, why = [], repr(exc)
        if len(alive) < 1 + workers:
            pytest.fail(f"the loopback Ray cluster did not come up within {timeout:.0f} s: "
                        f"{len(alive)} of {1 + workers} nodes alive\n{why}\n"
                        f"head log:\n{cluster.log()}", pytrace=False)
        cluster.head_id = next(n["id"] for n in alive if n["head"])
        cluster.worker_ids = [n["id"] for n in alive if not n["head"]]
        cluster.started_in = time.monotonic() - t0
        yield cluster
    finally:
        for proc in [*cluster.workers, head]:
            _stop(proc)
        shutil.rmtree(temp, ignore_errors=True)
