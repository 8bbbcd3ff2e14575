"""Bad ``/metrics`` and Prometheus input: a specific message each, the session goes on, and
what is unknown stays unknown (None) with the reason where the record keeps it.

Pages are the REAL data-parallel testbed pages (``tests/data/metrics/``) changed line by
line; the servers are loopback stubs (not vLLM) that answer them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from fault_stub import StubServer
from pytest_k3accept.checks import headroom
from pytest_k3accept.observe.host import gather
from pytest_k3accept.observe.host.remote import Prometheus, RemoteError
from pytest_k3accept.observe.host.telemetry import pick_source
from pytest_k3accept.observe.load import monitor
from pytest_k3accept.observe.metrics import (MAX_METRICS_BODY, MetricsScraper,
                                             MetricsUnavailable, Snapshot, scan_engine_gauges)

DATA = Path(__file__).parent.parent / "data" / "metrics"
UNDER = (DATA / "vllm-0.32-dp2-under-load.txt").read_text()
IDLE = (DATA / "vllm-0.32-dp2-idle.txt").read_text()
KV0 = 'vllm:kv_cache_usage_perc{engine="0",model_name="k3-testbed"}'
KV1 = 'vllm:kv_cache_usage_perc{engine="1",model_name="k3-testbed"}'


def with_value(text: str, series: str, value: str) -> str:
    lines = [f"{series} {value}" if ln.startswith(series + " ") else ln
             for ln in text.splitlines()]
    assert lines != text.splitlines(), series
    return "\n".join(lines) + "\n"


def monitor_over(*pages: str, ok: int = 0) -> tuple[dict[str, Any] | None, str | None]:
    """Monitor.final over pages served in turn (baseline, a gauge sample, after)."""
    texts = list(pages)

    def handle(req: Any) -> None:
        req.send(200, (texts.pop(0) if len(texts) > 1 else texts[0]).encode(), "text/plain")

    async def go(base: str) -> tuple[dict[str, Any] | None, str | None]:
        mon = monitor.Monitor(object(), MetricsScraper(base), settle_timeout=0.3)
        await mon.open()
        await mon.baseline()
        if mon.enabled:
            await mon.sample()
        try:
            return await mon.final(ok), mon.error
        finally:
            await mon.close()

    with StubServer() as stub:
        stub.route("GET", "/metrics", handle)
        return asyncio.run(go(stub.base_url))


def test_a_50_mb_page_is_refused_by_size_and_the_run_says_why() -> None:
    body = ("# TYPE vllm:num_requests_running gauge\n"
            + 'vllm:num_requests_running{engine="0"} 1\n' * (50 * 2**20 // 40)).encode()
    assert len(body) > 50 * 10**6 > MAX_METRICS_BODY
    with StubServer() as stub:
        stub.route("GET", "/metrics", lambda r: r.send(200, body, "text/plain"))
        t0 = time.monotonic()
        with pytest.raises(MetricsUnavailable, match="returned more than 32 MiB; not a vLLM "
                                                     "metrics page, not read"):
            MetricsScraper(stub.base_url).scrape()
        assert time.monotonic() - t0 < 20  # read up to the limit, never parsed
        assert MetricsScraper(stub.base_url).engine_gauges() == {}  # a sample: nothing
    srv, why = monitor_over(body.decode())
    assert srv is None and why is not None and "more than 32 MiB" in why


def test_duplicate_series_keep_the_highest_and_say_so() -> None:
    text = UNDER.replace(f"{KV1} ", f"{KV1} 0.99\n{KV1} ", 1)
    snap = Snapshot.parse(text)
    assert snap.kv_cache_usage_per_engine()["1"] == 0.99
    assert "vllm:kv_cache_usage_perc" in snap.problems
    assert "repeated" in snap.problems["vllm:kv_cache_usage_perc"]
    assert scan_engine_gauges(text)["kv"]["1"] == 0.99  # the line scan agrees
    counters = UNDER.replace('vllm:prompt_tokens_total{engine="0",model_name="k3-testbed"} ',
                             'vllm:prompt_tokens_total{engine="0",model_name="k3-testbed"} 1\n'
                             'vllm:prompt_tokens_total{engine="0",model_name="k3-testbed"} ', 1)
    delta = Snapshot.parse(counters) - Snapshot.parse(IDLE)
    assert delta.prompt_tokens() == (Snapshot.parse(UNDER) - Snapshot.parse(IDLE)).prompt_tokens()
    assert "repeated" in delta.as_dict()["problems"]["vllm:prompt_tokens"]


@pytest.mark.parametrize("kv0,kv1", [("NaN", "NaN"), ("+Inf", "NaN"), ("-Inf", "+Inf")])
def test_non_finite_kv_gauges_are_unknown_never_headroom(kv0: str, kv1: str) -> None:
    text = with_value(with_value(UNDER, KV0, kv0), KV1, kv1)
    snap = Snapshot.parse(text)
    assert snap.kv_cache_usage() is None and "kv" not in scan_engine_gauges(text)
    srv, _ = monitor_over(IDLE, text, text)
    assert srv is not None and srv["peak_kv_usage"] is None

    class Run:
        summary = {"error_rate": 0.0}
        server, server_error, gpu, endpoint = srv, None, None, "http://x"
    verdict = headroom.decide(Run())  # type: ignore[arg-type]
    assert verdict.ok is None and "KV-cache usage not measured" in verdict.line()


def test_a_family_of_the_wrong_type_is_unknown_and_named() -> None:
    text = UNDER.replace("# TYPE vllm:kv_cache_usage_perc gauge",
                         "# TYPE vllm:kv_cache_usage_perc counter")
    snap = Snapshot.parse(text)
    assert snap.kv_cache_usage() is None and "kv" not in scan_engine_gauges(text)
    assert snap.problems["vllm:kv_cache_usage_perc"] == (
        "declared a counter, expected a gauge: not read (unknown)")
    assert snap.running() == 7.0  # the rest of the page is read
    wrong = IDLE.replace("# TYPE vllm:prompt_tokens_total counter",
                         "# TYPE vllm:prompt_tokens_total gauge")
    later = UNDER.replace("# TYPE vllm:prompt_tokens_total counter",
                          "# TYPE vllm:prompt_tokens_total gauge")
    figures = (Snapshot.parse(later) - Snapshot.parse(wrong)).as_dict()
    assert figures["prompt_tokens"] is None and figures["generation_tokens"] == 168
    assert "vllm:prompt_tokens" in figures["problems"]
    assert "vllm:prompt_tokens" not in figures["missing"]  # exported, but not as a counter


def test_an_openmetrics_page_whose_types_clash_is_refused_by_name() -> None:
    om = ("# TYPE vllm:num_requests_running histogram\n"
          'vllm_num_requests_running{engine="0"} 3\n# EOF\n')
    with pytest.raises(MetricsUnavailable, match="returned text that is not OpenMetrics: "
                                                 "Clashing name"):
        MetricsScraper("http://h:1")._check(200, om, "application/openmetrics-text")


def test_prometheus_that_times_out_or_fails_is_a_note_not_a_crash() -> None:
    with StubServer() as stub:
        stub.route("GET", "/api/v1/query", lambda r: stub.stall(5))
        prom = Prometheus(stub.base_url, timeout=0.5)
        with pytest.raises(RemoteError, match=f"cannot reach {stub.base_url}/api/v1/query: "
                                              "ReadTimeout"):
            prom.kv_cache_usage()
        facts = gather(prometheus_url=stub.base_url, timeout=0.5, local=False)
        assert facts.gpu_count is None
        assert any("prometheus: cannot reach" in n and "ReadTimeout" in n for n in facts.notes)
        source, why = pick_source(prometheus_url=stub.base_url, timeout=0.5, local=False)
        assert source is None and why and "ReadTimeout" in why and "local NVML not used" in why
    with StubServer() as stub:
        stub.route("GET", "/api/v1/query", lambda r: r.send(
            503, b"Service Unavailable: TSDB not ready", "text/plain"))
        with pytest.raises(RemoteError, match="answered HTTP 503: Service Unavailable"):
            Prometheus(stub.base_url).facts()
        stub.route("GET", "/api/v1/query", lambda r: r.send(200, b"<html>login</html>",
                                                            "text/html"))
        with pytest.raises(RemoteError, match="did not answer JSON: is .* Prometheus"):
            Prometheus(stub.base_url).facts()
