"""Shares in worker processes on this machine (``multiprocessing``, start method 'spawn').

Each share gets a fresh interpreter (spawned, never forked: the controller's event loop,
HTTP clients and threads are not copied) that imports the runner and its HTTP stack, says it
is ready, receives the agreed start instant over its own pipe and runs
:func:`~pytest_k3accept.observe.load.shares.run_share` in its own event loop. Results and
progress come back over one queue, which the controller drains while it polls the workers:
a worker that exits without a result, or outlives ``max_seconds`` + :data:`GRACE_S` after
the start, is lost (its :class:`ShareResult` says which pid, the exit code, after how long).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue as _queue
import time
from typing import Any, Sequence

from . import GRACE_S, ProgressCallback, Share, ShareResult

#: seconds between the last worker's "ready" and the agreed start
START_MARGIN = 0.3
#: seconds a spawned worker may take to import and say it is ready
READY_TIMEOUT = 120.0
_POLL = 0.05


def cores() -> int:
    """CPU cores this process may run on (its affinity mask, else the machine's count)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _worker(share: Share, out: Any, conn: Any) -> None:
    """A worker process's body: ready, wait for the start, run the share, send the result."""
    import os

    try:
        from ...endpoint import client as _client  # noqa: F401 - the HTTP stack, before ready
        from ..shares import run_share_sync

        out.put(("ready", share.index, os.getpid()))
        start_at = conn.recv()
        if start_at is None:
            return

        def report(done: int, errors: int, in_flight: int) -> None:
            out.put(("progress", share.index, (done, errors, in_flight)))
        out.put(("done", share.index, run_share_sync(share, start_at, report=report)))
    except BaseException as exc:  # noqa: BLE001 - said to the controller, then gone
        out.put(("error", share.index, f"{type(exc).__name__}: {exc}"))


class LocalPlacement:
    """Worker processes on this machine, one per share (see the module docstring)."""

    name = "local"

    def __init__(self, start_margin: float = START_MARGIN,
                 ready_timeout: float = READY_TIMEOUT) -> None:
        self.start_margin, self.ready_timeout = start_margin, ready_timeout
        #: the worker processes of the current run (share order), for tests and messages
        self.workers: list[Any] = []

    def capacity(self) -> int:
        """Cores this process may run on."""
        return cores()

    async def run(self, shares: Sequence[Share], *,
                  progress: ProgressCallback | None = None) -> list[ShareResult]:
        """Spawn one worker per share, start them at one instant, collect their results."""
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        pipes = [ctx.Pipe(duplex=False) for _ in shares]
        self.workers = [ctx.Process(target=_worker, args=(s, out, recv), daemon=True,
                                    name=f"k3-load-share-{s.index}")
                        for s, (recv, _) in zip(shares, pipes)]
        results: dict[int, ShareResult] = {}
        ready: dict[int, int] = {}
        errors: dict[int, str] = {}
        t_spawn = time.time()
        for p in self.workers:
            p.start()
        try:
            start_at = await self._ready(shares, out, ready, errors, results, progress,
                                         t_spawn)
            for (_, send), s in zip(pipes, shares):
                if s.index in ready:
                    send.send(start_at)
            deadline = start_at + max(s.max_seconds for s in shares) + GRACE_S
            await self._collect(shares, out, results, errors, progress, start_at, deadline)
        finally:
            for p in self.workers:
                if p.is_alive():
                    p.kill()
                p.join(timeout=5)
            out.close()
        return [results[s.index] for s in shares]

    async def _ready(self, shares: Sequence[Share], out: Any, ready: dict[int, int],
                     errors: dict[int, str], results: dict[int, ShareResult],
                     progress: ProgressCallback | None, t_spawn: float) -> float:
        """Wait until every worker is ready (or lost); the agreed start instant."""
        while len(ready) + len(results) < len(shares):
            self._drain(out, ready, errors, results, progress, t_spawn)
            for s, p in zip(shares, self.workers):
                if s.index in ready or s.index in results:
                    continue
                waited = time.time() - t_spawn
                if not p.is_alive() or waited > self.ready_timeout:
                    self._drain(out, ready, errors, results, progress, t_spawn, wait=0.5)
                    if s.index not in ready and s.index not in results:
                        results[s.index] = self._lost(s, p, waited, errors, "before it was "
                                                      "ready to start")
            await asyncio.sleep(_POLL)
        return time.time() + self.start_margin

    async def _collect(self, shares: Sequence[Share], out: Any,
                       results: dict[int, ShareResult], errors: dict[int, str],
                       progress: ProgressCallback | None, start_at: float,
                       deadline: float) -> None:
        """Drain results until every share has one; dead or hung workers are lost."""
        ready: dict[int, int] = {}
        while len(results) < len(shares):
            self._drain(out, ready, errors, results, progress, start_at)
            for s, p in zip(shares, self.workers):
                if s.index in results:
                    continue
                hung = time.time() > deadline
                if not p.is_alive() or hung:
                    self._drain(out, ready, errors, results, progress, start_at, wait=0.5)
                    if s.index not in results:
                        if hung:
                            p.kill()
                            p.join(timeout=5)
                        results[s.index] = self._lost(
                            s, p, time.time() - start_at, errors,
                            "mid-run" if not hung else
                            f"still running {GRACE_S:g} s past its max_seconds, stopped")
            await asyncio.sleep(_POLL)

    def _drain(self, out: Any, ready: dict[int, int], errors: dict[int, str],
               results: dict[int, ShareResult], progress: ProgressCallback | None,
               since: float, wait: float = 0.0) -> None:
        """Read every message waiting on the queue (``wait``: block that long for the first)."""
        while True:
            try:
                kind, index, body = out.get(timeout=wait) if wait else out.get_nowait()
            except (_queue.Empty, EOFError, OSError):
                return
            wait = 0.0
            if kind == "ready":
                ready[index] = body
            elif kind == "progress" and progress is not None:
                try:
                    progress(index, *body)
                except Exception:  # noqa: BLE001 - a broken printer must not end the run
                    pass
            elif kind == "done":
                results[index] = body
            elif kind == "error":
                errors[index] = body

    def _lost(self, share: Share, proc: Any, after: float, errors: dict[int, str],
              when: str) -> ShareResult:
        """The result of a share whose worker is gone, saying what happened."""
        code = proc.exitcode
        how = (errors.get(share.index) or
               (f"exit code {code}" + (f" (signal {-code})" if code is not None and code < 0
                                       else "") if code is not None else "no exit code"))
        worker = f"pid {proc.pid}"
        return ShareResult.lost(
            share.index, f"worker {share.index + 1} of {share.count} ({worker}) died {when}, "
            f"{after:.1f} s after the start: {how}; its records are lost, the other "
            "shares' are kept", worker=worker, elapsed=max(0.0, after))
