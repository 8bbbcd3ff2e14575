"""Lifecycle of a server subprocess: start, wait until it answers, stop it and all it spawned.

Used for the embedded vLLM CPU testbed and for a user's ``--k3-launch "COMMAND"``.
Only the standard library is used (readiness is polled with urllib).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from .watchdog import Watchdog

__all__ = ["LaunchError", "ServerExited", "ServerStartTimeout", "ServerProcess", "free_port"]


class LaunchError(RuntimeError):
    """Base class of every error raised while launching or watching a server."""


class ServerExited(LaunchError):
    """The server process ended before it became ready."""

    def __init__(self, returncode: int, log_tail: str, elapsed: float) -> None:
        self.returncode = returncode
        self.log_tail = log_tail
        self.elapsed = elapsed
        super().__init__(
            f"server {describe_returncode(returncode)} before it became ready "
            f"(after {elapsed:.1f} s); last log lines:\n{log_tail}")


class ServerStartTimeout(LaunchError):
    """The server process was still running but not answering when the timeout passed."""

    def __init__(self, url: str, waited: float, last_poll: str, pid: int, log_tail: str) -> None:
        self.url = url
        self.waited = waited
        self.last_poll = last_poll
        self.log_tail = log_tail
        super().__init__(
            f"server did not become ready within {waited:.1f} s: {url} never answered "
            f"(last poll: {last_poll}); the process (pid {pid}) is still running; raise the "
            f"launch timeout (--k3-launch-timeout) if it is only slow; last log lines:\n"
            f"{log_tail}")


def describe_returncode(returncode: int) -> str:
    """Human wording for a Popen return code ("exited with code 1", "was killed by SIGKILL")."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (out of memory? check dmesg)" if -returncode == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {returncode}"


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free right now (the OS picks it) and that no
    other k3accept process has picked (:func:`.claims.reserve`: two sessions starting at
    once never get one port)."""
    from .claims import reserve

    return reserve(host)


def _proc_table() -> dict[int, tuple[int, int, str, int]]:
    """Map pid -> (ppid, pgid, state, starttime) from /proc (empty where /proc is missing)."""
    table: dict[int, tuple[int, int, str, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: split after the last ')'.
        fields = raw[raw.rfind(")") + 2:].split()
        try:
            table[int(name)] = (int(fields[1]), int(fields[2]), fields[0], int(fields[19]))
        except (IndexError, ValueError):
            continue
    return table


def _descendants(pid: int, table: Mapping[int, tuple[int, int, str, int]]) -> dict[int, int]:
    """Return {pid: starttime} of every live descendant of ``pid`` in ``table``."""
    children: dict[int, list[int]] = {}
    for p, (ppid, _pgid, _state, _start) in table.items():
        children.setdefault(ppid, []).append(p)
    found: dict[int, int] = {}
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if p in found:
            continue
        found[p] = table[p][3]
        todo.extend(children.get(p, []))
    return found


class ServerProcess:
    """One server subprocess in its own session/process group, with its output in a log file.

    Use as a context manager (``stop()`` on exit); ``stop()`` is also registered with
    ``atexit`` while the process runs, so an interrupted test run leaves nothing behind, and a
    :class:`~pytest_k3accept.observe.server.watchdog.Watchdog` stops the process group if this Python
    process is killed (SIGTERM/SIGKILL) before it could call ``stop()``.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None  # time.time() when the process was spawned
        self.ready_at: float | None = None    # time.time() when it first answered
        self.log_path: Path | None = None
        self.command: str | list[str] | None = None
        self._log_offset = 0
        self._lock = threading.Lock()
        self._stopped = False
        self.watchdog: Watchdog | None = None

    # ------------------------------------------------------------------ start
    def start(self, command: str | Sequence[str], *, env: Mapping[str, str] | None = None,
              log_path: Path, cwd: str | os.PathLike[str] | None = None) -> "ServerProcess":
        """Spawn ``command`` (a shell string runs under ``bash -c``) in a new session.

        stdout and stderr both go (appended) to ``log_path``. Raises LaunchError if the
        command cannot be spawned or this object already started a process.
        """
        if self.proc is not None:
            raise LaunchError(f"this ServerProcess already started pid {self.proc.pid}")
        argv = ["bash", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise LaunchError("empty server command")
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:  # the child keeps its own copy of the fd
            self._log_offset = log_file.tell()
            try:
                self.proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                    env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True)
            except OSError as exc:
                raise LaunchError(f"cannot start server command {argv[0]!r}: {exc}") from exc
        self.started_at = time.time()
        self.watchdog = Watchdog(self.proc.pid)
        self.command = command if isinstance(command, str) else list(argv)
        self.log_path = log_path
        self._stopped = False
        atexit.register(self.stop)
        return self

    @property
    def pid(self) -> int | None:
        """The server's pid (also its process-group id), or None before start()."""
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        """Exit status once the process has ended, else None."""
        return self.proc.poll() if self.proc is not None else None

    @property
    def startup_seconds(self) -> float | None:
        """Seconds from spawn to first successful readiness poll (None until ready)."""
        if self.started_at is None or self.ready_at is None:
            return None
        return self.ready_at - self.started_at

    def alive(self) -> bool:
        """True while the spawned process is running."""
        return self.proc is not None and self.proc.poll() is None

    # ------------------------------------------------------------------ ready
    def wait_ready(self, base_url: str, timeout: float, *, interval: float = 0.3,
                   path: str = "/v1/models", headers: Mapping[str, str] | None = None) -> float:
        """Poll ``GET {base_url}{path}`` until it answers; return ``time.time()`` at that moment.

        2xx counts as ready, and so do 401/403 (the server is up, it wants a key).
        Raises ServerExited if the process ends first, ServerStartTimeout after ``timeout`` s
        (the process is left running: call stop()).
        """
        if self.proc is None or self.started_at is None:
            raise LaunchError("wait_ready() called before start()")
        url = base_url.rstrip("/") + path
        t0 = time.monotonic()
        deadline = t0 + timeout
        last = "no poll yet"
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise ServerExited(rc, self.log_tail(), time.time() - self.started_at)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServerStartTimeout(url, time.monotonic() - t0, last, self.proc.pid, self.log_tail())
            req = urllib.request.Request(url, headers=dict(headers or {}))
            try:
                with urllib.request.urlopen(req, timeout=max(0.5, min(5.0, remaining))) as resp:
                    resp.read()
                    self.ready_at = time.time()
                    return self.ready_at
            except urllib.error.HTTPError as exc:
                if exc.code in (401, 403):
                    self.ready_at = time.time()
                    return self.ready_at
                last = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last = "connection refused" if isinstance(reason, ConnectionRefusedError) else str(reason)
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` s for the process to end; return its code or None if still running."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    # ------------------------------------------------------------------ stop
    def stop(self, grace: float = 10.0) -> int | None:
        """Stop the server and everything it spawned; return its exit status.

        SIGTERM to the process group (and to descendants that left it), wait up to
        ``grace`` s, then SIGKILL whatever is left and reap. Idempotent and safe to call
        from ``finally`` blocks and atexit.
        """
        with self._lock:
            proc = self.proc
            if proc is None:
                return None
            if self._stopped:
                return proc.returncode
            pgid = proc.pid
            table = _proc_table()
            escaped = _descendants(proc.pid, table)
            escaped.update({p: row[3] for p, row in table.items() if row[1] == pgid and p != proc.pid})
            self._signal_all(pgid, escaped, signal.SIGTERM)
            deadline = time.monotonic() + grace
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            while time.monotonic() < deadline and self._survivors(pgid, escaped):
                time.sleep(0.1)
            self._signal_all(pgid, escaped, signal.SIGKILL)
            proc.wait()
            end = time.monotonic() + 5.0
            while time.monotonic() < end and self._survivors(pgid, escaped):
                time.sleep(0.05)
            self._stopped = True
            if self.watchdog is not None:
                self.watchdog.disarm()
            atexit.unregister(self.stop)
            return proc.returncode

    @staticmethod
    def _survivors(pgid: int, tracked: Mapping[int, int]) -> list[int]:
        """Non-zombie processes still in the group or still among the tracked descendants."""
        out = []
        for p, (_ppid, gid, state, start) in _proc_table().items():
            if state == "Z":
                continue
            if gid == pgid or tracked.get(p) == start:
                out.append(p)
        return out

    @staticmethod
    def _signal_all(pgid: int, tracked: Mapping[int, int], sig: signal.Signals) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        table = _proc_table()
        for p, start in tracked.items():
            row = table.get(p)
            if row is not None and row[3] == start and row[2] != "Z":  # same process, not a reused pid
                try:
                    os.kill(p, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    # ------------------------------------------------------------------ logs
    def log_tail(self, n_lines: int = 40) -> str:
        """The last ``n_lines`` lines this process wrote to its log (empty string if none)."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                start = max(self._log_offset, size - 256 * 1024)
                f.seek(start)
                data = f.read()
        except OSError as exc:
            return f"<cannot read {self.log_path}: {exc}>"
        lines = data.decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-n_lines:])

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "not started" if self.proc is None else ("running" if self.alive() else f"rc={self.returncode}")
        return f"<ServerProcess pid={self.pid} {state}>"
