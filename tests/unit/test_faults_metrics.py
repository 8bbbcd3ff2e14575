"""Metrics faults: servers without engine statistics, keys, huge pages, absurd numbers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fault_stub import StubServer
from pytest_k3accept.observe.metrics import MetricsScraper, MetricsUnavailable, Snapshot

#: what vLLM 0.32 started with --disable-log-stats (and a tool parser) really exposes
DISABLED_STATS = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 14357.0
# HELP vllm:tool_call_parser_invocations_total Tool parser invocations
# TYPE vllm:tool_call_parser_invocations_total counter
vllm:tool_call_parser_invocations_total{mode="streaming",model_name="k3-testbed",\
outcome="tool_call",request_type="chat_completions"} 0.0
"""


def test_disable_log_stats_page_is_not_available_despite_vllm_series() -> None:
    snap = Snapshot.parse(DISABLED_STATS)
    assert not snap.has_vllm
    with pytest.raises(MetricsUnavailable, match="not available from this server"):
        MetricsScraper("http://h:1")._check(200, DISABLED_STATS)


def test_metrics_behind_a_key() -> None:
    with StubServer() as stub:
        stub.route("GET", "/metrics", lambda r: r.send(401, b'{"error":"Unauthorized"}'))
        with pytest.raises(MetricsUnavailable, match="HTTP 401: the metrics need an API key"):
            MetricsScraper(stub.base_url).scrape()


def test_non_vllm_metrics_404_and_unreachable() -> None:
    with StubServer() as stub:
        with pytest.raises(MetricsUnavailable, match="404: not available from this server"):
            MetricsScraper(stub.base_url).scrape()
    with pytest.raises(MetricsUnavailable, match="connection refused.*still up"):
        MetricsScraper(stub.base_url, timeout=2).scrape()


def test_huge_metrics_page_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_k3accept.observe.metrics.scrape as metrics

    monkeypatch.setattr(metrics, "MAX_METRICS_BODY", 50_000)
    with StubServer() as stub:
        stub.route("GET", "/metrics", lambda r: r.send(200, b"a 1\n" * 100_000, "text/plain"))
        with pytest.raises(MetricsUnavailable, match="returned more than 0 MiB"):
            MetricsScraper(stub.base_url).scrape()


def test_invalid_utf8_metrics_page_is_an_error_not_a_crash() -> None:
    with StubServer() as stub:
        stub.route("GET", "/metrics", lambda r: r.send(200, b"\xff\xfe{{{", "text/plain"))
        with pytest.raises(MetricsUnavailable, match="not Prometheus exposition format"):
            MetricsScraper(stub.base_url).scrape()


def page(value: str) -> str:
    return (f"# TYPE vllm:prompt_tokens_total counter\n"
            f'vllm:prompt_tokens_total{{model_name="m"}} {value}\n'
            f"# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="m"}} {value}\n')


NUMBERS = st.sampled_from(["1e308", "-1e308", "+Inf", "-Inf", "NaN", "-5", "0",
                           "123456789012345678901234567890", "1.5"])


@settings(max_examples=100, deadline=None)
@given(NUMBERS, NUMBERS)
def test_absurd_counter_values_give_finite_or_nan_increases(a: str, b: str) -> None:
    delta = Snapshot.parse(page(b)) - Snapshot.parse(page(a))
    inc = delta.prompt_tokens()
    assert math.isnan(inc) or (math.isfinite(inc) and inc >= 0)
    running = Snapshot.parse(page(b)).running()
    assert running is None or math.isfinite(running)
    delta.as_dict()  # every figure computes


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.sampled_from(["# TYPE vllm:x counter", "vllm:x_total 1", 'vllm:y{a="b"} 2', "x{",
                     'a{b="\\"} 1', "a 1e999", "# TYPE a histogram", 'a_bucket{le="+Inf"} 1',
                     "\x00", 'a{le="x"} 1', "# TYPE a summary"]), st.text(max_size=20)),
    max_size=8))
def test_any_text_parses_or_raises_value_error(lines: list[str]) -> None:
    try:
        snap = Snapshot.parse("\n".join(lines) + "\n")
    except ValueError:
        return
    assert isinstance(snap.has_vllm, bool)
