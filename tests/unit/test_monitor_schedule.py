"""observe/load/monitor.py: the sampling schedule. The first gauge sample is taken at the
run's start (before any request of it is in flight); the second 50 ms in, so a run shorter
than one interval is still seen at work; then one per interval. ``sample`` is stubbed (a unit
test of the schedule, not of the scrape)."""

from __future__ import annotations

import asyncio
import time

from pytest_k3accept.observe.load.monitor import Monitor


def test_the_second_sample_comes_50_ms_after_the_first_then_one_per_interval() -> None:
    mon = Monitor(None, True, interval=0.25)
    times: list[float] = []

    async def sample() -> None:
        times.append(time.perf_counter())

    mon.sample = sample  # type: ignore[method-assign]

    async def run() -> None:
        t0 = time.perf_counter()
        task = asyncio.create_task(mon.watch(None, t0, None, 10.0))
        await asyncio.sleep(0.6)
        task.cancel()

    asyncio.run(run())
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) >= 3, times
    assert gaps[0] < 0.15, gaps  # the 50 ms sample, not a whole interval later
    assert all(g >= 0.2 for g in gaps[1:]), gaps  # then the interval
