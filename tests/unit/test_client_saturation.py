"""Where the client itself was the limit (issue 20, item 7): the signs one at a time
(:func:`saturation.client_limit`), the runner measuring them on a real run of its own loop
(a client stand-in that burns CPU per request, as a saturated Python client does), and the
note reaching the result line, the typed evidence, the headroom judgement and the SLOs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pytest_k3accept.checks import headroom, slo
from pytest_k3accept.observe.endpoint.client import RequestResult
from pytest_k3accept.observe.load import looplag, saturation
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.runner import run_load

from test_load_runner import rset


def test_no_sign_no_limit() -> None:
    assert saturation.client_limit(concurrency=16, rate=None, started=200, elapsed=10.0,
                                   cpu_seconds=2.0, achieved={"mean": 15.8}) is None


def test_a_full_core_is_a_limit_with_its_figure() -> None:
    why = saturation.client_limit(concurrency=16, rate=None, started=200, elapsed=10.0,
                                  cpu_seconds=9.6, achieved={"mean": 15.9})
    assert why and "96% of one core" in why and "the client itself was the limit" in why


def test_an_open_loop_behind_its_schedule_is_a_limit_even_with_cpu_to_spare() -> None:
    why = saturation.client_limit(concurrency=None, rate=1000.0, started=4000, elapsed=10.0,
                                  cpu_seconds=3.0, achieved={"mean": 40.0}, lag=6.0, span=4.0)
    assert why and "started up to 6.00 s behind the 1000/s schedule" in why
    # on time (a few ms of jitter), however the realised rate compares with `rate`
    assert saturation.client_limit(concurrency=None, rate=400.0, started=30, elapsed=0.5,
                                   cpu_seconds=0.1, achieved={"mean": 4.0}, lag=0.004,
                                   span=0.06) is None


def test_a_closed_loop_short_of_its_streams_counts_only_with_the_cpu_at_its_ceiling() -> None:
    hot = saturation.client_limit(concurrency=512, rate=None, started=5000, elapsed=10.0,
                                  cpu_seconds=9.5, achieved={"mean": 300.0})
    assert hot and "kept 300.0 requests in flight of the 512 requested" in hot
    # a slow server or few waves explain a low mean; a cool client is not the limit
    assert saturation.client_limit(concurrency=512, rate=None, started=5000, elapsed=10.0,
                                   cpu_seconds=2.0, achieved={"mean": 300.0}) is None
    few = saturation.client_limit(concurrency=512, rate=None, started=600, elapsed=10.0,
                                  cpu_seconds=9.5, achieved={"mean": 300.0})
    assert few and "in flight" not in few  # the core alone is said, not the in-flight


class BusyClient:
    """Answers at once after burning ``cpu`` seconds of this process's CPU per request: the
    client's own work, as a saturated Python load generator spends it."""

    base_url = "http://busy"
    model = "busy"

    def __init__(self, cpu: float) -> None:
        self.cpu = cpu

    async def request(self, path: str, body: dict[str, Any], *, stream: bool = False,
                      ) -> RequestResult:
        end = time.process_time() + self.cpu
        while time.process_time() < end:
            pass
        return RequestResult(ok=True, status=200, ttft=0.001, e2e=0.002, itl=[0.001],
                             prompt_tokens=10, completion_tokens=body["max_tokens"],
                             stream=stream)


@pytest.mark.asyncio
async def test_the_runner_says_so_when_its_schedule_falls_behind() -> None:
    # 200 requests/s asked; each costs the client 20 ms of CPU: at most ~50/s can start
    prof = LoadProfile().replace("t", concurrency=None, rate=200.0, requests=40,
                                 output_tokens=2, max_seconds=30.0)
    res = await run_load(BusyClient(0.02), rset(["a"]), prof, metrics=False)
    limited = res.summary["client_limited"]
    assert limited and "behind the 200/s schedule" in limited, res.summary
    assert 0 < res.summary["client_cpu_share"] <= 1.5  # the CPU the client got (a loaded
    # machine gives it less than a core: the schedule's lag still shows the limit)
    assert "CLIENT-LIMITED: the client itself was the limit" in res.line()
    run = res.evidence("r1", "profile")
    assert run.client_limited == limited and run.to_data()["client_limited"] == limited
    verdict = headroom.decide(res, min_free=0.1)
    assert any(n.startswith("judged on a saturated client") for n in verdict.notes), verdict
    judged = slo.judged(res.summary, slo.SLO.from_mapping({"e2e_p99": 0.001}))
    assert judged[0]["note"] == slo.SATURATED and judged[0]["ok"] is False


