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
  default set (sized in whole blocks from the live config) hits.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def hybrid(testbed_factory: Any) -> Any:
    from pytest_k3accept.config.presets import load_preset

    server = load_preset("testbed-hybrid").server
    return testbed_factory(variant="hybrid", kv_cache_bytes=server.kv_cache_bytes,
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
