"""Two sessions at once (observe/server/claims.py): a port another k3accept process picked is
never handed out again, and an artifacts directory another live session holds is named in a
note. The other session is a real second process holding the lock file."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from pytest_k3accept.observe.server import claims

HOLD = """
import fcntl, sys, time
fh = open(sys.argv[1], "a+")
fcntl.flock(fh, fcntl.LOCK_EX)
fh.seek(0); fh.truncate(); fh.write("pid 4242 since 12:00:00\\n"); fh.flush()
print("held", flush=True)
time.sleep(60)
"""


@pytest.fixture
def holder() -> Iterator[Callable[[Path], None]]:
    procs: list[subprocess.Popen[str]] = []

    def hold(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait(10)


def test_an_artifacts_dir_held_by_another_session_is_named(
        tmp_path: Path, holder: Callable[[Path], None]) -> None:
    shared = tmp_path / "artifacts"
    holder(shared / claims.DIR_LOCK)
    note = claims.claim_dir(shared)
    assert note is not None and note.startswith(
        "artifacts: another k3accept session (pid 4242 since 12:00:00) writes to "
        f"{shared}/ at the same time")
    assert "give each session its own --k3-artifacts and --k3-record" in note
    mine = tmp_path / "mine"
    assert claims.claim_dir(mine) is None and claims.claim_dir(mine) is None  # ours, twice


def test_a_port_another_process_picked_is_not_handed_out(holder: Callable[[Path], None],
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         ) -> None:
    taken, free = 40001 + int(time.time()) % 1000, 42001 + int(time.time()) % 1000
    holder(Path(tempfile.gettempdir(), "k3accept-ports", f"{taken}.lock"))
    offered = iter([taken, taken, free])

    class FakeSocket:
        def __init__(self, *a: object) -> None:
            self.port = next(offered)

        def __enter__(self) -> "FakeSocket":
            return self

        def __exit__(self, *a: object) -> None:
            pass

        def bind(self, addr: object) -> None:
            pass

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(claims.socket, "socket", FakeSocket)
    assert claims.reserve() == free  # the OS offered the other session's port twice


def test_reserved_ports_differ_within_a_process() -> None:
    ports = {claims.reserve() for _ in range(5)}
    assert len(ports) == 5
