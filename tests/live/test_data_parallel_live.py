"""A real data-parallel vLLM server (``--data-parallel-size 2``): KV headroom is the fullest
engine's, never the sum over engines.

Two engine cores, each with its own KV cache (``--kv-cache-memory-bytes 4000000``: 3,840
tokens each on the testbed model), behind one API server; every ``vllm:`` family then has
``engine="0"`` and ``engine="1"`` series. Four concurrent requests of ~600 prompt + 300
generated tokens (~1,024 KV tokens each, in 128-token blocks) spread over the engines: each
engine is about half full, so the old summed figure (> 100 %) read "NO headroom" on a server
that had plenty. The run's peak is the fullest engine's, the headroom line lists each engine,
counters add up over engines and equal what the runner sent.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from pytest_k3accept.checks import headroom
from pytest_k3accept.observe.endpoint.discover import discover
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.runner import run_load
from test_api_servers_live import serve

pytestmark = [pytest.mark.live]


@pytest.fixture(scope="module")
def dp2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The testbed model served by two data-parallel engines (its URL)."""
    from pytest_k3accept import testbed
    from pytest_k3accept.observe.server.launch import free_port

    reason = testbed.unavailable_reason()
    if reason:
        pytest.skip(reason)
    argv = testbed.server_command(testbed.build_model("tiny"), port=free_port(),
                                  kv_cache_bytes=4_000_000,
                                  extra_args=("--data-parallel-size", "2"))
    env = testbed.server_env()
    env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"  # two engines on a small machine
    yield from serve(tmp_path_factory, "dp2", argv, env)


@pytest.mark.asyncio
async def test_headroom_is_the_fullest_engines_not_the_sum(dp2: str) -> None:
    ep = discover(dp2)
    profile = LoadProfile(name="dp2", requests=4, concurrency=4, context_tokens=600,
                          output_tokens=300, max_seconds=300)
    result = await run_load(ep, None, profile, sample_interval=0.2)
    s, srv = result.summary, result.server
    assert srv is not None, result.server_error
    assert s["ok"] == s["requests"] == 4, s["errors_by_kind"]
    assert srv["engines"] == 2, srv["per_engine"]
    peaks = {e: v["peak_kv_usage"] for e, v in srv["per_engine"].items()}
    assert set(peaks) == {"0", "1"} and all(p is not None for p in peaks.values()), peaks
    # the run's peak is one engine's (a fraction of ITS cache), never the sum
    assert srv["peak_kv_usage"] == max(peaks.values()) <= 1.0
    assert sum(srv["per_engine"][e]["prompt_tokens"] for e in peaks) == srv["prompt_tokens"]
    assert srv["prompt_tokens"] == result.prompt_tokens and result.shared is False
    assert srv["generation_tokens"] == result.completion_tokens == 4 * 300
    verdict = headroom.decide(result, max_waiting=None, max_preemptions=10)
    print(f"\n[dp2] {result.line()}\n[dp2] {verdict.line()}")  # the figures, for the log
    assert verdict.engine_kv == peaks
    assert "(fullest engine; engine 0 " in verdict.line() and ", engine 1 " in verdict.line()
    if srv["preemptions"] == 0 and all(p > 0 for p in peaks.values()):
        # both engines served: the fullest one has headroom although the sum may not
        assert verdict.ok is True, verdict.line()
