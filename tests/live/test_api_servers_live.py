"""A real vLLM server with ``--api-server-count 2``: prometheus_client in multiprocess mode.

vLLM then runs two API server processes in front of the engine and sets
``PROMETHEUS_MULTIPROC_DIR`` itself; ``/metrics`` (answered by either process) merges both
processes' counters, and the ``python_*`` / ``process_*`` families disappear. Started as
``vllm serve`` starts it (its ``serve`` subcommand): the OpenAI ``api_server`` module
silently runs one API server whatever the count. The load's server-side figures must
equal what the runner sent (nothing doubled over the two processes, nothing lost), the run
is not "shared", and the gauges give a KV peak.
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest

from pytest_k3accept.observe.endpoint.discover import discover
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.runner import run_load
from pytest_k3accept.observe.metrics import MetricsScraper
from vllm_servers import serve

pytestmark = [pytest.mark.live]


@pytest.fixture(scope="module")
def two_api_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One testbed engine behind ``--api-server-count 2`` (its URL); stopped at the end."""
    yield from serve(tmp_path_factory, "api2", ("--api-server-count", "2"),
                     kv_cache_bytes=64 << 20, vllm_serve=True)


@pytest.mark.asyncio
async def test_two_api_servers_count_each_request_once(two_api_servers: str) -> None:
    with MetricsScraper(two_api_servers) as scraper:
        page = scraper.scrape()
    # multiprocess mode really is on: the per-process families are gone
    assert not page.has("python_gc_objects_collected_total")
    assert not any(name.startswith("process_") for name, _ in page.samples)
    ep = discover(two_api_servers)
    profile = LoadProfile(name="api2", requests=10, concurrency=4, output_tokens=48,
                          context_tokens=300, max_seconds=240)
    t0 = time.monotonic()
    result = await run_load(ep, None, profile)
    s, srv = result.summary, result.server
    assert srv is not None, result.server_error
    assert s["ok"] == s["requests"] == 10, s["errors_by_kind"]
    # requests went through both API server processes; the merged counters count each once
    assert sum(srv["successes"].values()) == 10
    assert srv["prompt_tokens"] == result.prompt_tokens > 0
    assert srv["generation_tokens"] == result.completion_tokens == 10 * 48
    assert result.shared is False, result.other_clients
    assert srv["peak_kv_usage"] is not None and 0 < srv["peak_kv_usage"] <= 1.0
    assert srv["gauge_samples"] > 0 and time.monotonic() - t0 < 240
    assert "peak KV" in result.line() and "SHARED" not in result.line()
    print(f"\n[api2] {result.line()}; server prompt/generation tokens "
          f"{srv['prompt_tokens']:.0f}/{srv['generation_tokens']:.0f}, runner "
          f"{result.prompt_tokens}/{result.completion_tokens}")
