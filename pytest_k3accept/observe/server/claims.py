"""Two sessions on one machine: a port and an artifacts directory claimed, not just picked.

A free port found by binding port 0 is free only until the socket closes: vLLM binds it
seconds later, and a second session starting at the same time can be handed the same port
by the OS in between. :func:`reserve` holds an exclusive lock file per port
(``$TMPDIR/k3accept-ports/PORT.lock``) for the life of the process, so no two k3accept
processes pick one port; :func:`claim_dir` takes a lock file in an artifacts directory and
says so when another live session holds it (server logs carry the process id in their
names, but a ``--k3-record`` or ``--k3-summary-md`` path given to both is overwritten by the
session that ends last). Locks are ``flock`` locks: a crashed session leaves none behind.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import IO

#: lock files this process holds (kept open: closing one releases its lock)
_HELD: dict[str, IO[str]] = {}
#: the artifacts directory's lock file
DIR_LOCK = ".k3accept-session.lock"


def _try_lock(path: Path, text: str) -> bool:
    """Lock ``path`` exclusively (non-blocking) and keep it; False when another holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return False
    fh.seek(0)
    fh.truncate()
    fh.write(text)
    fh.flush()
    _HELD[str(path)] = fh
    return True


def reserve(host: str = "127.0.0.1", attempts: int = 64) -> int:
    """A TCP port on ``host`` that is free now and that no other k3accept process picked
    (its lock file stays held until this process exits)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    locks = Path(tempfile.gettempdir(), "k3accept-ports")
    port = 0
    for _ in range(attempts):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        key = str(locks / f"{port}.lock")
        if key in _HELD:
            continue  # this process picked it before: its server may still be starting
        try:
            if _try_lock(Path(key), f"{os.getpid()}\n"):
                return port
        except OSError:
            return port  # no lock directory (read-only /tmp): the OS's pick alone
    return port


def claim_dir(directory: Path) -> str | None:
    """Claim ``directory`` for this session; a note when another live session holds it."""
    path = Path(directory, DIR_LOCK)
    if str(path) in _HELD:
        return None
    try:
        if _try_lock(path, f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}\n"):
            return None
        holder = path.read_text(encoding="utf-8").strip() or "unknown"
    except OSError:
        return None  # an unwritable directory has its own note (the server log's)
    return (f"artifacts: another k3accept session ({holder}) writes to {directory}/ at the "
            "same time: server logs are named per process, but a --k3-record or "
            "--k3-summary-md path given to both sessions is overwritten by the one that ends "
            "last; give each session its own --k3-artifacts and --k3-record")
