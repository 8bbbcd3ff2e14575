"""A watchdog that stops a launched server's process group when the pytest process dies.

``ServerProcess.stop()`` (fixture teardown, ``pytest_sessionfinish``, ``atexit``) covers a
normal end, a failure and Ctrl-C. It cannot run when pytest itself is killed: SIGTERM from a CI
runner cancelling the job or from ``timeout``, SIGKILL, an xdist worker killed by its
controller, an OOM kill. Then the server (which runs in its own session, so terminal signals
do not reach it) would outlive the session and keep its port, memory and GPUs.

So every launched server gets a tiny watchdog: a separate Python process in its own session
holding the read end of a pipe whose write end only the pytest process has. When pytest dies
for ANY reason the kernel closes the write end; the watchdog reads end-of-file and sends
SIGTERM to the server's process group, then SIGKILL after a grace period. A normal
``stop()`` first stops the server itself, then writes ``q`` ("disarm") and closes the pipe,
and the watchdog exits without touching anything.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["Watchdog"]

_CODE = r"""
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    try:
        data = os.read(0, 64)
    except InterruptedError:
        continue
    except OSError:
        data = b""
    if b"q" in data:
        sys.exit(0)
    if not data:
        break
def alive():
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False
if alive():
    os.killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + grace
    while alive() and time.monotonic() < end:
        time.sleep(0.2)
    if alive():
        os.killpg(pgid, signal.SIGKILL)
"""


class Watchdog:
    """Guards one process group (``pgid``) for the lifetime of this Python process."""

    def __init__(self, pgid: int, grace: float = 10.0) -> None:
        self.pgid = pgid
        self.proc: subprocess.Popen[bytes] | None = None
        self._w: int | None = None
        if not sys.executable:
            return
        r, w = os.pipe()  # both non-inheritable: no other child keeps the write end open
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _CODE, str(pgid), str(grace)], stdin=r,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            os.close(w)
        else:
            self._w = w
        finally:
            os.close(r)

    @property
    def pid(self) -> int | None:
        """The watchdog's pid (None when it could not be started)."""
        return self.proc.pid if self.proc is not None else None

    def disarm(self, timeout: float = 5.0) -> None:
        """Tell the watchdog the server was stopped normally; wait for it to exit."""
        if self._w is not None:
            try:
                os.write(self._w, b"q")
            except OSError:
                pass
            os.close(self._w)
            self._w = None
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
