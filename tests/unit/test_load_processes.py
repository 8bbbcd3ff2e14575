"""A load run split over worker processes (issue 20 item 3, observe/load/split.py, shares.py).

Partitioning (closed: streams divided, remainder spread, the shares' units exactly the
plan's; open: one seeded schedule dealt out, its union exactly the single-process schedule),
the exact merge (percentiles of every record, not averaged), bad input, and real worker
processes (LocalPlacement, 'spawn') against the benchmark's stub server: a run of 2 equals
the counts of a run of 1, a worker killed mid-run leaves a partial run that says so."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import random
import re
import signal
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_k3accept.observe.endpoint.discover import Endpoint
from pytest_k3accept.observe.load import shares, split, stats
from pytest_k3accept.observe.load.placement import (Batch, Delivery, ProgressCallback, Share,
                                                    ShareResult)
from pytest_k3accept.observe.load.placement.local import LocalPlacement
from pytest_k3accept.observe.load.profile import LoadProfile, ProfileError
from pytest_k3accept.observe.load.requestset import from_requests
from pytest_k3accept.observe.load.result import RunRecord
from pytest_k3accept.observe.load.runner import _Plan, run_load, schedule

EP = Endpoint("http://127.0.0.1:9", "m")


def _units(lengths: Sequence[int]) -> list[list[int]]:
    out, k = [], 0
    for n in lengths:
        out.append(list(range(k, k + n)))
        k += n
    return out


def _split(profile: LoadProfile, lengths: Sequence[int], start: int, n: int,
           ) -> tuple[_Plan, list[Share]]:
    units = _units(lengths)
    plan = _Plan(units, start, profile.requests)
    bodies = [{"i": i} for i in range(sum(lengths))]
    return plan, split.partition(EP, profile, bodies, units, start, profile.requests, n)


plans = st.tuples(st.lists(st.integers(1, 3), min_size=1, max_size=6),
                  st.integers(0, 7), st.integers(1, 120))


@settings(max_examples=150, deadline=None)
@given(plans, st.integers(1, 40), st.data())
def test_closed_loop_streams_divided_and_units_exactly_the_plans(
        p: tuple[list[int], int, int], concurrency: int, data: st.DataObject) -> None:
    lengths, start, requests = p
    n = data.draw(st.integers(1, concurrency))
    profile = LoadProfile().replace("t", concurrency=concurrency, requests=requests)
    plan, parts = _split(profile, lengths, start, n)
    streams = [s.streams or 0 for s in parts]
    assert sum(streams) == concurrency and max(streams) - min(streams) <= 1
    assert streams == sorted(streams, reverse=True)  # the remainder goes to the first
    owned: list[int] = []
    for s in parts:
        view = shares.share_plan(s)
        slots: list[int] = []
        for j in range(len(view)):
            first, indices = view.unit(j)
            g = view.global_unit(j)
            assert indices == plan.unit(g)[1]  # the same requests as the plan's unit
            slots.extend(range(first, first + len(indices)))
            owned.append(g)
        assert slots == list(range(view.total))  # local slots dense, in order
    assert sorted(owned) == list(range(len(plan)))  # every unit exactly once
    assert sum(shares.share_plan(s).total for s in parts) == plan.total


@settings(max_examples=150, deadline=None)
@given(plans, st.floats(0.5, 5000), st.integers(0, 2**31), st.integers(1, 8),
       st.none() | st.integers(8, 64))
def test_open_loop_one_seeded_schedule_partitioned(p: tuple[list[int], int, int], rate: float,
                                                   seed: int, n: int, cap: int | None) -> None:
    lengths, start, requests = p
    profile = LoadProfile().replace("t", rate=rate, seed=seed, requests=requests,
                                    concurrency=cap)
    plan, parts = _split(profile, lengths, start, n)
    gen = schedule(rate, seed)
    single = [(k, next(gen)) for k in range(len(plan))]
    union: list[tuple[int, float]] = []
    for s in parts:
        view = shares.share_plan(s)
        times = list(view.arrivals(rate, seed))
        assert len(times) == len(view)
        union.extend(zip((view.global_unit(j) for j in range(len(view))), times))
    assert sorted(union) == single  # the very floats of the single-process schedule
    if cap is not None:
        assert sum(s.streams or 0 for s in parts) == cap


def _rec(ttft: float, e2e: float, ok: bool = True, gaps: Sequence[float] = ()) -> RunRecord:
    return RunRecord(ok, status=200 if ok else 500, error_kind=None if ok else "http-5xx",
                     ttft=ttft if ok else None, e2e=e2e if ok else None, itl=list(gaps),
                     prompt_tokens=10, completion_tokens=len(gaps) + 1, stream=True)


values = st.floats(0.001, 100.0, allow_nan=False)
records = st.lists(st.tuples(values, values, st.booleans(),
                             st.lists(values, max_size=4)), max_size=30)


@settings(max_examples=100, deadline=None)
@given(st.lists(records, min_size=1, max_size=4))
def test_merge_is_exact_over_all_records(per_share: list[list[Any]]) -> None:
    profile = LoadProfile().replace("t", concurrency=8, requests=120)
    _, parts = _split(profile, [1], 0, len(per_share))
    results = []
    every: list[RunRecord] = []
    for i, rows in enumerate(per_share):
        recs = [_rec(a, b, ok, g) for a, b, ok, g in rows]
        spans = [(0.01 * k, 0.01 * k + b) for k, (_, b, _, _) in enumerate(rows)]
        every.extend(recs)
        results.append(ShareResult(i, records=recs, spans=spans, elapsed=2.0 + i,
                                   cpu_seconds=0.5, not_sent=i, stopped_by="count"))
    merged = split.merge(list(reversed(results)), parts)  # order back by share index
    assert [r.ok for r in merged.records] == [r.ok for r in every]
    assert stats.summarize(merged.records, merged.elapsed) == stats.summarize(every, 1.0 + len(
        per_share))
    assert merged.not_sent == sum(range(len(per_share)))
    assert merged.achieved == stats.concurrency(
        [sp for r in results for sp in r.spans], merged.elapsed)
    assert merged.stopped_by == "count"


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 60), st.integers(1, 8), st.randoms(use_true_random=False),
       st.integers(0, 20), st.booleans())
def test_batches_in_any_order_rebuild_the_records_and_a_lost_share_counts_exactly(
        n: int, batches: int, rnd: random.Random, cut: int, lose: bool) -> None:
    # a share of n requests in slot order; they end in any order, delivered in batches
    # that arrive in any order; a lost worker's batches after the cut never arrive
    recs = [_rec(0.01 * (k + 1), 0.02 * (k + 1), ok=k % 5 != 3) for k in range(n)]
    order = list(range(n))
    rnd.shuffle(order)
    edges = sorted(rnd.randint(0, n) for _ in range(batches - 1))
    parts = [order[a:b] for a, b in zip([0, *edges], [*edges, n])]
    sent = parts[:min(cut, len(parts))] if lose else parts
    made, done = [], 0
    for t, part in enumerate(parts):
        done += len(part)
        made.append(Batch(0, 0.5 * (t + 1), started=min(n, done + 2), done=done, errors=0,
                          in_flight=min(n, done + 2) - done,
                          ended=[(k, 0.01 * k, 0.01 * k + 0.02, recs[k]) for k in part]))
    arriving = made[:len(sent)]
    rnd.shuffle(arriving)
    got = Delivery(0)
    for b in arriving:
        got.add(b)
    delivered = sorted(k for part in sent for k in part)
    profile = LoadProfile().replace("t", concurrency=2, requests=2 * max(n, 1))
    _, shares_ = _split(profile, [1], 0, 2)
    if lose:
        result = got.lost("worker 1 of 2 (pid 1) died mid-run", worker="pid 1")
    else:
        result = got.complete(ShareResult(0, elapsed=1.0, cpu_seconds=0.1))
    assert [r.ttft for r in result.records] == [recs[k].ttft for k in delivered]  # slot order
    assert len(result.spans) == len(delivered)
    if sent:
        assert result.last_delivery == dataclasses.replace(made[len(sent) - 1], ended=[])
    other = ShareResult(1, [_rec(0.1, 0.2)] * 3, spans=[(0.0, 0.2)] * 3, elapsed=1.0)
    merged = split.merge([result, other], shares_, planned=[n, 3])
    summary = stats.summarize(merged.records, merged.elapsed)
    merged.annotate(summary, "local", None)
    assert len(merged.records) == len(delivered) + 3
    assert summary["lost_requests"] == (n - len(delivered) if lose else 0)
    if lose and sent:
        last = made[len(sent) - 1]
        assert summary["partial"].endswith(
            f"its {len(delivered)} records delivered up to its last delivery {last.at:.1f} s "
            f"after its start are kept, {n - len(delivered)} of its {n} requests lost "
            f"({last.in_flight} in flight then, {n - last.started} not yet sent then)")
    elif lose:
        assert summary["partial"].endswith(f"all {n} requests of its share are lost")


def test_merged_percentiles_are_not_averaged() -> None:
    profile = LoadProfile().replace("t", concurrency=2, requests=4)
    _, parts = _split(profile, [1], 0, 2)
    fast = [_rec(0.1, 0.1) for _ in range(99)]
    slow = [_rec(9.0, 9.0)]
    merged = split.merge([ShareResult(0, fast, elapsed=1.0), ShareResult(1, slow, elapsed=1.0)],
                          parts)
    ttft = stats.summarize(merged.records, 1.0)["ttft"]
    assert ttft["p50"] == 0.1 and ttft["max"] == 9.0
    assert ttft["p99"] == stats.percentile([0.1] * 99 + [9.0], 99)
    assert ttft["p99"] != (stats.percentile([0.1] * 99, 99) + 9.0) / 2


def test_merge_without_spans_keeps_the_busy_time_and_sums_the_peaks() -> None:
    profile = LoadProfile().replace("t", concurrency=4, requests=4)
    _, parts = _split(profile, [1], 0, 2)
    a = ShareResult(0, [_rec(0.1, 1.0)], elapsed=2.0, achieved={"mean": 1.5, "max": 2.0})
    b = ShareResult(1, [_rec(0.1, 1.0)], elapsed=4.0, achieved={"mean": 1.0, "max": 2.0})
    merged = split.merge([a, b], parts)
    assert merged.elapsed == 4.0
    assert merged.achieved == {"mean": (1.5 * 2 + 1.0 * 4) / 4.0, "max": 4.0}


def test_a_time_bound_and_a_lost_share_are_said() -> None:
    profile = LoadProfile().replace("t", concurrency=4, requests=40)
    _, parts = _split(profile, [1], 0, 2)
    ran = ShareResult(0, [_rec(0.1, 0.2)] * 3, spans=[(0, 0.2)] * 3, elapsed=1.0,
                      cpu_seconds=0.25, stopped_by="time", not_sent=17, worker="pid 1")
    lost = ShareResult.lost(1, "worker 2 of 2 (pid 2) died mid-run: exit code -9", worker="pid 2")
    merged = split.merge([ran, lost], parts, planned=[20, 20])
    assert merged.stopped_by == "time" and merged.not_sent == 17 and len(merged.records) == 3
    summary = stats.summarize(merged.records, merged.elapsed)
    merged.annotate(summary, "local", None)
    assert summary["processes"] == 2 and summary["placement"] == "local"
    assert summary["partial"].startswith("process 2 of 2 lost: worker 2 of 2 (pid 2) died")
    assert summary["lost_requests"] == 20  # share 2's plan: its 2 streams' half of 40
    assert [s.streams for s in parts] == [2, 2]
    assert summary["client_cpu_by_process"] == [0.25, None]
    assert summary["client_cpu_share"] == 0.25
    assert summary["client_loop_lag"] is None  # no worker probed its loop: not measured


def test_each_workers_late_loop_is_said_and_the_worst_is_the_runs() -> None:
    profile = LoadProfile().replace("t", concurrency=4, requests=6)
    _, parts = _split(profile, [1], 0, 2)
    lag = {"interval": 0.05, "samples": 20, "max": 0.02, "late_wakeups": 1, "late_seconds": 0.02}
    a = ShareResult(0, [_rec(0.1, 0.2)] * 3, spans=[(0, 0.2)] * 3, elapsed=1.0,
                    cpu_seconds=0.1, worker="pid 1", loop_lag=lag)
    b = ShareResult(1, [_rec(0.1, 0.2)] * 3, spans=[(0, 0.2)] * 3, elapsed=1.0,
                    cpu_seconds=0.1, worker="pid 2", loop_lag={**lag, "max": 0.6})
    merged = split.merge([a, b], parts, planned=[3, 3])
    summary = stats.summarize(merged.records, merged.elapsed)
    merged.annotate(summary, "local", None)
    assert summary["client_loop_lag"]["max"] == 0.6
    assert summary["client_loop_lag"]["samples"] == 40
    assert summary["client_loop_lag_by_process"] == [lag, {**lag, "max": 0.6}]
    assert summary["client_limited"].startswith("the client itself was the limit: process 2 "
                                                "of 2 (pid 2): its event loop ran up to 0.60 s")
    assert "process 1" not in summary["client_limited"]


@pytest.mark.parametrize("value", [0, -1, 1.5, "two", True, None])
def test_a_bad_processes_value_is_a_profile_error_naming_the_field(value: Any) -> None:
    with pytest.raises(ProfileError, match=r"^t: processes: "):
        LoadProfile().replace("t", processes=value)


def test_more_processes_than_streams_is_refused_and_more_than_cores_runs_with_a_note() -> None:
    with pytest.raises(ProfileError, match="processes: 5 worker processes for 4 streams"):
        split.resolve(LoadProfile().replace("t", processes=5, concurrency=4), 8)
    with pytest.raises(ProfileError, match="for 2 the in-flight cap"):
        split.resolve(LoadProfile().replace("t", processes=3, rate=10.0, concurrency=2), 8)
    n, note = split.resolve(LoadProfile().replace("t", processes=4, concurrency=8), 2)
    assert n == 4 and note is not None
    assert note.startswith("processes = 4 on 2 cores: the workers share the cores")
    assert "not clamped" in note
    assert split.resolve(LoadProfile().replace("t", processes=2, rate=5.0), 2) == (2, None)


def test_auto_is_one_per_core_only_for_a_load_one_process_would_saturate() -> None:
    light = LoadProfile().replace("t", processes="auto", concurrency=16)
    assert split.resolve(light, 8) == (1, None)
    many = LoadProfile().replace("t", processes="auto", concurrency=split.AUTO_STREAMS)
    assert split.resolve(many, 8) == (8, None)
    fast = LoadProfile().replace("t", processes="auto", rate=split.AUTO_RATE)
    assert split.resolve(fast, 4) == (4, None)
    few = LoadProfile().replace("t", processes="auto", rate=split.AUTO_RATE, concurrency=2)
    assert split.resolve(few, 4) == (2, None)  # never more than an open loop's cap
    with pytest.raises(ProfileError):
        split.workers(EP, dataclasses.replace(few, processes=4), LocalPlacement())


def test_a_client_object_cannot_be_split() -> None:
    class Client:
        base_url, model = "http://x", "m"

        async def request(self, *a: Any, **k: Any) -> Any:
            raise AssertionError("never sent")
    prof = LoadProfile().replace("t", processes=2, concurrency=2)
    with pytest.raises(ProfileError, match="processes: 2 worker processes need an Endpoint"):
        asyncio.run(run_load(Client(), [{"messages": [{"role": "user", "content": "x"}]}],
                             prof, metrics=False))


# -- real worker processes against the benchmark's stub server ----------------------------

@pytest.fixture(scope="module")
def stub() -> Iterator[Endpoint]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import stub_server  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    with stub_server.spawn(chunks=8, itl_ms=5.0) as srv:
        yield Endpoint(srv.base_url, stub_server.MODEL)


REQUESTS = from_requests([{"messages": [{"role": "user", "content": f"q{i}"}]}
                          for i in range(5)])


@pytest.mark.parametrize("loop", [{"concurrency": 4}, {"rate": 100.0, "concurrency": 4}])
def test_two_processes_send_the_plan_of_one(stub: Endpoint, loop: dict[str, Any]) -> None:
    prof = LoadProfile().replace("t", requests=40, **loop)
    one = asyncio.run(run_load(stub, REQUESTS, prof, metrics=False))
    two = asyncio.run(run_load(stub, REQUESTS, prof.replace("t", processes=2), metrics=False))
    for r in (one, two):
        assert (r.summary["requests"], r.summary["ok"], r.not_sent) == (40, 40, 0)
        assert r.summary["completion_tokens"] == one.summary["completion_tokens"]
    assert two.summary["processes"] == 2 and one.summary["processes"] == 1
    assert two.summary["placement"] == "local" and two.summary["partial"] is None
    assert len(two.summary["client_cpu_by_process"]) == 2
    assert two.achieved_concurrency["max"] <= 4
    assert two.stopped_by == "count" and two.profile.processes == 2
    assert two.as_dict()["profile"]["processes"] == 2
    assert two.evidence("r1", "test").processes == 2  # the record's typed load evidence
    assert one.evidence("r0", "test").processes == 1
    assert sorted(len(r.itl) for r in two.records) == sorted(len(r.itl) for r in one.records)


class KillSecond(LocalPlacement):
    """Kills worker 2 (SIGKILL) once a batch of its own delivered at least ``after`` ended
    requests; ``seen`` is what the controller had of it then."""

    def __init__(self, after: int = 1) -> None:
        super().__init__()
        self.after, self.seen = after, -1

    async def run(self, shares_: Sequence[Share], *,
                  progress: ProgressCallback | None = None) -> list[ShareResult]:
        def report(index: int, done: int, errors: int, in_flight: int) -> None:
            if index == 1 and done >= self.after and self.seen < 0:
                self.seen = done
                os.kill(self.workers[1].pid, signal.SIGKILL)
            if progress is not None:
                progress(index, done, errors, in_flight)
        return await super().run(shares_, progress=report)


def test_a_worker_killed_mid_run_keeps_what_it_delivered(stub: Endpoint) -> None:
    # 2 streams x 30 requests of 8 chunks 5 ms apart: a few seconds a share, a batch each
    # 0.5 s; worker 2 is SIGKILLed once a batch of it brought at least 3 records
    prof = LoadProfile().replace("t", requests=60, concurrency=2, processes=2)
    place = KillSecond(after=3)
    r = asyncio.run(run_load(stub, REQUESTS, prof, metrics=False, placement=place))
    partial = r.summary["partial"]
    assert partial.startswith("process 2 of 2 lost: worker 2 of 2 (pid ")
    assert "died mid-run" in partial and "exit code -9 (signal 9)" in partial
    assert "the other shares' records are kept" in partial
    # the killed worker's delivered records are in the merged result, the counts add up
    kept = r.summary["requests"] - 30  # share 1 ran whole: its 30
    assert kept >= place.seen >= 3, (kept, place.seen)
    assert r.summary["ok"] == r.summary["requests"] == len(r.records)
    assert r.summary["lost_requests"] == 30 - kept
    m = re.search(r"its (\d+) records delivered up to its last delivery ([\d.]+) s after "
                  r"its start are kept, (\d+) of its 30 requests lost \((\d+) in flight "
                  r"then, (\d+) not yet sent then\)$", partial)
    assert m, partial
    assert int(m[1]) == kept and int(m[3]) == 30 - kept
    assert int(m[4]) + int(m[5]) == 30 - kept  # lost: in flight, or not sent by then
    assert r.summary["client_cpu_by_process"][1] is None
    assert "PARTIAL" in r.line()
    assert r.evidence("r1", "test").partial == partial
    assert math.isfinite(r.elapsed)
    # every percentile is over every delivered record (both shares')
    again = stats.summarize(list(r.records), r.elapsed)
    assert r.summary["ttft"] == again["ttft"] and r.summary["e2e"] == again["e2e"]


def test_a_run_split_in_two_delivers_every_record_once(stub: Endpoint) -> None:
    # long enough for several batches a share: what came in batches is the whole run
    prof = LoadProfile().replace("t", requests=80, concurrency=2, processes=2)
    seen: list[tuple[int, int]] = []

    class Watch(LocalPlacement):
        async def run(self, shares_: Sequence[Share], *,
                      progress: ProgressCallback | None = None) -> list[ShareResult]:
            return await super().run(shares_, progress=lambda i, d, e, f: seen.append((i, d)))
    r = asyncio.run(run_load(stub, REQUESTS, prof, metrics=False, placement=Watch()))
    assert r.summary["requests"] == r.summary["ok"] == 80 and r.summary["partial"] is None
    assert r.summary["lost_requests"] == 0
    assert max(d for i, d in seen if i == 0) == max(d for i, d in seen if i == 1) == 40
    assert len(seen) > 2  # batches while it ran, not one at the end
