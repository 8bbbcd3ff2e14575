"""Metrics parsing and deltas on vLLM-shaped exposition text (our own parsing logic)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from pytest_k3accept.observe.metrics import MetricsScraper, MetricsUnavailable, Snapshot

LABELS = 'engine="0",model_name="m"'


def exposition(prompt: float, gen: float, hits: float, queries: float, kv: float,
               preempt: float = 0, stop: float = 0, length: float = 0) -> str:
    return f"""# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{{LABELS}}} {prompt}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{LABELS}}} {gen}
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{{LABELS}}} {hits}
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{{LABELS}}} {queries}
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{{LABELS}}} {preempt}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{{LABELS}}} {kv}
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{LABELS}}} 3
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{LABELS}}} 1
# TYPE vllm:request_success_total counter
vllm:request_success_total{{{LABELS},finished_reason="stop"}} {stop}
vllm:request_success_total{{{LABELS},finished_reason="length"}} {length}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{{LABELS},le="0.1"}} 1
vllm:time_to_first_token_seconds_bucket{{{LABELS},le="+Inf"}} 2
vllm:time_to_first_token_seconds_count{{{LABELS}}} 2
vllm:time_to_first_token_seconds_sum{{{LABELS}}} 0.5
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="128",enable_prefix_caching="True",engine="0",mamba_cache_mode="none",num_gpu_blocks="100"}} 1
"""


def test_snapshot_accessors() -> None:
    snap = Snapshot.parse(exposition(10, 5, 0, 10, 0.25))
    assert snap.has_vllm
    assert snap.kv_cache_usage() == 0.25
    assert snap.running() == 3 and snap.waiting() == 1
    assert snap.cache_config()["block_size"] == "128"
    assert snap.prefix_caching_enabled() is True
    assert "engine" not in snap.cache_config()


def test_delta_counters_and_rates() -> None:
    a = Snapshot.parse(exposition(100, 50, 0, 100, 0.1, stop=1), at=1.0)
    b = Snapshot.parse(exposition(400, 80, 128, 300, 0.5, preempt=2, stop=3, length=1), at=3.0)
    d = b - a
    assert d.seconds == 2.0
    assert d.prompt_tokens() == 300 and d.generation_tokens() == 30
    assert d.prefix_cache_hits() == 128 and d.prefix_cache_queries() == 200
    assert d.prefix_cache_hit_rate() == pytest.approx(0.64)
    assert d.preemptions() == 2
    assert d.successes() == {"stop": 2, "length": 1}
    assert d.as_dict()["prompt_tokens"] == 300


def test_counter_reset_counts_from_zero() -> None:
    a = Snapshot.parse(exposition(1000, 0, 0, 0, 0))
    b = Snapshot.parse(exposition(30, 0, 0, 0, 0))
    assert (b - a).prompt_tokens() == 30


def test_hit_rate_none_without_queries() -> None:
    a = Snapshot.parse(exposition(1, 1, 0, 0, 0))
    assert (a - a).prefix_cache_hit_rate() is None


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_absurd_gauge_values_never_crash(value: float) -> None:
    text = exposition(1, 1, 0, 0, 0).replace("vllm:kv_cache_usage_perc{" + LABELS + "} 0",
                                             "vllm:kv_cache_usage_perc{" + LABELS + "} "
                                             + repr(value).replace("inf", "Inf"))
    snap = Snapshot.parse(text)
    usage = snap.kv_cache_usage()
    assert usage is None or math.isfinite(usage)


def test_scraper_messages_for_non_vllm() -> None:
    scraper = MetricsScraper("http://127.0.0.1:9")
    with pytest.raises(MetricsUnavailable, match="404: not available from this server"):
        scraper._check(404, "")
    with pytest.raises(MetricsUnavailable, match="no vllm: series"):
        scraper._check(200, "# TYPE up gauge\nup 1\n")
    with pytest.raises(MetricsUnavailable, match="not Prometheus exposition format"):
        scraper._check(200, "this is { not metrics")
    with pytest.raises(MetricsUnavailable, match="cannot scrape"):
        scraper.scrape()


def test_histogram_over_a_bound_counts_the_observations_above_it() -> None:
    def page(under: int, total: int) -> str:
        return (f'vllm:request_queue_time_seconds_bucket{{{LABELS},le="0.5"}} {under}\n'
                f'vllm:request_queue_time_seconds_bucket{{{LABELS},le="1.0"}} {under}\n'
                f'vllm:request_queue_time_seconds_bucket{{{LABELS},le="+Inf"}} {total}\n'
                f'vllm:request_queue_time_seconds_count{{{LABELS}}} {total}\n'
                f'vllm:request_queue_time_seconds_sum{{{LABELS}}} 9.0\n')
    d = Snapshot.parse(page(6, 8)) - Snapshot.parse(page(2, 2))
    assert d.histogram_over("vllm:request_queue_time_seconds", 1.0) == 2
    assert d.histogram_over("vllm:request_queue_time_seconds", 0.5) == 2
    assert d.histogram_over("vllm:request_queue_time_seconds", 0.75) is None  # no such bucket
    assert d.histogram_over("vllm:no_such_seconds", 1.0) is None
