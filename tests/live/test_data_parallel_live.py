"""A real data-parallel vLLM server (``--data-parallel-size 2``): KV headroom is the fullest
engine's, never the sum over engines.

Two engine cores, each with its own KV cache (``--kv-cache-memory-bytes 4000000``: 3,840
tokens each on the testbed model), behind one API server; every ``vllm:`` family then has
``engine="0"`` and ``engine="1"`` series. Four concurrent requests of ~600 prompt + 300
generated tokens (~1,024 KV tokens each, in 128-token blocks) spread over the engines: each
engine is about half full, so the old summed figure (> 100 %) read "NO headroom" on a server
that had plenty. The run's peak is the fullest engine's, the headroom line lists each engine,
counters add up over engines and equal what the runner sent.

The same server scraped by a REAL Prometheus (every second, ``prometheus_server.py``) gives
the direct path's figures through PromQL: per-engine gauge peaks, summed counters and the
TTFT quantiles of the merged histogram buckets (tolerances in that test's docstring).
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest

import prometheus_server
from pytest_k3accept.checks import headroom
from pytest_k3accept.observe.endpoint.discover import discover
from pytest_k3accept.observe.host.remote import Prometheus
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.runner import run_load
from pytest_k3accept.observe.metrics import MetricsScraper
from vllm_servers import serve

pytestmark = [pytest.mark.live]


@pytest.fixture(scope="module")
def dp2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The testbed model served by two data-parallel engines (its URL)."""
    yield from serve(tmp_path_factory, "dp2", ("--data-parallel-size", "2"),
                     kv_cache_bytes=4_000_000,
                     env={"VLLM_CPU_OMP_THREADS_BIND": "nobind"})  # two engines, 2 cores


@pytest.mark.asyncio
async def test_headroom_is_the_fullest_engines_not_the_sum(dp2: str) -> None:
    ep = discover(dp2)
    profile = LoadProfile(name="dp2", requests=4, concurrency=4, context_tokens=600,
                          output_tokens=300, max_seconds=300)
    result = await run_load(ep, None, profile, sample_interval=0.2)
    s, srv = result.summary, result.server
    assert srv is not None, result.server_error
    assert s["ok"] == s["requests"] == 4, s["errors_by_kind"]
    assert srv["engines"] == 2, srv["per_engine"]
    peaks = {e: v["peak_kv_usage"] for e, v in srv["per_engine"].items()}
    assert set(peaks) == {"0", "1"} and all(p is not None for p in peaks.values()), peaks
    # the run's peak is one engine's (a fraction of ITS cache), never the sum
    assert srv["peak_kv_usage"] == max(peaks.values()) <= 1.0
    assert sum(srv["per_engine"][e]["prompt_tokens"] for e in peaks) == srv["prompt_tokens"]
    assert srv["prompt_tokens"] == result.prompt_tokens and result.shared is False
    assert srv["generation_tokens"] == result.completion_tokens == 4 * 300
    verdict = headroom.decide(result, max_waiting=None, max_preemptions=10)
    print(f"\n[dp2] {result.line()}\n[dp2] {verdict.line()}")  # the figures, for the log
    assert verdict.engine_kv == peaks
    assert "(fullest engine; engine 0 " in verdict.line() and ", engine 1 " in verdict.line()
    if srv["preemptions"] == 0 and all(p > 0 for p in peaks.values()):
        # both engines served: the fullest one has headroom although the sum may not
        assert verdict.ok is True, verdict.line()


JOB = "dp2"
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:request_success_total", "vllm:num_preemptions_total")
TTFT = "vllm:time_to_first_token_seconds"


