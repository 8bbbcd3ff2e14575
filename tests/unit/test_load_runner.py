"""The runner's own logic (bounds, loops, ordering, accounting) with an in-process client
stand-in, the synthetic generator's length search with a counting stand-in, and the monitor's
gauge scan. The real server is exercised in tests/live/test_load_live.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from pytest_k3accept.observe.endpoint.client import RequestResult
from pytest_k3accept.observe.load import monitor, synthetic
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.requestset import ChatRequest, RequestSet
from pytest_k3accept.observe.metrics import scan_gauges
from pytest_k3accept.observe.load.runner import run_load


class FakeClient:
    """Answers after ``delay`` seconds; ``fail`` maps message text -> (status, kind)."""

    base_url = "http://fake"
    model = "fake-model"

    def __init__(self, delay: float = 0.01, fail: dict[str, tuple[int, str]] | None = None,
                 hang: set[str] | None = None) -> None:
        self.delay, self.fail, self.hang = delay, fail or {}, hang or set()
        self.sent: list[dict[str, Any]] = []
        self.in_flight = self.peak = 0

    async def request(self, path: str, body: dict[str, Any], *, stream: bool = False,
                      ) -> RequestResult:
        self.sent.append(body)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            text = body["messages"][-1]["content"]
            await asyncio.sleep(3600 if text in self.hang else self.delay)
            if text in self.fail:
                status, kind = self.fail[text]
                return RequestResult(ok=False, status=status, error_kind=kind, e2e=self.delay)
            return RequestResult(ok=True, status=200, ttft=self.delay / 2, e2e=self.delay,
                                 itl=[self.delay / 4], prompt_tokens=10,
                                 completion_tokens=body["max_tokens"], stream=stream)
        finally:
            self.in_flight -= 1


def rset(texts: list[str], conversation: str | None = None) -> RequestSet:
    return RequestSet([ChatRequest(messages=[{"role": "user", "content": t}],
                                   conversation=conversation,
                                   turn=(len(texts) - i) if conversation else None)
                       for i, t in enumerate(texts)])


def profile(**kw: Any) -> LoadProfile:
    return LoadProfile().replace("test", **kw)


@pytest.mark.asyncio
async def test_closed_loop_counts_concurrency_and_body() -> None:
    client = FakeClient(delay=0.02)
    prog: list[Any] = []
    res = await run_load(client, rset(["a", "b", "c"]), profile(concurrency=3, requests=12,
                                                                output_tokens=7, warmup=2),
                         metrics=False, progress=prog.append, progress_interval=0.01,
                         sample_interval=0.01)
    assert res.summary["requests"] == 12 and res.summary["ok"] == 12
    assert len(client.sent) == 14  # 2 warm-up requests are sent but not recorded
    assert client.peak == 3 and res.achieved_concurrency["max"] == 3.0
    assert res.summary["completion_tokens"] == 12 * 7
    body = client.sent[0]
    assert body["model"] == "fake-model" and body["max_tokens"] == 7 and body["ignore_eos"]
    assert res.stopped_by == "count" and res.not_sent == 0 and res.mode == "closed"
    assert prog and prog[-1].total == 12 and prog[-1].done == 12  # a final line at the end
    assert res.server is None and res.server_error == "metrics scraping turned off"
    json.dumps(res.as_dict(records=True))  # serializable


@pytest.mark.asyncio
async def test_errors_are_classified_and_kept_out_of_latency() -> None:
    client = FakeClient(fail={"bad": (503, "http-5xx"), "no": (400, "http-4xx")})
    res = await run_load(client, rset(["ok", "bad", "no", "ok2"]),
                         profile(concurrency=2, requests=4), metrics=False)
    s = res.summary
    assert (s["ok"], s["errors"], s["error_rate"]) == (2, 2, 0.5)
    assert s["errors_by_kind"]["http-5xx"] == 1 and s["errors_by_kind"]["http-4xx"] == 1
    assert s["e2e"]["count"] == 2


@pytest.mark.asyncio
async def test_time_bound_cancels_in_flight_as_timeouts_and_stops() -> None:
    client = FakeClient(delay=0.01, hang={"stuck"})
    t0 = time.perf_counter()
    res = await run_load(client, rset(["stuck", "quick"]),
                         profile(concurrency=2, requests=1000, max_seconds=0.5), metrics=False)
    assert time.perf_counter() - t0 < 3.0
    assert res.stopped_by == "time"
    assert res.summary["errors_by_kind"]["timeout"] >= 1
    cut = [r for r in res.records if r.error_kind == "timeout"]
    assert "time bound" in (cut[0].error or "")
    assert res.not_sent > 0
    assert res.summary["requests"] + res.summary["cut"] + res.not_sent == 1000


@pytest.mark.asyncio
async def test_requests_cut_at_the_time_bound_are_not_errors_when_no_older_than_one_that_ended(
        ) -> None:
    # a soak bounded by time: every request takes ~0.05 s, the bound cuts the ones in flight;
    # they are the harness's doing, not the server's: counted apart, the error rate stays 0
    client = FakeClient(delay=0.05)
    res = await run_load(client, rset(["a", "b"]),
                         profile(concurrency=4, requests=10**6, max_seconds=0.5), metrics=False)
    s = res.summary
    assert res.stopped_by == "time" and s["cut"] >= 1
    assert s["errors"] == 0 and s["error_rate"] == 0.0 and s["errors_by_kind"]["timeout"] == 0
    cut = [r for r in res.records if r.error_kind == "cut"]
    assert len(cut) == s["cut"] and "not counted as sent or as an error" in (cut[0].error or "")
    assert s["requests"] + s["cut"] + res.not_sent == 10**6
    assert f"{s['cut']} cut at the time bound" in res.line()


def test_a_request_in_flight_longer_than_any_that_ended_is_a_timeout() -> None:
    from pytest_k3accept.observe.load.runner import cut_record

    p = profile(max_seconds=60.0)
    assert cut_record(2.0, 3.0, p).error_kind == "cut"
    assert cut_record(5.0, 3.0, p).error_kind == "timeout"  # late: the server stalled it
    assert cut_record(0.5, 0.0, p).error_kind == "timeout"  # nothing ended: no yardstick


@pytest.mark.asyncio
async def test_per_request_timeout() -> None:
    client = FakeClient(hang={"stuck"})
    res = await run_load(client, rset(["stuck"]), profile(concurrency=1, requests=1,
                                                          timeout=0.1), metrics=False)
    (rec,) = res.records
    assert rec.error_kind == "timeout" and "timeout = 0.1 s" in (rec.error or "")


@pytest.mark.asyncio
async def test_conversation_turns_run_in_order_one_after_another() -> None:
    client = FakeClient(delay=0.01)
    res = await run_load(client, rset(["t3", "t2", "t1"], conversation="c"),
                         profile(concurrency=4, requests=6), metrics=False)
    sent = [b["messages"][-1]["content"] for b in client.sent]
    # two workers each take one pass of the conversation; turns never overtake each other
    assert sent == ["t1", "t1", "t2", "t2", "t3", "t3"]
    assert client.peak == 2
    assert res.request_set["units"] == 1


@pytest.mark.asyncio
async def test_open_loop_poisson_rate_and_cap() -> None:
    client = FakeClient(delay=0.2)
    t0 = time.perf_counter()
    res = await run_load(client, rset(["x"]), profile(rate=50.0, requests=40, concurrency=5),
                         metrics=False)
    took = time.perf_counter() - t0
    assert res.mode == "open" and res.summary["ok"] == 40
    assert client.peak <= 5  # capped in flight
    assert took >= 40 / 5 * 0.2 * 0.9  # the cap, not the rate, bounds this run
    free = FakeClient(delay=0.0)
    res2 = await run_load(free, rset(["x"]), profile(rate=200.0, requests=100), metrics=False)
    assert 0.2 < res2.elapsed < 1.5  # ~0.5 s of Poisson arrivals at 200/s


@pytest.mark.asyncio
async def test_telemetry_figures_for_the_run_window() -> None:
    class Tel:
        series = {"n0/gpu0": [(0.0, 99.0), (time.time() + 0.5, 60.0)]}
        total = {"n0/gpu0": 100}

        def summary(self) -> dict[str, Any]:
            return {"kind": "gpu-memory", "peak_bytes": {"n0/gpu0": 99}}

    client = FakeClient(delay=0.3)
    res = await run_load(client, rset(["x"]), profile(concurrency=1, requests=3),
                         metrics=False, telemetry=Tel())
    assert res.gpu is not None
    assert res.gpu["run_peak_bytes"] == {"n0/gpu0": 60.0}  # the sample before the run is out
    assert res.gpu["free_fraction"] == pytest.approx(0.4)


@pytest.mark.asyncio
async def test_synthetic_search_hits_targets_with_uneven_token_sizes() -> None:
    # stand-in tokenizer (_word_counter): words of 4+ letters are 2 tokens, shorter ones 1
    counter = synthetic.CallCounting(_word_counter())
    p = profile(context_tokens=900, prefix_tokens=300, prefix_reuse=0.5, requests=10)
    rs = await synthetic.generate(None, p, counter=counter)
    assert len(rs) == 10
    assert all(abs(n - 900) <= 1 for n in rs.meta["measured_prompt_tokens"])
    assert all(abs(n - 300) <= 1 for n in rs.meta["measured_prefix_tokens"])
    systems = [r.messages[0]["content"] for r in rs]
    assert len(set(systems)) == 1 + 5  # one shared prefix for half, unique for the rest
    assert len({r.messages[1]["content"] for r in rs}) == 10
    assert counter.calls < 10 * 12
    again = await synthetic.generate(None, p, counter=counter)
    assert again.requests == rs.requests  # seeded: same profile, same set
    with pytest.raises(synthetic.SyntheticError, match="prefix_tokens"):
        await synthetic.generate(None, profile(context_tokens=900, prefix_tokens=3),
                                 counter=counter)


def test_gauge_scan_and_sustained_queue() -> None:
    text = ('# HELP x\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
            'vllm:num_requests_waiting{engine="1",model_name="m"} 1.0\n'
            'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0\n'
            "vllm:num_requests_running 2\n")
    assert scan_gauges(text) == {"kv": 0.25, "waiting": 4.0, "running": 2.0}
    hostile = "vllm:kv_cache_usage_perc NaN\nvllm:num_requests_running +Inf\n" + text
    assert scan_gauges(hostile) == {"kv": 0.25, "waiting": 4.0, "running": 2.0}
    blip = [(0.0, 0.0), (0.25, 5.0), (0.5, 0.0), (0.75, 0.0), (1.0, 0.0), (1.25, 0.0)]
    assert monitor.sustained(blip, 1.0) == 0.0
    queue = [(t / 4, 6.0 if 1 <= t <= 6 else 0.0) for t in range(10)]
    assert monitor.sustained(queue, 1.0) == 6.0
    assert monitor.sustained(queue[:3], 1.0) is None


def test_gc_thresholds_are_raised_during_runs_and_restored_after_the_last() -> None:
    import gc

    from pytest_k3accept.observe.load import runner

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        first = runner.fewer_collections()
        second = runner.fewer_collections()
        first.__enter__()
        assert gc.get_threshold() == runner.RUN_GC_THRESHOLD
        second.__enter__()
        first.__exit__(None, None, None)  # overlapping runs: the first ends first
        assert gc.get_threshold() == runner.RUN_GC_THRESHOLD
        second.__exit__(None, None, None)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(0)  # a session that turned the GC off keeps it off
        with runner.fewer_collections():
            assert gc.get_threshold()[0] == 0
        gc.set_threshold(50_000, 10, 10)  # never lower than the session's own
        with runner.fewer_collections():
            assert gc.get_threshold() == (50_000, 20, 20)
    finally:
        gc.set_threshold(*before)


def test_a_preemption_proves_the_kv_cache_was_full_when_no_sample_caught_it() -> None:
    """A busy API server can hold every gauge sample back until the run is over: the peak
    then comes from the preemption counter (vLLM preempts only without a free KV block)."""
    from pytest_k3accept.observe.metrics import MetricsScraper, Snapshot

    def page(preempted: int, ok: int) -> str:
        return ("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
                "vllm:kv_cache_usage_perc 0.0\nvllm:prompt_tokens_total 0\n"
                f"vllm:num_preemptions_total {preempted}\n"
                f'vllm:request_success_total{{finished_reason="length"}} {ok}\n')

    class Pages(MetricsScraper):
        def __init__(self, pages: list[str]) -> None:
            super().__init__("http://127.0.0.1:9")
            self.pages = pages

        async def ascrape(self, http: Any = None) -> Snapshot:
            return Snapshot.parse(self.pages.pop(0) if len(self.pages) > 1 else self.pages[0])

    async def final(preempted: int) -> dict[str, Any] | None:
        mon = monitor.Monitor(object(), Pages([page(0, 0), page(preempted, 8)]))
        await mon.open()
        await mon.baseline()
        mon.peaks["kv"] = 0.4  # the only sample that got through
        try:
            return await mon.final(8)
        finally:
            await mon.close()

    full = asyncio.run(final(4))
    assert full is not None and full["peak_kv_usage"] == 1.0
    assert full["peak_kv_from"] == "preemptions" and full["preemptions"] == 4
    calm = asyncio.run(final(0))
    assert calm is not None and calm["peak_kv_usage"] == 0.4 and calm["peak_kv_from"] == "samples"


def test_a_request_that_queued_past_the_window_is_a_sustained_queue() -> None:
    assert monitor.sustained_floor(None, 2.0) == 1.0  # the samples missed it
    assert monitor.sustained_floor(3.0, 2.0) == 3.0
    assert monitor.sustained_floor(0.0, 0.0) == 0.0
    assert monitor.sustained_floor(None, None) is None


def _word_counter(merge: tuple[str, str] | None = None) -> Any:
    """A stand-in tokenizer: template 7 per message (+3 for the generation prompt), words of
    4+ letters 2 tokens, shorter ones 1; with ``merge``, that word pair is one token fewer (a
    tokenizer whose tokens are not additive at word boundaries). Records each call's words."""
    sizes: list[int] = []

    async def counter(messages: list[dict[str, Any]], gen: bool) -> int:
        total = 7 * len(messages) + (3 if gen else 0)
        for m in messages:
            words = str(m["content"]).split()
            sizes.append(len(words))
            total += sum(2 if len(w) > 3 else 1 for w in words)
            if merge:  # the pair is one token fewer than its words
                total -= sum((x, y) == merge for x, y in zip(words, words[1:]))
        return total
    counter.sizes = sizes  # type: ignore[attr-defined]
    return counter


