"""Long runs without growing memory (issue 17 item 4): a run's records and value columns
spill to disk past a threshold (observe/load/store.py) and every figure stays the exact one.

The reference is the in-memory code as it was before the store: :func:`old_summarize`,
:func:`old_concurrency` and :func:`old_measured_context` below are copied from stats.py /
result.py of commit 6cf9301, and Hypothesis checks that the store (spilled after one record,
frames of one or two, columns of one float) gives the same numbers on the same records. The
RSS figures are benchmarks/soak.py's (docs/load.md, "Long runs")."""

from __future__ import annotations

import errno
import math
import os
import pickle
import struct
from array import array
from typing import Any, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_k3accept.observe.endpoint.client import RequestResult
from pytest_k3accept.observe.load import buffering, stall, stats, store
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.result import LoadResult, RunRecord
from pytest_k3accept.observe.load.runner import run_load
from pytest_k3accept.observe.load.store import FloatColumn, RecordStore
from test_load_runner import FakeClient, profile, rset


def _without_cut(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary less ``cut`` (requests cut at the time bound: newer than old_summarize)."""
    assert summary.pop("cut") == 0
    return summary


def old_summarize(records: Sequence[Any], elapsed: float) -> dict[str, Any]:
    """stats.summarize before the store (6cf9301): lists of the ok records, several passes."""
    ok = [r for r in records if r.ok]
    burst = buffering.judge(ok)
    unreliable = burst["unreliable"]
    n_ok = len(ok)
    gaps = array("d")
    for r in ok:
        gaps.extend(r.itl)
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    completion = sum(r.completion_tokens or 0 for r in ok)
    cached = sum(r.cached_tokens or 0 for r in ok)
    rate = (lambda x: x / elapsed) if elapsed > 0 else (lambda x: 0.0)
    return {
        "requests": len(records), "ok": n_ok, "errors": len(records) - n_ok,
        "error_rate": (len(records) - n_ok) / len(records) if records else 0.0,
        "errors_by_kind": stats.error_counts(records), "elapsed": elapsed,
        "ttft": None if unreliable else stats.distribution(
            r.ttft for r in ok if r.ttft is not None),
        "itl": None if unreliable else stats.distribution(list(gaps)),
        "tpot": None if unreliable else stats.distribution(
            t for t in (r.tpot for r in ok) if t is not None),
        "latency_unreliable": unreliable,
        "buffered_streams": {"streams": burst["streams"], "bursts": burst["bursts"]},
        "e2e": stats.distribution(r.e2e for r in ok if r.e2e is not None),
        "prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached,
        "request_throughput": rate(n_ok), "output_throughput": rate(completion),
        "total_token_throughput": rate(prompt + completion)}


def old_measured_context(records: Sequence[Any]) -> tuple[int | None, float | None]:
    """LoadResult.measured_context before the store (6cf9301)."""
    lengths = sorted(r.prompt_tokens for r in records if r.ok and r.prompt_tokens)
    if not lengths:
        return None, None
    mid = len(lengths) // 2
    median = (lengths[mid] if len(lengths) % 2 else (lengths[mid - 1] + lengths[mid]) / 2)
    return lengths[-1], float(median)


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store and column spills at once: the soak's path on a handful of records."""
    monkeypatch.setattr(store, "MEMORY_RECORDS", 1)
    monkeypatch.setattr(store, "BATCH", 2)
    monkeypatch.setattr(store, "MEMORY_FLOATS", 1)
    monkeypatch.setattr(store, "_READ", 16)  # two floats a read: many pass steps


SECONDS = st.floats(min_value=0.0, max_value=120.0, allow_nan=False)
RESULTS = st.builds(
    RequestResult, ok=st.booleans(), status=st.sampled_from([200, 500, None]),
    error=st.one_of(st.none(), st.text(max_size=20)),
    error_kind=st.sampled_from([None, "timeout", "http-5xx", "connection"]),
    ttft=st.one_of(st.none(), SECONDS, st.just(math.nan)),
    itl=st.lists(st.one_of(SECONDS, st.sampled_from([0.0, 1e-4, 1e-4])), max_size=30),
    e2e=st.one_of(st.none(), SECONDS),
    prompt_tokens=st.one_of(st.none(), st.integers(0, 10**6)),
    completion_tokens=st.one_of(st.none(), st.integers(0, 4096)),
    cached_tokens=st.one_of(st.none(), st.integers(0, 10**6)),
    stream=st.booleans(), proxy=st.sampled_from([None, "nginx/1.22.1"]))


def _fields(r: RunRecord) -> tuple[Any, ...]:
    """Every field, floats as their bytes (NaN included: the same bits)."""
    def bits(v: Any) -> Any:
        return struct.pack("d", v) if isinstance(v, float) else v
    return tuple(bytes(r.itl) if n == "itl" else bits(getattr(r, n))
                 for n in RunRecord.__slots__)


@settings(max_examples=150, deadline=None)
@given(st.lists(RESULTS, max_size=40), st.floats(min_value=0.001, max_value=1e4),
       st.integers(1, 5), st.integers(1, 3), st.integers(1, 70))
def test_a_spilled_store_summarises_exactly_like_the_list(
        results: list[RequestResult], elapsed: float, memory: int, batch: int,
        floats: int) -> None:
    kept = [RunRecord.of(r) for r in results]
    saved = store.MEMORY_FLOATS, store._READ
    store.MEMORY_FLOATS, store._READ = floats, 8 * floats
    try:
        with RecordStore(kept, memory=memory, batch=batch) as spilled:
            assert spilled.spilled == (len(kept) >= memory)
            assert [_fields(r) for r in spilled] == [_fields(r) for r in kept]  # bit for bit
            want = old_summarize(kept, elapsed)
            assert _without_cut(stats.summarize(kept, elapsed)) == want
            assert _without_cut(stats.summarize(spilled, elapsed)) == want
            lr = _result(spilled)
            assert lr.measured_context == old_measured_context(kept)
            assert lr.context_tokens == old_measured_context(kept)[0]
            assert stats.goodput(spilled, elapsed, ttft=1.0) == stats.goodput(kept, elapsed,
                                                                                ttft=1.0)
    finally:
        store.MEMORY_FLOATS, store._READ = saved


INTERVALS = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(INTERVALS, st.floats(min_value=0.0, max_value=100.0), st.randoms())
def test_concurrency_measured_as_it_goes_is_the_intervals_figure(
        raw: list[tuple[int, int]], elapsed: float, rnd: Any) -> None:
    # instants as the runner's perf_counter gives them (ties included), fed in time order,
    # events at one instant in any order: the same mean (exact sum) and peak
    spans = [(s / 8, (s + d) / 8 + 0.1 * (d % 3)) for s, d in raw]
    events = [(s, 0, i) for i, (s, _) in enumerate(spans)] + \
             [(e, 1, i) for i, (_, e) in enumerate(spans)]
    rnd.shuffle(events)
    events.sort(key=lambda ev: ev[0])  # stable: ties stay shuffled
    meter = stats.InFlight()
    for t, kind, i in events:
        if kind == 0:
            meter.start(t)
        else:
            meter.end(t, spans[i][0])
    assert meter.result(elapsed) == stats.concurrency(spans, elapsed)


def test_a_store_reads_indexes_updates_pickles_and_merges(tiny: None) -> None:
    recs = [RunRecord(True, ttft=i / 7, itl=[i / 3, i / 9], e2e=i, error=None,
                      prompt_tokens=i) for i in range(9)]
    s = RecordStore(recs)
    assert s.spilled and len(s) == 9 and bool(s)
    assert [r.e2e for r in s] == list(range(9)) and s[4].ttft == 4 / 7 and s[-1].e2e == 8
    assert [r.e2e for r in s[2:5]] == [2, 3, 4]
    with pytest.raises(IndexError):
        s[9]

    def mark(r: RunRecord) -> bool:
        if r.e2e in (1, 8):
            r.error = "marked"
            return True
        return False
    assert s.update(mark) == 2
    assert [r.e2e for r in s if r.error == "marked"] == [1, 8]  # written back to the file
    back = pickle.loads(pickle.dumps(s))  # a worker's store crosses a process boundary
    assert [_fields(r) for r in back] == [_fields(r) for r in s]
    whole = RecordStore.merged([s, back, recs[:2]])
    assert [r.e2e for r in whole] == list(range(9)) * 2 + [0, 1] and len(whole) == 20
    s.extend(back)
    assert len(s) == 18
    for x in (s, back, whole):
        fd = x._file.fd
        x.close()
        assert fd is not None and not _open(fd)  # the nameless spill file is gone
    with pytest.raises(ValueError, match="closed"):
        list(s)


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_an_unwritable_spill_dir_keeps_every_record_in_memory(tmp_path: Any) -> None:
    missing = tmp_path / "no" / "such"
    s = RecordStore([RunRecord(True, e2e=i) for i in range(5)], memory=2, batch=2,
                    spill_dir=missing)
    assert not s.spilled and [r.e2e for r in s] == list(range(5))
    assert s.spill_error is not None and str(missing) in s.spill_error
    assert "keeping them in memory" in s.spill_error and store.SPILL_ENV in s.spill_error
    col = FloatColumn([1.0, 2.0, 3.0], memory=1, spill_dir=missing)
    assert list(col) == [1.0, 2.0, 3.0] and col.spill_error and not col.spilled


def test_a_full_disk_cuts_the_partial_frame_and_loses_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real, calls = os.pwrite, [0]

    def pwrite(fd: int, data: Any, offset: int) -> int:
        calls[0] += 1
        if calls[0] == 3:  # half of the third frame goes down, then the disk is full
            return real(fd, bytes(data)[:len(data) // 2], offset)
        if calls[0] > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)
    monkeypatch.setattr(os, "pwrite", pwrite)
    recs = [RunRecord(i % 3 != 0, e2e=i, itl=[i / 10] * 3) for i in range(12)]
    s = RecordStore(recs, memory=2, batch=2)
    assert len(s._frames) == 2 and s._file.size == sum(n for _, n in s._frames)
    assert "No space left on device" in (s.spill_error or "")
    assert [_fields(r) for r in s] == [_fields(r) for r in recs]
    assert _without_cut(stats.summarize(s, 2.0)) == old_summarize(recs, 2.0)


def _result(records: Any) -> LoadResult:
    return LoadResult(LoadProfile(name="soak"), records, 1.0, 0.0, "count", 0,
                      stats.summarize([], 1.0), {"mean": 0.0, "max": 0.0}, "http://x",
                      "closed", {})


def test_a_result_keeps_a_store_and_closes_it(tiny: None) -> None:
    plain = _result([RunRecord(True, e2e=1.0)])
    assert isinstance(plain.records, RecordStore) and plain.spill_error is None
    with _result(RecordStore([RunRecord(True, e2e=i) for i in range(4)])) as r:
        assert r.records.spilled and len(r.records) == 4
    assert len(r.records) == 0
    s = stats.summarize([], 1.0)
    s["spill_error"] = "could not spill load records to '/full' (No space left on device)"
    noted = LoadResult(LoadProfile(name="soak"), [], 1.0, 0.0, "count", 0, s,
                       {"mean": 0.0, "max": 0.0}, "http://x", "closed", {})
    assert "RECORDS IN MEMORY: could not spill" in noted.line()


@pytest.mark.asyncio
async def test_a_spilled_run_gives_the_figures_of_its_records(tiny: None) -> None:
    # the runner's spilled path end to end: records in slot order, conversations included,
    # the summary that of the records, cut requests as timeouts
    res = await run_load(FakeClient(delay=0.002, hang={"h"}),
                         rset(["a", "b", "c", "h"]),
                         profile(concurrency=3, requests=40, max_seconds=1.0), metrics=False)
    recs = list(res.records)
    assert res.records.spilled and len(recs) + res.not_sent == 40
    sent = [r for r in recs if r.error_kind != "cut"]  # cut at the bound: counted apart
    assert {k: res.summary[k] for k in old_summarize(sent, res.elapsed)} == \
        old_summarize(sent, res.elapsed)
    assert res.summary["cut"] == len(recs) - len(sent)
    assert res.summary["errors_by_kind"]["timeout"] >= 1
    assert 0 < res.achieved_concurrency["mean"] <= res.achieved_concurrency["max"] <= 3
    conv = await run_load(FakeClient(delay=0.001), rset(["t1", "t2", "t3"], conversation="c"),
                          profile(concurrency=2, requests=12, max_seconds=10.0),
                          metrics=False)
    assert [r.ok for r in conv.records] == [True] * 12 and conv.not_sent == 0


@pytest.mark.asyncio
async def test_stalled_streams_are_annotated_in_a_spilled_store(tiny: None) -> None:
    class Health:
        status_code = 200

    class Http:
        async def get(self, path: str, timeout: float) -> Health:
            return Health()

    class Client:
        http, timeout = Http(), 30.0

    stuck = RunRecord(False, status=200, error_kind="timeout",
                      error="the stream sent nothing for 30 s")
    s = RecordStore([RunRecord(True, e2e=1.0), stuck, RunRecord(True, e2e=2.0),
                     RunRecord(True, e2e=3.0)])
    assert await stall.annotate(Client(), s) == 1
    (marked,) = [r for r in s if not r.ok]
    assert marked.error is not None and marked.error.startswith(stall.FROZEN)
