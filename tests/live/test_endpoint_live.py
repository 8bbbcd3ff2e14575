"""The foundation against a real vLLM server: discovery, client timings, metrics deltas, on
each release the tests use (``testbed.RELEASES``: 0.32.0, the default, and a second one)."""

from __future__ import annotations

import pytest

from pytest_k3accept.observe.endpoint.discover import EndpointError, discover
from pytest_k3accept.observe.metrics import ENGINE_SERIES, MetricsScraper
from pytest_k3accept.testbed import RELEASES

pytestmark = [pytest.mark.live,
              pytest.mark.parametrize("testbed_release", RELEASES, indirect=True)]

USER = [{"role": "user", "content": "Say something about the weather today."}]


def test_discovery(release_testbed) -> None:
    ep = discover(release_testbed.base_url)
    assert ep.model == "k3-testbed"
    assert ep.max_model_len == 2048
    assert ep.version == release_testbed.release
    assert ep.root and ep.root.endswith("tiny") or "tiny" in (ep.root or "")
    assert ep.is_vllm


def test_discovery_wrong_model_names_the_served_ones(release_testbed) -> None:
    with pytest.raises(EndpointError) as err:
        discover(release_testbed.base_url, model="kimi-k3")
    assert err.value.kind == "model"
    assert "'kimi-k3' is not served" in str(err.value) and "k3-testbed" in str(err.value)


@pytest.mark.asyncio
async def test_chat_non_streaming_counts_from_usage(release_testbed) -> None:
    ep = discover(release_testbed.base_url)
    async with ep.client() as client:
        res = await client.chat(USER, max_tokens=12, ignore_eos=True)
        ids = await client.tokenize(messages=USER, add_generation_prompt=True)
    assert res.ok and res.status == 200, res.error
    assert res.completion_tokens == 12
    assert res.prompt_tokens == len(ids)
    assert res.e2e and res.e2e > 0
    assert res.ttft is None  # not measurable without streaming


@pytest.mark.asyncio
async def test_streamed_completion_ttft_itl_and_usage(release_testbed) -> None:
    ep = discover(release_testbed.base_url)
    async with ep.client() as client:
        res = await client.chat(USER, stream=True, max_tokens=20, ignore_eos=True)
    assert res.ok, res.error
    assert res.completion_tokens == 20  # from usage, not from chunks
    assert res.prompt_tokens and res.prompt_tokens > 5
    assert res.ttft is not None and 0 < res.ttft <= res.e2e
    assert len(res.itl) >= 1 and all(gap >= 0 for gap in res.itl)
    assert res.tpot is not None and res.tpot > 0


@pytest.mark.asyncio
async def test_http_errors_are_results_not_exceptions(release_testbed) -> None:
    ep = discover(release_testbed.base_url)
    async with ep.client() as client:
        too_long = await client.completion("word " * 5000, max_tokens=4)
    assert not too_long.ok and too_long.status == 400
    assert too_long.error_kind == "http-4xx"
    assert "maximum context length" in (too_long.error or "")
    assert too_long.ttft is None


@pytest.mark.asyncio
async def test_metrics_delta_and_real_prefix_cache_hit(release_testbed) -> None:
    """A prefix longer than one CPU KV block (128 tokens) repeated -> real hits."""
    ep = discover(release_testbed.base_url)
    scraper = MetricsScraper(ep.base_url)
    system = "You are a careful assistant for an operations team. " * 40
    async with ep.client() as client:
        assert len(await client.tokenize(system)) > 256
        before = scraper.scrape()
        for i in range(3):
            res = await client.chat([{"role": "system", "content": system},
                                     {"role": "user", "content": f"question {i}"}],
                                    max_tokens=4, ignore_eos=True)
            assert res.ok, res.error
        after = scraper.scrape()
    delta = after - before
    assert delta.prompt_tokens() > 3 * 256
    assert delta.generation_tokens() == 12
    assert delta.prefix_cache_hits() > 0
    assert 0 < (delta.prefix_cache_hit_rate() or 0) <= 1
    assert res.cached_tokens is None or res.cached_tokens >= 128
    assert after.prefix_caching_enabled() is True
    assert after.missing(ENGINE_SERIES) == [] and after.aliased == {}  # current names, every release
    assert after.kv_cache_usage() is not None and delta.preemptions() == 0