@pytest.mark.asyncio
async def test_a_client_with_time_to_spare_is_not_called_the_limit() -> None:
    prof = LoadProfile().replace("t", concurrency=None, rate=20.0, requests=10,
                                 output_tokens=2, max_seconds=30.0)
    res = await run_load(BusyClient(0.0), rset(["a"]), prof, metrics=False)
    lag = res.summary["client_loop_lag"]
    assert lag and lag["samples"] >= 5 and lag["interval"] == looplag.INTERVAL, lag
    if lag["max"] >= saturation.MIN_LOOP_LAG:  # this test process itself starved (a loaded
        # machine): then that, and only that, must be said
        assert "event loop ran up to" in res.summary["client_limited"], res.summary
        pytest.skip(f"this process's loop was {lag['max']:.2f} s late: no idle client to test")
    assert res.summary["client_limited"] is None, res.summary
    assert "CLIENT-LIMITED" not in res.line()
    run = res.evidence("r1", "profile")
    assert run.client_limited is None and run.client_loop_lag == lag["max"]


def test_a_late_event_loop_is_a_limit_with_its_figure() -> None:
    why = saturation.client_limit(concurrency=4, rate=None, started=40, elapsed=10.0,
                                  cpu_seconds=0.5, achieved={"mean": 4.0}, loop_lag=8.4)
    assert why and "event loop ran up to 8.40 s late" in why and "50 ms" in why
    # jitter below the bound, or not measured, says nothing
    for lag in (0.05, None):
        assert saturation.client_limit(concurrency=4, rate=None, started=40, elapsed=10.0,
                                       cpu_seconds=0.5, achieved={"mean": 4.0},
                                       loop_lag=lag) is None


@pytest.mark.asyncio
async def test_the_probe_measures_a_blocked_loop() -> None:
    probe = looplag.LoopLag(0.01).start()
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # a callback that holds the loop (no CPU: a descheduled process alike)
    await asyncio.sleep(0.05)
    await probe.stop()
    figures = probe.figures()
    assert figures and figures["max"] >= 0.25 and figures["late_wakeups"] >= 1, figures
    assert figures["late_seconds"] >= figures["max"]
    assert looplag.LoopLag().figures() is None  # never woke: not measured, not 0


class StallingClient(BusyClient):
    """Holds the event loop for ``stall`` s once, at its third request, without using CPU
    (``time.sleep``: what a client descheduled by a busy machine looks like to its loop)."""

    def __init__(self, stall: float) -> None:
        super().__init__(0.0)
        self.stall, self.n = stall, 0

    async def request(self, path: str, body: dict[str, Any], *, stream: bool = False,
                      ) -> RequestResult:
        self.n += 1
        if self.n == 3:
            time.sleep(self.stall)
        await asyncio.sleep(0.01)
        return await super().request(path, body, stream=stream)


@pytest.mark.asyncio
async def test_the_runner_says_so_when_its_loop_stalled_with_cpu_to_spare() -> None:
    prof = LoadProfile().replace("t", concurrency=2, rate=None, requests=8, output_tokens=2,
                                 max_seconds=30.0)
    res = await run_load(StallingClient(0.4), rset(["a"]), prof, metrics=False)
    s = res.summary
    assert s["client_loop_lag"]["max"] >= 0.35, s["client_loop_lag"]
    assert s["client_cpu_share"] < saturation.CPU_SHARE  # the CPU sign alone misses it
    assert "event loop ran up to" in s["client_limited"], s
    assert "CLIENT-LIMITED" in res.line()
    assert res.evidence("r1", "profile").client_loop_lag == s["client_loop_lag"]["max"]
