"""benchmarks/peers.py's parsers on result files the real peers wrote (tests/data/bench/).

The expected figures are what each tool itself reported in those files (req/s, TTFT p50/p99,
in-flight), turned into a table row (times in ms).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "bench"
sys.path.insert(0, str(ROOT / "benchmarks"))

import peers  # noqa: E402

#: file -> (ok, errors, req/s, in-flight, TTFT p50 ms, TTFT p99 ms), as the tool reported them
WANT = {
    "aiperf-0.13.0-c64.json": (400, 0, 241.34, 28.02, 103.37, 273.00),
    "aiperf-0.13.0-rate100.json": (300, 0, 104.38, 0.641, 2.434, 29.85),
    "inference-perf-0.7.0-c64.json": (400, 0, 400.99, 2.354, 2.933, 17.62),
    "inference-perf-0.7.0-rate100.json": (300, 0, 99.56, 0.3358, 1.755, 9.989),
    "guidellm-0.8.1-c8.json": (99, 0, 73.56, 3.455, 23.94, 72.04),
    "vllm-bench-0.32.0-c8.json": (100, 0, 509.67, 6.786, 12.85, 20.98),
}
#: file name prefix -> (parser, table label)
PARSERS: dict[str, tuple[Callable[..., dict[str, Any]], str]] = {
    "aiperf": (peers.parse_aiperf, "AIPerf 0.13.0"),
    "inference-perf": (peers.parse_inference_perf, "inference-perf 0.7.0"),
    "guidellm": (peers.parse_guidellm, "GuideLLM 0.8.1"),
    "vllm-bench": (peers.parse_vllm, "vllm bench serve"),
}


@pytest.mark.parametrize("name", sorted(WANT))
def test_parser_reads_what_the_tool_wrote(name: str) -> None:
    parse, tool = PARSERS[name.rsplit("-", 2)[0]]
    ok, errors, rps, conc, p50, p99 = WANT[name]
    row = parse(DATA / name, note="n")
    assert row["tool"] == tool and row["note"] == "n" and row["cpu_us"] is None
    assert (row["ok"], row["errors"]) == (ok, errors)
    got = (row["rps"], row["conc"], row["ttft_p50_ms"], row["ttft_p99_ms"])
    assert got == pytest.approx((rps, conc, p50, p99), rel=1e-3)


def test_aiperf_req_per_s_is_its_own_request_throughput() -> None:
    import json

    d = json.loads((DATA / "aiperf-0.13.0-c64.json").read_text())
    assert peers.parse_aiperf(DATA / "aiperf-0.13.0-c64.json")["rps"] == pytest.approx(
        d["request_throughput"]["avg"], rel=1e-2)


def test_inference_perf_req_per_s_is_its_own_requests_per_sec() -> None:
    import json

    d = json.loads((DATA / "inference-perf-0.7.0-rate100.json").read_text())
    row = peers.parse_inference_perf(DATA / "inference-perf-0.7.0-rate100.json")
    assert row["rps"] == pytest.approx(d["successes"]["throughput"]["requests_per_sec"], rel=1e-3)


def test_inference_perf_config_matches_the_other_tools(tmp_path: Path) -> None:
    closed = peers.inference_perf_config("http://h:1", conc=512, rate=None, n=5000, chunks=16,
                                         prompt_tokens=32, tok="/tok", reports=tmp_path)
    sp = closed["data"]["shared_prefix"]
    assert sp["system_prompt_len"] + sp["question_len"] == 32 and sp["output_len"] == 16
    assert sp["num_prompts_per_group"] == 5000
    assert closed["load"]["stages"] == [{"num_requests": 5000, "concurrency_level": 512}]
    assert closed["load"]["worker_max_concurrency"] * closed["load"]["num_workers"] >= 512
    assert closed["api"] == {"type": "chat", "streaming": True}
    opened = peers.inference_perf_config("http://h:1", conc=None, rate=400.0, n=3000, chunks=16,
                                         prompt_tokens=32, tok="/tok", reports=tmp_path)
    assert opened["load"]["type"] == "poisson"
    assert opened["load"]["stages"] == [{"rate": 400.0, "duration": 8}]
