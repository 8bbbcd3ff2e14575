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

from . import stats
from .placement import Share, ShareResult
from .split import SharePlan

if TYPE_CHECKING:  # pragma: no cover
    from .runner import _Plan


def share_plan(share: Share) -> SharePlan:
    """The plan ``share`` runs."""
    from .runner import _Plan

    return SharePlan(_Plan(share.units, share.start, share.requests), share.period,
                     share.lo, share.hi)


async def run_share(share: Share, start_at: float, *,
                    report: Callable[[int, int, int], Any] | None = None,
                    report_interval: float = 1.0) -> ShareResult:
    """Run ``share`` from the wall-clock instant ``start_at`` (``time.time()``) in this
    process's event loop: the single-process runner's ``_Run`` on the share's plan.
    ``report(done, errors, in_flight)`` is called every ``report_interval`` s."""
    from .runner import _Run, fewer_collections

    profile = dataclasses.replace(share.profile, concurrency=share.streams, processes=1)
    client = share.endpoint.client(timeout=profile.timeout or profile.max_seconds)
    ticker: asyncio.Task[None] | None = None
    try:
        plan = cast("_Plan", share_plan(share))  # what _Run reads of a plan, a SharePlan has
        run = _Run(client, share.bodies, plan, profile)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        started_at, t0, cpu0 = time.time(), time.perf_counter(), time.process_time()

        async def tick() -> None:
            while report is not None:
                await asyncio.sleep(report_interval)
                report(run.done, run.errors, run.in_flight)
        ticker = asyncio.create_task(tick()) if report is not None else None
        with fewer_collections():
            stopped_by = await run.drive(profile.max_seconds)
        t_end, cpu = time.perf_counter(), time.process_time() - cpu0
    finally:
        if ticker is not None:
            ticker.cancel()
        await client.aclose()
    # records, spans and not sent as lists: the spans go back for the merged concurrency,
    # the records as a list (a store pickles as its records anyway)
    records, measured, not_sent = run.finish(t_end)
    elapsed = t_end - t0
    spans = [(s - t0, e - t0) for s, e in measured]
    achieved = stats.concurrency(spans, elapsed)
    return ShareResult(share.index, records=records, elapsed=elapsed, cpu_seconds=cpu,
                       spans=spans, stopped_by=stopped_by, not_sent=not_sent,
                       lag=run.schedule_lag, span=run.schedule_span, started_at=started_at,
                       worker=f"pid {os.getpid()}", achieved=achieved)


def run_share_sync(share: Share, start_at: float, *,
                   report: Callable[[int, int, int], Any] | None = None) -> ShareResult:
    """:func:`run_share` in a new event loop (a worker's entry point)."""
    return asyncio.run(run_share(share, start_at, report=report))
