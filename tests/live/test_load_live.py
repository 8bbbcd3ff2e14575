"""The load runner and the synthetic generator against the real vLLM CPU testbed.

* synthetic requests hit their token targets within one token per message, as the served
  model counts them (``/tokenize``, chat template and tools included), and the server's
  ``usage.prompt_tokens`` agrees;
* the runner's prompt and generation token counts (from ``usage``) equal the server's own
  counter deltas (``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``) exactly,
  on the shipped multi-turn agent request set with tools.

Tests in a session run one after another, so no other traffic reaches the session
``testbed`` while a run is measured (the runner's own ``/metrics`` scrapes count no tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept.observe.endpoint.discover import discover
from pytest_k3accept.observe.load import synthetic
from pytest_k3accept.observe.load.peak import unmeasured_peak
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.profile import load as load_profile
from pytest_k3accept.observe.load.requestset import load as load_set
from pytest_k3accept.observe.load.runner import run_load

pytestmark = [pytest.mark.live, pytest.mark.asyncio]

DATA = Path(__file__).resolve().parents[2] / "pytest_k3accept" / "data"


async def test_synthetic_requests_hit_token_targets(testbed: Any) -> None:
    ep = discover(testbed.base_url)
    tools = load_set(DATA / "agent_requests.jsonl").requests[0].tools
    profile = LoadProfile(context_tokens=1200, prefix_tokens=700, prefix_reuse=0.5,
                          requests=6, output_tokens=2)
    async with ep.client() as client:
        rs = await synthetic.generate(client, profile, tools=tools)
        shared = [r.messages[0]["content"] for r in rs]
        assert len(set(shared)) == 1 + 3  # half share one prefix, the rest their own
        for req in rs:
            full = await client.tokenize(messages=req.messages, tools=req.tools)
            head = await client.tokenize(messages=req.messages[:1], tools=req.tools,
                                         add_generation_prompt=False)
            assert abs(len(full) - 1200) <= 1, len(full)
            assert abs(len(head) - 700) <= 1, len(head)  # tools render in the system turn
        answer = await client.chat(rs.requests[0].messages, tools=rs.requests[0].tools,
                                   max_tokens=1)
        assert answer.ok, answer.error
        assert answer.prompt_tokens == rs.meta["measured_prompt_tokens"][0]


async def test_runner_token_counts_equal_server_counters(testbed: Any) -> None:
    ep = discover(testbed.base_url)
    profile = load_profile(DATA / "agent_profile.toml").replace(
        "test", requests=28, warmup=2, concurrency=3, max_seconds=120)
    # 28 requests, not 14: a 2-core CI host whose API server was starved while the engine
    # stepped let 14 pass with no gauge sample of a request running (peak unknown)
    result = await run_load(ep, None, profile)  # the profile's fixed agent request set
    s, srv = result.summary, result.server
    assert srv is not None, result.server_error
    assert s["ok"] == s["requests"] == 28, s["errors_by_kind"]
    assert result.prompt_tokens > 0 and result.completion_tokens == 28 * 96  # ignore_eos
    assert srv["prompt_tokens"] == result.prompt_tokens
    assert srv["generation_tokens"] == result.completion_tokens
    assert sum(srv["successes"].values()) == 28
    assert result.shared is False and srv["other_clients"]["other_requests"] == 0  # alone
    assert result.request_set["fingerprint"] == load_set(
        DATA / "agent_set.toml").fingerprint()
    # the conversations repeat the system prompt and tools: the prefix cache must hit
    assert srv["prefix_cache_hit_rate"] and srv["prefix_cache_hit_rate"] > 0.3
    assert unmeasured_peak(srv) is None, unmeasured_peak(srv)
    assert 0 < srv["peak_kv_usage"] < 0.1 and srv["preemptions"] == 0
    assert s["ttft"]["p99"] <= s["e2e"]["p99"]
    assert 1.0 <= result.achieved_concurrency["mean"] <= 3.0 and result.achieved_concurrency["max"] <= 3


async def test_two_worker_processes_merge_exactly_and_match_the_servers_counters(
        testbed: Any) -> None:
    """processes = 2 (issue 20 item 3): two spawned workers share the plan (1 stream each),
    this process keeps the one /metrics monitor; the merged counts equal the server's own
    counters and the percentiles are those of every record, not averaged."""
    from pytest_k3accept.observe.load import stats

    ep = discover(testbed.base_url)
    profile = load_profile(DATA / "agent_profile.toml").replace(
        "test", requests=8, warmup=0, concurrency=2, processes=2, max_seconds=120)
    result = await run_load(ep, None, profile)
    s, srv = result.summary, result.server
    assert srv is not None, result.server_error
    assert s["partial"] is None, s["partial"]
    assert s["ok"] == s["requests"] == len(result.records) == 8, s["errors_by_kind"]
    assert result.not_sent == 0 and result.stopped_by == "count"
    assert srv["prompt_tokens"] == result.prompt_tokens
    assert srv["generation_tokens"] == result.completion_tokens == 8 * 96
    assert sum(srv["successes"].values()) == 8 and result.shared is False
    ok = [r for r in result.records if r.ok]
    for name in ("ttft", "e2e"):
        assert s[name] == stats.distribution([getattr(r, name) for r in ok]), name
    assert s["ttft"]["p99"] <= s["e2e"]["p99"]
    assert s["processes"] == 2 and s["placement"] == "local"
    assert len(s["client_cpu_by_process"]) == 2 and all(s["client_cpu_by_process"])
    assert 0 < result.achieved_concurrency["mean"] <= 2 and result.achieved_concurrency["max"] <= 2
    assert "over 2 processes (local)" in result.line()
    record = result.as_dict()  # what k3_load records beside the typed evidence
    assert record["profile"]["processes"] == 2 and record["summary"]["processes"] == 2
    typed = result.evidence("r1", "test")  # the record's typed load evidence
    assert typed.processes == 2 and typed.partial is None