@pytest.fixture(scope="module")
def dp2_prometheus(dp2: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus scraping the data-parallel server every second (job ``dp2``)."""
    with prometheus_server.start(tmp_path_factory.mktemp("prometheus-dp2"),
                                 {JOB: dp2.split("//", 1)[1]}) as url:
        yield url


@pytest.mark.asyncio
async def test_prometheus_gives_the_direct_figures_of_two_engines(dp2: str,
                                                                  dp2_prometheus: str) -> None:
    """Direct ``/metrics`` and PromQL over a real Prometheus, for one real load.

    Counters and histogram buckets are read by both paths while the server is idle (before
    the load, and after it once a scrape has passed): they must be EQUAL (prompt /
    generation tokens, successes, preemptions, per engine and summed; TTFT p50 / p99 from
    the merged buckets, also equal to PromQL's own ``histogram_quantile``). Gauges are
    sampled by both while the load runs (direct every 0.2 s, Prometheus every 1 s), so they
    see different instants: running and waiting requests per engine within 1 (a request
    starts or ends between two samples); KV usage per engine within what that engine's
    requests can grow in one scrape interval (its measured generation rate over the load x
    1 s, in whole 128-token blocks) plus one block per running request. Seen in a CI run on
    a loaded machine: Prometheus's peak 48.3 %, the direct sampler's 41.4 % (two blocks: the
    0.2 s sampler missed the last samples of the peak).
    The direct ``after`` snapshot is taken once the server has counted all four requests
    (its counters are updated after the last token reaches the client: read at once they
    can miss the last request while Prometheus's later scrape has it).
    """
    url = dp2_prometheus
    prom = Prometheus(url, selector=f'job="{JOB}"')
    names = (*COUNTERS, f"{TTFT}_bucket")
    scraper = MetricsScraper(dp2)
    before = scraper.scrape()
    t_before = prometheus_server.scraped_after(url, JOB, before.at)
    prom_before = prom.snapshot(names, at=t_before)
    profile = LoadProfile(name="dp2-prom", requests=4, concurrency=4, context_tokens=600,
                          output_tokens=200, max_seconds=300)
    t0 = time.time()
    result = await run_load(discover(dp2), None, profile, sample_interval=0.2)
    t1 = time.time()
    deadline = time.monotonic() + 15
    while True:  # settled: every request counted, none running
        after = scraper.scrape()
        settled = after - before
        if (sum(settled.successes().values()) >= 4 and not any(
                (after.engine_gauges().get("running") or {}).values())
                ) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    t_after = prometheus_server.scraped_after(url, JOB, after.at)
    prom_after = prom.snapshot(names, at=t_after)
    scraper.close()
    srv = result.server
    assert srv is not None, result.server_error
    assert result.summary["ok"] == 4, result.summary["errors_by_kind"]

    direct, promql = after - before, prom_after - prom_before
    for name in COUNTERS:
        assert promql.known(name) == direct.known(name), name
        assert promql.per_engine(name) == direct.per_engine(name), name
    assert set(direct.per_engine("vllm:prompt_tokens_total")) == {"0", "1"}
    assert promql.prompt_tokens() == srv["prompt_tokens"] == result.prompt_tokens
    assert promql.generation_tokens() == result.completion_tokens == 4 * 200
    assert promql.successes() == direct.successes()
    assert {why: n for why, n in promql.successes().items() if n} == {"length": 4.0}
    ttft = {}
    for q in (0.5, 0.99):
        mine = promql.histogram_quantile(TTFT, q)
        assert mine is not None and mine == pytest.approx(direct.histogram_quantile(TTFT, q),
                                                          rel=1e-12), q
        sel = f'{TTFT}_bucket{{job="{JOB}"}}'
        (row,) = prom.query(f"histogram_quantile({q}, sum by (le) ({sel}) - "
                            f"sum by (le) ({sel} @ {t_before:.3f}))", at=t_after)
        assert mine == pytest.approx(row[2], rel=1e-12), (q, row)
        ttft[q] = mine

    peaks = prom.engine_peaks(t0, t1)
    per = srv["per_engine"]
    size = float(srv["kv_cache_size_tokens"])
    generated = direct.per_engine("vllm:generation_tokens_total")
    for engine in ("0", "1"):
        e = per[engine]
        assert e["peak_kv_from"] == "samples" and e["preemptions"] == 0, e
        assert e["peak_running"] > 0 and peaks["running"][engine] > 0, (peaks, e)
        assert abs(peaks["running"][engine] - e["peak_running"]) <= 1, (peaks, e)
        assert abs(peaks["waiting"][engine] - e["peak_waiting"]) <= 1, (peaks, e)
        per_scrape = generated.get(engine, 0.0) / max(t1 - t0, 1e-9) * 1.0  # 1 s scrapes
        blocks = -(-per_scrape // 128) + e["peak_running"]  # whole blocks, one per request
        # vLLM's KV usage counts 128-token blocks less the one null block it keeps back
        # (3,840 tokens: 29 usable blocks, so one block is 1/29 = 3.4 %, not 128/3,840)
        tolerance = blocks / (size // 128 - 1)
        assert abs(peaks["kv"][engine] - e["peak_kv_usage"]) <= tolerance + 1e-9, (
            peaks, e, tolerance)
    seen = {e: (v["peak_kv_usage"], v["peak_running"], v["peak_waiting"])
            for e, v in per.items()}
    print(f"\n[dp2 prometheus] counters equal: prompt {promql.prompt_tokens():.0f}, "
          f"generation {promql.generation_tokens():.0f}; TTFT p50 {ttft[0.5]:.4f} s, "
          f"p99 {ttft[0.99]:.4f} s on both paths and PromQL; peaks through Prometheus "
          f"{peaks}, direct (kv, running, waiting) {seen}; load {t1 - t0:.1f} s")
