"""Endpoint wiring: ``k3_endpoint``, ``k3_client`` and ``k3_metrics``."""

from __future__ import annotations

from typing import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from ..client import K3Client
from ..endpoint import Endpoint, EndpointError, discover
from ..metrics import MetricsScraper, MetricsUnavailable
from . import settings_of, state_of, unavailable

NO_ENDPOINT = ("no endpoint under test: pass --k3-endpoint URL (or set K3ACCEPT_ENDPOINT), or "
               "--k3-launch 'COMMAND' / --k3-launch testbed to start one")


@pytest.fixture(scope="session")
def k3_base_url(request: pytest.FixtureRequest) -> str:
    """Base URL of the server under test (``--k3-endpoint``, or the one ``--k3-launch`` started).

    Skips with the reason when there is none (fails under ``--k3-require``).
    """
    s = settings_of(request.config)
    if s.launch:
        return str(request.getfixturevalue("k3_server").base_url)
    if s.endpoint:
        return s.endpoint
    unavailable(request.config, NO_ENDPOINT)


@pytest.fixture(scope="session")
def k3_endpoint(request: pytest.FixtureRequest, k3_base_url: str) -> Endpoint:
    """The discovered deployment as plain data (session scope).

    Fields: ``base_url``, ``model`` (served name; ``--k3-model`` or the first of
    ``/v1/models``), ``root``, ``max_model_len``, ``version`` (``/version``; None when the
    server is not vLLM), ``served_models``. ``k3_endpoint.client()`` makes an async
    :class:`~pytest_k3accept.client.K3Client`. Unreachable endpoints, a wrong model name or
    a rejected key skip the test with a specific message (or fail under ``--k3-require``).
    An external ``--k3-endpoint`` is asked once, without waiting (a deployment under
    acceptance should already be up); a ``--k3-launch`` server was waited for by
    ``k3_server`` (``--k3-launch-timeout``). A failed discovery is cached for the session.
    """
    s = settings_of(request.config)
    try:
        ep = discover(k3_base_url, model=s.model, api_key=s.api_key(),
                      api_key_env=s.api_key_env, timeout=s.timeout)
    except EndpointError as exc:
        state_of(request.config).add("endpoint-error", str(exc), {"kind": exc.kind,
                                                                   "url": k3_base_url})
        unavailable(request.config, str(exc))
    kind = f"vLLM {ep.version}" if ep.is_vllm else "not vLLM: no /version"
    state_of(request.config).add(
        "endpoint", f"{ep.model} at {ep.base_url} ({kind}, max_model_len "
        f"{ep.max_model_len or 'unknown'})", ep.as_dict())
    return ep


@pytest_asyncio.fixture(loop_scope="function")
async def k3_client(request: pytest.FixtureRequest,
                    k3_endpoint: Endpoint) -> AsyncIterator[K3Client]:
    """An async measuring client for the endpoint, closed after the test.

    ``await k3_client.chat(messages, stream=True, max_tokens=32)`` returns a
    :class:`~pytest_k3accept.client.RequestResult` with status, error body, TTFT,
    inter-token latencies, e2e latency and token counts from the server's ``usage``.
    """
    from .server import watch_client  # its first success goes on the server timeline

    async with k3_endpoint.client() as client:
        yield watch_client(request.config, client)


@pytest.fixture
def k3_metrics(request: pytest.FixtureRequest, k3_endpoint: Endpoint,
               ) -> Iterator[MetricsScraper]:
    """Scraper of the endpoint's ``/metrics`` (prometheus_client parser).

    ``before = k3_metrics.scrape()`` ... ``delta = k3_metrics.scrape() - before`` gives
    counter deltas (``delta.prompt_tokens()``, ``delta.prefix_cache_hit_rate()``,
    ``delta.preemptions()``, ``delta.successes()``); snapshots give gauges
    (``kv_cache_usage()``, ``running()``, ``waiting()``) and ``cache_config()``. Skips with
    "not available from this server" when the server exposes no vLLM metrics.
    """
    from ..endpoint import auth_headers

    s = settings_of(request.config)
    scraper = MetricsScraper(k3_endpoint.base_url, headers=auth_headers(s.api_key()),
                             timeout=s.timeout)
    with scraper:
        try:
            scraper.scrape()
        except MetricsUnavailable as exc:
            unavailable(request.config, f"k3_metrics: {exc}")
        yield scraper
