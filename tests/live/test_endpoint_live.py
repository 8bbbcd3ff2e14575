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


def _server_keepalive_s(base_url: str, limit: float = 30.0) -> float:
    """Seconds the server keeps an idle HTTP/1.1 connection open after an answer: one GET
    on a raw socket, then the time until the server closes it."""
    import socket
    import time
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=limit) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        answered = time.monotonic()
        while sock.recv(65536):  # the rest of the answer, then the server's close (b"")
            pass
        return time.monotonic() - answered


def test_clients_drop_idle_connections_before_the_server_closes_them(release_testbed) -> None:
    """The server (uvicorn under vLLM) closes an idle connection after its keep-alive; a
    request sent on it at that moment fails before any answer and would count as the
    server's connection error. Every client of the plugin reuses an idle connection for less
    than the real server's keep-alive (measured here), and a request after an idle gap
    just past our expiry, before the server's, still succeeds."""
    import asyncio

    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.endpoint.transport import (LeanAiohttpTransport, httpx_limits,
                                                            keepalive_s)

    server = _server_keepalive_s(release_testbed.base_url)
    assert 1.0 < server < 30.0, server  # uvicorn's 5 s on both releases
    assert keepalive_s() <= server - 0.5
    assert LeanAiohttpTransport()._keepalive == keepalive_s()
    assert httpx_limits().keepalive_expiry == keepalive_s()

    async def go() -> list[bool]:
        async with K3Client(release_testbed.base_url, "k3-testbed") as client:
            oks = [(await client.completion("hi", max_tokens=2, stream=True)).ok]
            await asyncio.sleep((keepalive_s() + server) / 2)
            oks.append((await client.completion("hi", max_tokens=2, stream=True)).ok)
            return oks

    assert asyncio.run(go()) == [True, True]