@pytest.mark.asyncio
@pytest.mark.parametrize("merge", [None, ("time", "day")], ids=["additive", "merging"])
async def test_a_long_prompt_is_probed_whole_twice_and_the_rest_fitted_on_its_own_words(
        merge: tuple[str, str] | None) -> None:
    # 300K tokens of words of uneven size: the first whole probe misses (the 400-word
    # calibration), the words to add are fitted alone, the second whole probe lands; a
    # tokenizer that merges across words is still exact (whole texts searched on from there)
    counter = _word_counter(merge)
    counting = synthetic.CallCounting(counter)
    target = 300_000
    rs = await synthetic.generate(None, profile(context_tokens=target, requests=1, warmup=0),
                                  counter=counting)
    assert rs.meta["max_prompt_deviation"] <= 1, rs.meta
    text = rs.requests[0].messages[-1]["content"]
    assert text == synthetic._text(500_000, len(text.split()))  # seed 0, request 0: a prefix
    whole = [n for n in counter.sizes if n > 2 * synthetic.LONG_WORDS]
    if merge is None:
        assert rs.meta["measured_prompt_tokens"] == [target]
        assert len(whole) == 2, whole  # was 4-5 probes of the whole text
        assert counting.tokens < 2.2 * target, counting.tokens
    else:
        assert len(whole) >= 2, whole
