"""Real faults of a real vLLM 0.32 server: a key it demands, statistics it does not keep, a
model name it does not serve, and the server killed in the middle of a run.

One server for the whole module, ``guarded`` (``--api-key`` and ``--disable-log-stats``);
the LAST test kills it with SIGKILL (keep it last), and it is stopped at module end anyway.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from pytest_k3accept.observe.endpoint.client import K3Client, RequestResult
from pytest_k3accept.observe.endpoint.discover import EndpointError, discover
from pytest_k3accept.observe.load.stats import error_counts
from pytest_k3accept.observe.metrics import ENGINE_SERIES, MetricsScraper, MetricsUnavailable

pytestmark = [pytest.mark.live]

KEY = "sekrit-test-key"
USER = [{"role": "user", "content": "Tell me about the weather."}]
LONG = 8000  # output tokens of the kill test's streams (the guarded server's context: 8,192)
STREAMS = 8  # sharing 2 cores, each stream needs over a minute: a client frozen for 5-26 s
#            # (seen on the CI VM kind while vLLM kept generating) still kills them mid-answer


@pytest.fixture(scope="module")
def guarded(module_testbed_factory: Any) -> Any:
    """A real vLLM server that demands an API key and keeps no engine statistics."""
    # a long context: the kill test's streams must still be far from their end on a fast
    # machine (1,900 tokens were once all delivered before the kill came)
    return module_testbed_factory(args=("--api-key", KEY, "--disable-log-stats"),
                                  max_model_len=8192)


def test_discovery_without_with_wrong_and_with_the_key(guarded: Any) -> None:
    with pytest.raises(EndpointError) as missing:
        discover(guarded.base_url)
    assert missing.value.kind == "auth"
    assert "HTTP 401: the API key is missing" in str(missing.value)
    assert "K3ACCEPT_API_KEY" in str(missing.value)
    with pytest.raises(EndpointError) as wrong:
        discover(guarded.base_url, api_key="not-the-key")
    assert "was rejected" in str(wrong.value) and "not-the-key" not in str(wrong.value)
    ep = discover(guarded.base_url, api_key=KEY)
    assert ep.model == "k3-testbed" and ep.version == "0.32.0"  # /version needs no key


def test_requests_without_the_key_fail_with_advice(guarded: Any) -> None:
    async def both() -> tuple[RequestResult, RequestResult]:
        async with K3Client(guarded.base_url, "k3-testbed", timeout=30) as anon, \
                K3Client(guarded.base_url, "k3-testbed", api_key=KEY, timeout=30) as keyed:
            return (await anon.chat(USER, stream=True, max_tokens=4),
                    await keyed.chat(USER, stream=True, max_tokens=4))

    anon, keyed = asyncio.run(both())
    assert anon.status == 401 and anon.error_kind == "http-4xx"
    assert anon.error == ("Unauthorized [the API key is missing or was rejected: put it in the "
                          "environment variable named by --k3-api-key-env]")
    assert keyed.ok and keyed.completion_tokens == 4


def test_disabled_log_stats_means_metrics_not_available(guarded: Any) -> None:
    import httpx

    page = httpx.get(f"{guarded.base_url}/metrics", timeout=10).text
    assert "vllm:" in page  # vLLM 0.32 still exposes tool-parser counters ...
    assert not any(name in page for name in ENGINE_SERIES)  # ... but no engine statistics
    with pytest.raises(MetricsUnavailable, match="not available from this server"):
        MetricsScraper(guarded.base_url).scrape()


SUITE = '''
import pytest

@pytest.mark.asyncio
async def test_chat(k3_client):
    res = await k3_client.chat([{"role": "user", "content": "hi"}], max_tokens=4)
    assert res.ok, res.error

def test_metrics(k3_metrics):
    raise AssertionError("must be skipped: the server keeps no engine statistics")
'''


def test_plugin_with_key_runs_what_the_server_allows(guarded: Any, pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_API_KEY", KEY)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--k3-endpoint", guarded.base_url, "-rs", "-p",
                                "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*k3_metrics: *no vLLM engine statistics*not available from "
                                 "this server (started with --disable-log-stats*"])
    assert KEY not in result.stdout.str() + result.stderr.str()


def test_plugin_without_key_says_which_variable(guarded: Any, pytester: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("K3ACCEPT_API_KEY", raising=False)
    monkeypatch.setenv("OTHER_KEY_VAR", "wrong-key")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--k3-endpoint", guarded.base_url, "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*HTTP 401: the API key is missing. Put the key in the "
                                 "environment variable K3ACCEPT_API_KEY*"])
    strict = pytester.runpytest("--k3-endpoint", guarded.base_url, "--k3-api-key-env",
                                "OTHER_KEY_VAR", "--k3-require")
    strict.assert_outcomes(errors=2)
    strict.stdout.fnmatch_lines(["*the API key was rejected*OTHER_KEY_VAR*--k3-require makes "
                                 "this an error*"])
    assert "Traceback" not in strict.stdout.str() and "wrong-key" not in strict.stdout.str()


def test_plugin_with_a_wrong_model_name(guarded: Any, pytester: pytest.Pytester,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_API_KEY", KEY)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--k3-endpoint", guarded.base_url, "--k3-model", "kimi-k3",
                                "-rs")
    result.assert_outcomes(skipped=2)
    assert (f"model 'kimi-k3' is not served at {guarded.base_url}; it serves ['k3-testbed']. "
            "Fix --k3-model") in result.stdout.str()


def test_server_killed_in_the_middle_of_a_run(guarded: Any) -> None:
    """LAST in the module. SIGKILL to the whole server while 8 streams generate: every
    request ends as a ``connection`` error (not a timeout, not a hang), partial output is
    kept, and the URL is then reported unreachable."""
    ep = discover(guarded.base_url, api_key=KEY)

    async def run() -> tuple[list[RequestResult], float]:
        async with ep.client(timeout=30) as client:
            tasks = [asyncio.create_task(client.chat(USER, stream=True, max_tokens=LONG,
                                                     ignore_eos=True)) for _ in range(STREAMS)]
            # one more stream, read here: once it has delivered tokens, so have the others
            # (same start, same batch), and each is far from its last token
            body = {"model": "k3-testbed", "messages": USER, "max_tokens": LONG,
                    "ignore_eos": True, "stream": True}
            async with client.http.stream("POST", "/v1/chat/completions", json=body) as resp:
                seen = 0
                async for line in resp.aiter_lines():
                    seen += line.startswith("data:")
                    if seen >= 5:
                        break
                # the others may be admitted a step after that one: give them a moment to
                # stream too (LONG tokens each are still seconds away)
                await asyncio.sleep(0.5)
                assert not any(t.done() for t in tasks), "requests ended before the kill"
                os.killpg(guarded.process.pid, signal.SIGKILL)
                t_kill = time.monotonic()
                assert guarded.process.wait(10) == -signal.SIGKILL, "the server outlived SIGKILL"
                results = await asyncio.gather(*tasks)
            return results, time.monotonic() - t_kill

    try:
        results, after_kill = asyncio.run(run())
    finally:
        guarded.process.stop()
    # a hang would last the 30 s silence bound and count as "timeout" (asserted below); this
    # bound only catches a client that never returns, with room for a frozen client (5-26 s)
    assert after_kill < 60, "requests hung after the kill"
    counts = error_counts(results)
    assert counts["connection"] == STREAMS and counts["timeout"] == 0, [
        (r.error, r.chunks, r.e2e) for r in results]
    cut = [r for r in results if r.status == 200]
    assert cut and all("was lost after HTTP 200" in (r.error or "") for r in cut)
    assert sum(r.chunks for r in results) > 4 and any(r.text for r in results)  # kept
    assert all(r.ttft is None and r.itl == [] for r in results)  # no latency from failures
    with pytest.raises(EndpointError) as err:
        discover(guarded.base_url, timeout=5)
    assert err.value.kind == "unreachable" and "connection refused" in str(err.value)
