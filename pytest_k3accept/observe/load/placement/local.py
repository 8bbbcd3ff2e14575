"""Shares in worker processes on this machine (``multiprocessing``, start method 'spawn').

Each share gets a fresh interpreter (spawned, never forked: the controller's event loop,
HTTP clients and threads are not copied) that imports the runner and its HTTP stack, says it
is ready, receives the agreed start instant and runs
:func:`~pytest_k3accept.observe.load.shares.run_share` in its own event loop. Each worker
has **its own pipe** to the controller (a duplex ``multiprocessing.Pipe``; the controller
closes its copy of the worker's end, so a dead worker is an end of file, never a hang): the
start goes down it, and up it come "ready", a :class:`~.Batch` of ended requests every
:data:`~.DELIVER_EVERY` s (sent by a thread of the worker, so its event loop never waits on
the pipe), the result and any error. One pipe per worker, not one queue for all: a worker
killed while writing leaves at most a cut message on its own pipe (read as its end), where
a shared queue's lock and stream would be left broken for the others.

The controller polls the pipes: each batch goes into the share's :class:`~.Delivery` (and
its counts to ``progress``); a worker that exits without a result, or outlives
``max_seconds`` + :data:`GRACE_S` after the start, is lost, with the records it delivered
(its :class:`ShareResult` says which pid, the exit code, after how long).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from typing import Any, Sequence

from . import GRACE_S, Delivery, ProgressCallback, Share, ShareResult

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


def _worker(share: Share, conn: Any) -> None:
    """A worker process's body: ready, wait for the start, run the share delivering its
    batches, send the result. Everything after "ready" goes up through one sender thread
    (in order: the batches, then the result or the error)."""
    import os
    import queue
    import threading

    out: "queue.SimpleQueue[Any]" = queue.SimpleQueue()

    def send() -> None:
        while (item := out.get()) is not None:
            conn.send(item)
    sender = threading.Thread(target=send, name="k3-load-deliver", daemon=True)
    try:
        from ...endpoint import client as _client  # noqa: F401 - the HTTP stack, before ready
        from ..shares import run_share_sync

        conn.send(("ready", os.getpid()))
        start_at = conn.recv()
        if start_at is None:
            return
        sender.start()
        out.put(("done", run_share_sync(share, start_at,
                                        deliver=lambda b: out.put(("batch", b)))))
    except BaseException as exc:  # noqa: BLE001 - said to the controller, then gone
        said = ("error", f"{type(exc).__name__}: {exc}")
        if sender.is_alive():
            out.put(said)
        else:
            try:
                conn.send(said)
            except OSError:
                pass
    finally:
        if sender.is_alive():
            out.put(None)
            sender.join()


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
        """Spawn one worker per share, start them at one instant, collect their batches
        and results."""
        ctx = multiprocessing.get_context("spawn")
        ends = [ctx.Pipe(duplex=True) for _ in shares]
        self.workers = [ctx.Process(target=_worker, args=(s, theirs), daemon=True,
                                    name=f"k3-load-share-{s.index}")
                        for s, (_, theirs) in zip(shares, ends)]
        run = _Collecting(shares, [mine for mine, _ in ends], progress)
        t_spawn = time.time()
        try:
            for p in self.workers:
                p.start()
            for _, theirs in ends:
                theirs.close()  # the worker holds its end: its death is our end of file
            start_at = await self._ready(shares, run, t_spawn)
            for k, s in enumerate(shares):
                if s.index in run.ready:
                    try:
                        run.conns[k].send(start_at)
                    except OSError:
                        pass  # died just now: found lost below
            deadline = start_at + max(s.max_seconds for s in shares) + GRACE_S
            await self._collect(shares, run, start_at, deadline)
        finally:
            for p in self.workers:
                if p.is_alive():
                    p.kill()
                p.join(timeout=5)
            for conn in run.conns:
                conn.close()
        return [run.results[s.index] for s in shares]

    async def _ready(self, shares: Sequence[Share], run: "_Collecting",
                     t_spawn: float) -> float:
        """Wait until every worker is ready (or lost); the agreed start instant."""
        while len(run.ready) + len(run.results) < len(shares):
            for k, (s, p) in enumerate(zip(shares, self.workers)):
                if s.index in run.ready or s.index in run.results:
                    continue
                run.drain(k)
                waited = time.time() - t_spawn
                if s.index not in run.ready and (not p.is_alive()
                                                 or waited > self.ready_timeout):
                    run.drain(k)
                    if s.index not in run.ready:
                        run.results[s.index] = self._lost(s, p, run, waited,
                                                          "before it was ready to start")
            await asyncio.sleep(_POLL)
        return time.time() + self.start_margin

    async def _collect(self, shares: Sequence[Share], run: "_Collecting", start_at: float,
                       deadline: float) -> None:
        """Read every worker's batches until each share has a result; dead or hung
        workers are lost with what they delivered."""
        while len(run.results) < len(shares):
            for k, (s, p) in enumerate(zip(shares, self.workers)):
                if s.index in run.results:
                    continue
                run.drain(k)
                hung = time.time() > deadline
                if s.index not in run.results and (not p.is_alive() or hung):
                    if hung:
                        p.kill()
                        p.join(timeout=5)
                    run.drain(k)  # what it wrote before it ended is still in the pipe
                    if s.index not in run.results:
                        run.results[s.index] = self._lost(
                            s, p, run, time.time() - start_at,
                            "mid-run" if not hung else
                            f"still running {GRACE_S:g} s past its max_seconds, stopped")
            await asyncio.sleep(_POLL)

    def _lost(self, share: Share, proc: Any, run: "_Collecting", after: float,
              when: str) -> ShareResult:
        """The result of a share whose worker is gone, saying what happened."""
        code = proc.exitcode
        how = (run.errors.get(share.index) or
               (f"exit code {code}" + (f" (signal {-code})" if code is not None and code < 0
                                       else "") if code is not None else "no exit code"))
        worker = f"pid {proc.pid}"
        return run.delivered[share.index].lost(
            f"worker {share.index + 1} of {share.count} ({worker}) died {when}, "
            f"{after:.1f} s after the start: {how}; the other shares' records are kept",
            worker=worker, elapsed=max(0.0, after))


class _Collecting:
    """The controller's side of one run: each worker's pipe, what it said, its delivery."""

    def __init__(self, shares: Sequence[Share], conns: list[Any],
                 progress: ProgressCallback | None) -> None:
        self.shares, self.conns, self.progress = list(shares), conns, progress
        self.ready: dict[int, int] = {}
        self.errors: dict[int, str] = {}
        self.results: dict[int, ShareResult] = {}
        self.delivered = {s.index: Delivery(s.index) for s in shares}
        self._ended: set[int] = set()

    def drain(self, k: int) -> None:
        """Read every message waiting on worker ``k``'s pipe (its end of file once)."""
        index, conn = self.shares[k].index, self.conns[k]
        while index not in self._ended:
            try:
                if not conn.poll():
                    return
                kind, body = conn.recv()
            except (EOFError, OSError):  # gone (or cut mid-message): nothing more comes
                self._ended.add(index)
                return
            if kind == "ready":
                self.ready[index] = body
            elif kind == "batch":
                self.delivered[index].take(body, self.progress)
            elif kind == "done":
                self.results[index] = self.delivered[index].complete(body)
            elif kind == "error":
                self.errors[index] = body
