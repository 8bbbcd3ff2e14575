"""Long context on the real vLLM CPU build: the ``long`` testbed model (``tiny`` with
``max_position_embeddings`` 1,048,576) served with ``--max-model-len 131072``.

* the synthetic generator builds prompts of exactly 32,768 and 131,072 tokens of the served
  model, measured with the server's ``/tokenize`` (its cost, calls and seconds, printed);
* the platform suite's "prefill near the target context" runs through pytester at 32K and
  near the served context (130,048 prompt tokens of 131,072), and the TTFT it records is checked
  against vLLM's own ``vllm:time_to_first_token_seconds`` histogram for that one request (the
  client-added part printed: what the client measures beyond the server's own clock);
* a 1,048,576-token prompt against the smaller context gets vLLM's 400 answer, named as a
  rejection, after exactly one request (no retry storm).

Prefill time on the CPU build grows faster than the prompt (measured 2026-12-02 on this 2-core
machine: 32K 7.6 s, 130K 117 s), so the near-target prefill is the longest test here (~2 min,
run with ``--k3-timeout 900``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

pytestmark = pytest.mark.live

CONTEXT = 32_768
MAX_MODEL_LEN = 131_072
#: the platform suite's prefill near the served context: the prompt plus the profile's 8
#: output tokens stay inside it
NEAR_TARGET = MAX_MODEL_LEN - 1024
#: 1 KiB of KV per token: 160 MiB holds one whole 128K request with room to spare
KV_BYTES = 160 << 20


@pytest.fixture(scope="module")
def long_server(module_testbed_factory: Any) -> Any:
    """The ``long`` testbed model served with a 128K context."""
    return module_testbed_factory(variant="long", kv_cache_bytes=KV_BYTES,
                                  max_model_len=MAX_MODEL_LEN)


def test_the_server_serves_the_long_context(long_server: Any) -> None:
    from pytest_k3accept.observe.endpoint.discover import discover

    endpoint = discover(long_server.base_url, timeout=30)
    assert endpoint.max_model_len == MAX_MODEL_LEN, endpoint


@pytest.mark.parametrize("context", [CONTEXT, MAX_MODEL_LEN], ids=["32k", "128k"])
def test_a_long_prompt_is_built_to_the_token_and_its_cost_printed(
        long_server: Any, context: int) -> None:
    """Building a prompt costs /tokenize calls, not a prefill (the secant search over the
    server's own tokenizer)."""
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.synthetic import CallCounting, generate, tokenize_counter

    counting: CallCounting | None = None

    async def go() -> Any:
        nonlocal counting
        async with K3Client(long_server.base_url, "k3-testbed", timeout=120) as client:
            counting = CallCounting(tokenize_counter(client))
            return await generate(client, LoadProfile(
                name=f"long-{context}", context_tokens=context, requests=1, output_tokens=4,
                seed=32), counter=counting)

    t0 = time.perf_counter()
    rs = asyncio.run(go())
    seconds = time.perf_counter() - t0
    assert counting is not None
    calls = counting.calls
    print(f"\ngenerator: {context}-token prompt in {calls} /tokenize calls, {seconds:.2f} s "
          f"({seconds / context * 1e6:.1f} us per token), {counting.tokens / context:.1f}x "
          "its tokens tokenized by the server")
    assert rs.meta["measured_prompt_tokens"] == [context] or \
        rs.meta["max_prompt_deviation"] <= 1, rs.meta
    # the secant search converges in a handful of calls however long the prompt
    assert 3 <= calls <= 12, calls


@pytest.mark.parametrize("context", [CONTEXT, NEAR_TARGET], ids=["32k", "near-128k"])
def test_the_platform_prefill_and_ttft_against_vllms_histogram(
        pytester: pytest.Pytester, long_server: Any, context: int) -> None:
    from pytest_k3accept.observe.metrics import MetricsScraper

    pytester.makefile(".toml", profile=f"name = 'long'\ncontext_tokens = {context}\n"
                                       "concurrency = 1\nrequests = 1\noutput_tokens = 8\n")
    scraper = MetricsScraper(long_server.base_url, timeout=30)
    before = scraper.scrape()
    result = pytester.runpytest(
        "--pyargs", "pytest_k3accept.suites.platform", "-k", "prefill_near_target",
        "--k3-endpoint", long_server.base_url, "--k3-profile", "profile.toml",
        "--k3-record", "record.json", "--k3-timeout", "900", "-p", "no:cacheprovider", "-rs",
        "-o", "asyncio_default_fixture_loop_scope=function")
    delta = scraper.scrape() - before
    scraper.close()
    result.assert_outcomes(passed=1)
    rec = json.loads((pytester.path / "record.json").read_text())
    [resp] = [e["data"] for e in rec["evidence"] if e["kind"] == "response"]
    assert resp["ok"] and resp["prompt_tokens"] >= 0.9 * context, resp
    server_sum, count = delta.histogram("vllm:time_to_first_token_seconds")
    assert count == 1, f"{count} first tokens during the run; the prefill is the only request"
    added = resp["ttft"] - server_sum
    print(f"\nTTFT at {resp['prompt_tokens']} prompt tokens: client {resp['ttft'] * 1e3:.1f} ms, "
          f"vLLM's histogram {server_sum * 1e3:.1f} ms, client-added {added * 1e3:+.1f} ms")
    # the client's clock starts before the server's and stops after it: it can only add
    assert added >= -0.005, (resp["ttft"], server_sum)
    # what the client adds is transport and rendering, not a second prefill
    assert added < 0.5 * server_sum, (resp["ttft"], server_sum)


def test_a_1m_token_prompt_over_the_context_is_a_named_rejection_once(long_server: Any) -> None:
    from pytest_k3accept.observe.endpoint.client import K3Client

    prompt = [100 + (i * 7919) % 1500 for i in range(1 << 20)]
    posts = long_server.log_text().count("POST /v1/completions")

    async def go() -> Any:
        async with K3Client(long_server.base_url, "k3-testbed", timeout=120) as client:
            return await client.completion(prompt, max_tokens=4)

    res = asyncio.run(go())
    assert res.status == 400 and res.error_kind == "http-4xx", (res.status, res.error)
    assert "maximum context length" in (res.error or "") and str(MAX_MODEL_LEN) in res.error
    deadline = time.monotonic() + 10
    while long_server.log_text().count("POST /v1/completions") == posts and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert long_server.log_text().count("POST /v1/completions") == posts + 1
