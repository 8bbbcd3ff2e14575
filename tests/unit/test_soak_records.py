"""Long runs (issue 17 item 4): what a run keeps of each request, and a plan that is not
listed. The kept records (RunRecord: numbers and packed inter-token gaps) give the very
summary the full RequestResults give (exact percentiles, same floats), the plan computed per
unit is the list the runner used to build, and a soak bound far above what is sent costs no
memory for the requests it never sends. The RSS figures are benchmarks/soak.py's."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_k3accept.observe.endpoint.client import RequestResult
from pytest_k3accept.observe.load import stats
from pytest_k3accept.observe.load.result import RunRecord
from pytest_k3accept.observe.load.runner import _Plan, run_load
from test_load_runner import FakeClient, profile, rset

SECONDS = st.floats(min_value=0.0, max_value=120.0, allow_nan=False)
RESULTS = st.builds(
    RequestResult, ok=st.booleans(), status=st.sampled_from([200, 500, None]),
    error=st.one_of(st.none(), st.text(max_size=20)),
    error_kind=st.sampled_from([None, "timeout", "http-5xx", "connection"]),
    ttft=st.one_of(st.none(), SECONDS), itl=st.lists(SECONDS, max_size=30),
    e2e=st.one_of(st.none(), SECONDS),
    prompt_tokens=st.one_of(st.none(), st.integers(0, 10**6)),
    completion_tokens=st.one_of(st.none(), st.integers(0, 4096)),
    cached_tokens=st.one_of(st.none(), st.integers(0, 10**6)),
    text=st.text(max_size=50), stream=st.booleans(),
    proxy=st.sampled_from([None, "nginx/1.22.1"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(RESULTS, max_size=40), st.floats(min_value=0.001, max_value=1e4))
def test_kept_records_summarise_exactly_like_the_full_results(
        results: list[RequestResult], elapsed: float) -> None:
    kept = [RunRecord.of(r) for r in results]
    assert stats.summarize(kept, elapsed) == stats.summarize(results, elapsed)
    for r, k in zip(results, kept):
        assert list(k.itl) == r.itl and k.tpot == r.tpot  # the same floats, bit for bit
        assert not hasattr(k, "text") and not hasattr(k, "__dict__")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(SECONDS, max_size=20), min_size=1, max_size=20))
def test_pooled_itl_percentiles_are_the_exact_ones(streams: list[list[float]]) -> None:
    kept = [RunRecord(True, ttft=0.1, itl=s, e2e=1.0) for s in streams]
    pooled = [g for s in streams for g in s]
    itl = stats.summarize(kept, 1.0)["itl"]
    if not pooled:
        assert itl is None
        return
    for q in stats.PERCENTILES:
        assert itl[f"p{q:g}"] == stats.percentile(pooled, q)
    assert (itl["min"], itl["max"], itl["count"]) == (min(pooled), max(pooled), len(pooled))
    assert itl["mean"] == math.fsum(pooled) / len(pooled)


def _listed(units: list[list[int]], start: int, count: int) -> tuple[list[list[int]], int]:
    """The plan as the runner listed it before (every unit built up front)."""
    out: list[list[int]] = []
    left, i = count, start
    while left > 0 and units:
        unit = list(units[i % len(units)][:left])
        out.append(unit)
        left -= len(unit)
        i += 1
    return out, i


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=5), max_size=6),
       st.integers(0, 20), st.integers(0, 60))
def test_the_computed_plan_is_the_listed_one(units: list[list[int]], start: int,
                                             count: int) -> None:
    plan = _Plan(units, start, count)
    listed, nxt = _listed(units, start, count)
    assert plan.units_list() == listed and len(plan) == len(listed)
    assert plan.total == sum(len(u) for u in listed)
    if units:
        assert plan.next == nxt
    slots = [plan.unit(k)[0] for k in range(len(plan))]
    assert slots == [sum(len(u) for u in listed[:k]) for k in range(len(listed))]


@pytest.mark.asyncio
async def test_a_soak_bound_far_above_what_is_sent_costs_nothing_up_front() -> None:
    # a soak profile: bounded by time, its request bound one it cannot reach
    t0 = time.perf_counter()
    res = await run_load(FakeClient(delay=0.01), rset(["a", "b"]),
                         profile(concurrency=4, requests=10**9, max_seconds=0.5),
                         metrics=False)
    assert time.perf_counter() - t0 < 5.0  # no billion-entry plan or record list built
    assert res.stopped_by == "time" and 0 < len(res.records) < 10_000
    assert res.summary["requests"] + res.summary["cut"] + res.not_sent == 10**9
    assert all(isinstance(r, RunRecord) for r in res.records)


def test_a_shared_message_is_kept_once() -> None:
    a = RunRecord.of(RequestResult(ok=False, error="HTTP 500: " + "x" * 50))
    b = RunRecord.of(RequestResult(ok=False, error="HTTP 500: " + "x" * 50))
    assert a.error is b.error and a.error == "HTTP 500: " + "x" * 50


def test_records_read_the_way_results_do() -> None:
    # what the checks read: the SLO goodput's tpot, prefix_ab's cached tokens, stall's error
    r: Any = RequestResult(ok=True, status=200, ttft=0.5, e2e=2.5, completion_tokens=5,
                           itl=[0.5] * 4, cached_tokens=128, text="hello", stream=True)
    k = RunRecord.of(r)
    assert (k.tpot, k.cached_tokens, k.status, k.stream) == (0.5, 128, 200, True)
    assert stats.is_good(k, ttft=1.0, tpot=0.6) and not stats.is_good(k, e2e=2.0)
    k.error = "annotated"  # stall.annotate rewrites a stalled request's message
    assert k.error == "annotated"


VALUES = st.lists(st.one_of(st.floats(min_value=-1e300, max_value=1e300),
                            st.floats(min_value=0.0, max_value=0.05),
                            st.sampled_from([0.0, -0.0, 0.001, 0.001, math.nan, math.inf])),
                  max_size=120)


@settings(max_examples=300, deadline=None)
@given(VALUES, st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=4),
       st.sampled_from([1, 2, 5, 65_536]))
def test_percentiles_selected_without_sorting_are_the_sorted_ones(
        values: list[float], percentiles: list[float], keep: int) -> None:
    # a soak's pooled ITL (over stats.SELECT_ABOVE gaps) is never copied into a sorted list:
    # the figures are the same floats as the sorted path's, however small the kept windows
    from array import array

    saved, stats._KEEP = stats._KEEP, keep
    try:
        assert stats._selected(array("d", values), percentiles) == stats.distribution(
            values, percentiles)
        data = sorted(v for v in values if v == v)
        ranks = range(len(data))
        assert stats.order_statistics(array("d", values), ranks) == dict(zip(ranks, data))
    finally:
        stats._KEEP = saved


def test_a_soaks_pooled_itl_is_selected_not_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    rng = random.Random(7)
    # concentrated gaps with rare long ones, as a stub or a real engine gives them
    streams = [[rng.expovariate(5000.0) if rng.random() < 0.99 else rng.uniform(0.05, 2.0)
                for _ in range(50)] for _ in range(400)]
    kept = [RunRecord(True, ttft=0.1, itl=s, e2e=1.0) for s in streams]
    exact = stats.summarize(kept, 1.0)["itl"]
    monkeypatch.setattr(stats, "SELECT_ABOVE", 1000)  # 20,000 gaps: the counting path
    monkeypatch.setattr(stats, "_KEEP", 100)  # windows refined, never more than 100 kept
    assert stats.summarize(kept, 1.0)["itl"] == exact
