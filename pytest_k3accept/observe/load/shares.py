"""The worker's side of a split load run: :func:`run_share` runs one
:class:`~.placement.Share` with the single-process runner's ``_Run`` on the share's plan
(:class:`~.split.SharePlan`), in this process's event loop, from an agreed wall-clock start.

A placement's worker calls it (:mod:`.placement.local`, ``placement/ray.py``); the controller
never imports this module, so the runner it imports does not import the placements.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any, Callable, cast

from .placement import DELIVER_EVERY, Batch, Delivery, Share, ShareResult
from .split import SharePlan

if TYPE_CHECKING:  # pragma: no cover
    from .runner import _Plan


def share_plan(share: Share) -> SharePlan:
    """The plan ``share`` runs."""
    from .runner import _Plan

    return SharePlan(_Plan(share.units, share.start, share.requests), share.period,
                     share.lo, share.hi)


async def run_share(share: Share, start_at: float, *,
                    deliver: Callable[[Batch], Any] | None = None,
                    every: float = DELIVER_EVERY) -> ShareResult:
    """Run ``share`` from the wall-clock instant ``start_at`` (``time.time()``) in this
    process's event loop: the single-process runner's ``_Run`` on the share's plan.

    ``deliver(batch)`` is called every ``every`` s while it runs, and once at its end
    (``batch.final``), with a :class:`~.placement.Batch` of the requests that ended since
    the last call (so a worker lost mid-run loses only what came after its last delivery):
    the result then carries the figures and no records (the placement's
    :class:`~.placement.Delivery` holds them). Without ``deliver`` the result carries every
    record (one batch, delivered to itself)."""
    from .looplag import LoopLag
    from .runner import _Run, fewer_collections

    profile = dataclasses.replace(share.profile, concurrency=share.streams, processes=1)
    client = share.endpoint.client(timeout=profile.timeout or profile.max_seconds)
    own = Delivery(share.index) if deliver is None else None
    sink = own.add if own is not None else deliver
    assert sink is not None
    ticker: asyncio.Task[None] | None = None
    try:
        plan = cast("_Plan", share_plan(share))  # what _Run reads of a plan, a SharePlan has
        run = _Run(client, share.bodies, plan, profile)
        run.outbox = []
        sent = [0, 0]  # requests delivered, of them failed

        def batch(final: bool = False) -> Batch:
            ended, run.outbox = run.outbox or [], []  # one loop step: counts match ended
            sent[0] += len(ended)
            sent[1] += sum(1 for e in ended if not e[3].ok)
            return Batch(share.index, time.perf_counter() - t0, run.started, sent[0],
                         sent[1], run.started - sent[0],
                         [(slot, a - t0, b - t0, rec) for slot, a, b, rec in ended], final)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        started_at, t0, cpu0 = time.time(), time.perf_counter(), time.process_time()

        async def tick() -> None:
            while True:
                await asyncio.sleep(every)
                sink(batch())
        ticker = asyncio.create_task(tick()) if own is None else None
        probe = LoopLag().start()  # this worker's own loop (observe.load.looplag)
        with fewer_collections():
            stopped_by = await run.drive(profile.max_seconds)
        t_end, cpu = time.perf_counter(), time.process_time() - cpu0
        await probe.stop()
    finally:
        if ticker is not None:
            ticker.cancel()
        await client.aclose()
    _, meter, not_sent = run.conclude(t_end)  # the cut requests go into the outbox
    run.records.close()  # what the worker kept itself: the delivered batches hold it
    elapsed = t_end - t0
    sink(batch(final=True))
    result = ShareResult(share.index, elapsed=elapsed, cpu_seconds=cpu, stopped_by=stopped_by,
                         not_sent=not_sent, lag=run.schedule_lag, span=run.schedule_span,
                         started_at=started_at, worker=f"pid {os.getpid()}",
                         achieved=meter.result(elapsed), loop_lag=probe.figures())
    return own.complete(result) if own is not None else result


def run_share_sync(share: Share, start_at: float, *,
                   deliver: Callable[[Batch], Any] | None = None) -> ShareResult:
    """:func:`run_share` in a new event loop (a worker's entry point)."""
    return asyncio.run(run_share(share, start_at, deliver=deliver))
