"""The hybrid testbed model (``hybrid``: a tiny random-weight Qwen3Next, gated-delta-net layers
with recurrent state beside one attention layer, Kimi-K3-like) on the real vLLM CPU build.

One server, started with the ``testbed-hybrid`` preset's KV cache:

* it serves with prefix caching in ``mamba_cache_mode="align"`` and 128-token blocks, as
  ``vllm:cache_config_info`` says;
* the same ~1,632-token system prompt four times: 0 hits, then whole blocks (1,536 = 12 x 128)
  each time, read from ``/metrics`` (``usage`` has no cached tokens);
* the prefix-cache A/B's block arithmetic on real 0-hit cases: a shared prefix under one block,
  and a shared part that ends mid-block while each request's state is kept at its last whole
  block (in its unique part) are both *inconclusive*, never "caching is broken"; the A/B's own
  default set (sized in whole blocks from the live config) hits;
* step 5 of the procedure for real: steps 2, 3 and 6 on this server, step 5 on two relaunches
  (the budget: ~55 s each here) with ``--max-num-batched-tokens 512`` that differ only in
  ``--prefix-cache-retention-interval`` (0 vs 512): 0 vs 1,024 hits and a shorter prefill, in
  the step log, the verdict's reasons and advice, and the record;
* the cache expectations of a preset against the live ``cache_config_info``: one that matches,
  and K3's (the recipe's ``--prefix-match-unit 128``), which this server does not meet.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def hybrid(module_testbed_factory: Any) -> Any:
    from pytest_k3accept.config.presets import load_preset

    server = load_preset("testbed-hybrid").server
    return module_testbed_factory(variant="hybrid", kv_cache_bytes=server.kv_cache_bytes,
                                  max_model_len=server.max_model_len)


def _set(base_url: str, prefix: int, context: int, requests: int, seed: int) -> Any:
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.synthetic import generate

    async def go() -> Any:
        async with K3Client(base_url, "k3-testbed", timeout=120) as client:
            return await generate(client, LoadProfile(
                name=f"hybrid-{prefix}", context_tokens=context, prefix_tokens=prefix,
                prefix_reuse=1.0, requests=requests, output_tokens=4, seed=seed))
    return asyncio.run(go())


def _ab(base_url: str, rs: Any) -> Any:
    from pytest_k3accept.checks.prefix_ab.run import Side, run_ab

    return asyncio.run(run_ab([Side("on", base_url, "k3-testbed")], rs, timeout=120))


def test_hybrid_serves_in_align_mode(hybrid: Any) -> None:
    from pytest_k3accept.checks.prefix_ab.blocks import from_config
    from pytest_k3accept.checks.prefix_ab.run import live_config

    cfg = asyncio.run(live_config(hybrid.base_url, None, 30))
    assert cfg.get("enable_prefix_caching") == "True", cfg
    blocks = from_config([cfg])
    assert blocks.align and blocks.block_size == 128, cfg
    assert "Mamba cache mode is set to 'align'" in hybrid.log_text()


def test_same_system_prompt_hits_in_whole_blocks(hybrid: Any) -> None:
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.metrics import MetricsScraper

    rs = _set(hybrid.base_url, 1632, 1660, 4, seed=181)
    scraper = MetricsScraper(hybrid.base_url, timeout=30)

    async def go() -> list[float]:
        hits = []
        async with K3Client(hybrid.base_url, "k3-testbed", timeout=120) as client:
            for req in rs.requests:
                before = scraper.scrape()
                res = await client.chat(req.messages, max_tokens=4)
                assert res.ok, res.error
                hits.append((scraper.scrape() - before).prefix_cache_hits())
        return hits
    hits = asyncio.run(go())
    assert hits == [0, 1536, 1536, 1536], hits


def test_ab_block_arithmetic_on_real_zero_hits(hybrid: Any) -> None:
    # a shared prefix under one block: no repeat can hit
    short = _ab(hybrid.base_url, _set(hybrid.base_url, 81, 200, 4, seed=182))
    assert short.on is not None and short.on.hits == 0, short.message
    assert not short.problems, short.message
    assert f"the shared prefix ({short.shape.shared_tokens} tokens) is shorter than one block " \
           "(128)" in short.message
    # 2 requests sharing ~300 tokens, 700-token prompts: the first one's state is kept at 640
    mid = _ab(hybrid.base_url, _set(hybrid.base_url, 300, 700, 2, seed=183))
    assert mid.on is not None and mid.on.hits == 0, mid.message
    assert mid.status == "incomplete" and not mid.problems, mid.message
    assert "align mode keeps state only at block boundaries" in mid.message
    assert "ends mid-block" in mid.message and "does not show that caching is broken" in mid.message
    # the A/B's own set, sized in whole blocks from the live config: every repeat hits
    own = _ab(hybrid.base_url, None)
    assert own.on is not None and own.shape.shared_tokens >= 256, own.message
    assert own.on.hits == 256 * (own.shape.requests - 1), own.message


def _retention_set(base_url: str) -> Any:
    """Two requests that share a ~1,050-token system prompt: the first 1,900 tokens long (so
    ``--max-num-batched-tokens 512`` prefills it in 4 chunks, each ending at a multiple of
    512), the second 1,100 tokens (it shares the first two chunks of the first)."""
    from pytest_k3accept.observe.load.requestset import RequestSet

    big = _set(base_url, 1050, 1900, 1, seed=184).requests[0]
    small = _set(base_url, 1050, 1100, 1, seed=184).requests[0]
    assert big.messages[0] == small.messages[0]
    return RequestSet([big, small], name="hybrid-retention")


def test_step5_compares_two_retention_settings_on_chunked_prefill(hybrid: Any,
                                                                  tmp_path: Any) -> None:
    """The procedure on the hybrid server: steps 2, 3 and 6 on it, step 5 on two relaunches
    with --max-num-batched-tokens 512 that differ only in the retention interval (0 vs 512);
    the comparison, both settings' figures, the verdict's reason and advice, and the record."""
    from pytest_k3accept.checks.procedure.plan import DecisionProfile, ProcedureSpec
    from pytest_k3accept.checks.procedure.run import run_procedure
    from pytest_k3accept.config.presets import load_preset
    from pytest_k3accept.config.settings import Settings
    from pytest_k3accept.evidence.store import Evidence, RunState
    from pytest_k3accept.decide.verdict import decide_state
    from pytest_k3accept.observe.endpoint.discover import discover
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.server.relaunch import Relauncher
    from pytest_k3accept.output import record
    from pytest_k3accept.output.redact import Redactor

    rs = _retention_set(hybrid.base_url)
    dp = DecisionProfile(
        LoadProfile(name="hybrid-retention", concurrency=2, requests=2, context_tokens=1900,
                    output_tokens=4, warmup=0, max_seconds=120),
        ProcedureSpec(retention_interval=512, retention_batched_tokens=512))
    size = load_preset("testbed-hybrid").server.kv_cache_bytes
    relauncher = Relauncher(f"testbed --variant hybrid --kv-cache-memory-bytes {size}",
                            artifacts=tmp_path, timeout=300)
    endpoint = discover(hybrid.base_url, timeout=30)
    proc = asyncio.run(run_procedure(endpoint, dp, relauncher=relauncher, requests=rs))
    print("\n".join(proc.lines()))
    steps = {s.n: s for s in proc.steps}
    s5 = steps[5]
    assert s5.status == "ran", s5.reason
    ret = s5.figures["retention"]
    base, changed = ret["base"], ret["changed"]
    assert (base["interval"], changed["interval"]) == ("0", "512"), ret
    assert base["max_num_batched_tokens"] == changed["max_num_batched_tokens"] == "512"
    assert base["mamba_cache_mode"] == changed["mamba_cache_mode"] == "align"
    # the second request resumes at the state kept at 1,024 only with retention 512
    assert base["prefix_cache_hits"] == 0 and changed["prefix_cache_hits"] == 1024, ret
    assert base["prefix_cache_queries"] == changed["prefix_cache_queries"] > 0
    assert base["cached_tokens"] is None  # usage.cached_tokens stays null: /metrics says it
    # the hits decide; prefill time is reported, and only a difference beyond 5 % is told
    # (on a fast machine both prefills take ~120 ms: no timed assertion here)
    assert ret["outcome"] == "more-hits" and ret["faster"] in (True, False, None), ret
    assert changed["prefill_time_mean"] > 0 and base["prefill_time_mean"] > 0, ret
    assert "prefix-cache hits 1,024 vs 0" in s5.reason and "prefill mean" in s5.reason
    assert [steps[n].status for n in (1, 2, 3, 6, 7)] == ["ran"] * 5, proc.lines()
    assert proc.one_variable, proc.problems
    # the verdict cites step 5 and advises the setting that kept the states
    assert any("step 5 cache retention" in r and "1,024 vs 0" in r
               for r in proc.verdict.reasons), proc.verdict.reasons
    assert any("--prefix-cache-retention-interval 512" in a and "0 -> 1,024" in a
               for a in proc.verdict.advice), proc.verdict.advice
    # the record keeps both settings' figures
    state = RunState()
    state.add("procedure", proc.summary(), proc.as_dict(), nodeid="test_hybrid_live")
    verdict = decide_state(state, target=dp.target())
    assert any("--prefix-cache-retention-interval 512" in a for a in verdict.advice)
    rec = record.finish(record.build(state, Settings(), environ={}), Redactor())
    step5 = next(s for s in rec["evidence"][0]["data"]["steps"] if s["n"] == 5)
    assert step5["retention"]["base"]["prefix_cache_hits"] == 0
    assert step5["retention"]["changed"]["prefix_cache_hits"] == 1024
    assert step5["retention"]["changed"]["prefill_time_mean"] > 0


def test_cache_expectations_against_the_live_config(hybrid: Any) -> None:
    """A preset that matches the live cache_config_info passes each expectation; K3's (with
    the recipe's --prefix-match-unit 128) fails, naming the wanted and the live value."""
    from pathlib import Path
    from types import SimpleNamespace

    from pytest_k3accept.checks.prefix_ab.expect import FAIL, PASS, check
    from pytest_k3accept.checks.prefix_ab.run import live_config
    from pytest_k3accept.config.presets import load_preset

    data = Path(__file__).parent.parent / "data" / "presets"
    cfg = asyncio.run(live_config(hybrid.base_url, None, 30))
    same = load_preset(data / "hybrid-cache.toml")
    ok = check(same.server, cfg, preset=same.name)
    assert [(r.label, r.status, r.live) for r in ok] == [
        ("enable_prefix_caching", PASS, "True"), ("mamba_cache_mode", PASS, "align")]
    # K3's: the kimi-k3 preset's explicit prefix caching and align mode, and the recipe's
    # --prefix-match-unit 128 (as the field guide's recipe passes it)
    k3 = SimpleNamespace(prefix_caching="explicit", mamba_cache_mode="align",
                         prefix_match_unit=128)
    got = {r.label: r for r in check(k3, cfg, preset="k3-cache", recipe="Kimi-K3.yaml")}
    assert got["enable_prefix_caching"].status == got["mamba_cache_mode"].status == PASS
    miss = got["prefix_match_unit"]
    assert miss.status == FAIL and miss.message == (
        "prefix_match_unit: the recipe (Kimi-K3.yaml, via preset 'k3-cache') wants "
        "--prefix-match-unit 128; the live server reports 'None': not set, so hits come in "
        "whole blocks of 128 tokens")
