"""observe/load/monitor.py: the sampling schedule. The first gauge sample is taken at the
run's start (before any request of it is in flight); the second 50 ms in, so a run shorter
than one interval is still seen at work; then one per interval, or one every 20 ms while
requests are in flight and no sample has caught the server at work. ``sample`` is stubbed (a
unit test of the schedule, not of the scrape)."""

from __future__ import annotations

import asyncio
import time

from pytest_k3accept.observe.load.monitor import Monitor


class _Run:
    in_flight = 1


def _watch(mon: Monitor, run: object, seconds: float) -> None:
    async def go() -> None:
        task = asyncio.create_task(mon.watch(run, time.perf_counter(), None, 10.0))
        await asyncio.sleep(seconds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(go())


def test_the_second_sample_comes_50_ms_after_the_first_then_one_per_interval() -> None:
    mon = Monitor(None, True, interval=0.25)
    times: list[float] = []

    async def sample() -> None:
        times.append(time.perf_counter())

    mon.sample = sample  # type: ignore[method-assign]
    _watch(mon, None, 0.6)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) >= 3, times
    assert gaps[0] < 0.15, gaps  # the 50 ms sample, not a whole interval later
    assert all(g >= 0.2 for g in gaps[1:]), gaps  # then the interval


def test_idle_samples_while_requests_are_in_flight_come_every_20_ms_until_one_is_busy() -> None:
    """A short run on a busy host: the requests fell between the 50 ms sample and the next
    interval's (CI: 3 samples, none busy, peak unknown). While requests are in flight and
    every sample showed an idle server, samples come every CATCH_UP_S; once one caught the
    server at work, the interval again."""
    mon = Monitor(None, True, interval=0.25)
    times: list[float] = []

    async def sample() -> None:
        times.append(time.perf_counter())
        mon.busy_samples = int(len(times) >= 6)  # the sixth sample catches a request

    mon.sample = sample  # type: ignore[method-assign]
    _watch(mon, _Run(), 0.7)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(g < 0.1 for g in gaps[:5]), gaps  # 50 ms, then catch-up samples
    assert all(g >= 0.2 for g in gaps[5:]), gaps  # caught: one per interval
    assert len(gaps) > 5, gaps
    assert mon.catch_up_samples == 4


def test_catch_up_stops_without_requests_in_flight_and_after_its_budget() -> None:
    mon = Monitor(None, True, interval=0.25)
    mon.busy_samples = 0
    idle = _Run()
    idle.in_flight = 0
    assert not mon.catching_up(idle)
    assert mon.catching_up(_Run())
    mon.catch_up_samples = 100
    assert not mon.catching_up(_Run())  # a server whose gauges never move
    mon.catch_up_samples, mon.busy_samples = 0, None
    assert not mon.catching_up(_Run())  # no running / waiting gauge to tell
