"""Other clients of the real vLLM testbed: a run that shares the server is marked shared.

While the runner measures a load, a second client (its own HTTP connection, as another team's
agents would be) sends requests to the same server. The server's own counters over the run
(``vllm:request_success_total``, ``vllm:prompt_tokens_total``,
``vllm:generation_tokens_total``) then exceed what the runner sent, and the run says how many
other requests the server served. The same load alone is not marked
(``tests/live/test_load_live.py`` shows its counts equal the server's exactly).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pytest_k3accept.observe.endpoint.discover import discover
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.runner import run_load

pytestmark = [pytest.mark.live, pytest.mark.asyncio]

OTHER = 4  # requests the second client sends during the run


def _requests(n: int) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"Count slowly from {i} to one hundred."}]}
            for i in range(n)]


async def test_a_second_client_during_the_run_marks_it_shared(testbed: Any) -> None:
    ep = discover(testbed.base_url)
    profile = LoadProfile(name="mine", requests=8, concurrency=2, output_tokens=96,
                          max_seconds=240)
    alone = await run_load(ep, _requests(4), profile.replace("test", requests=4))
    assert alone.server is not None, alone.server_error
    assert alone.shared is False, alone.other_clients
    assert alone.other_clients["other_requests"] == 0

    started = asyncio.Event()
    other_done: list[float] = []

    async def second_client() -> None:
        await started.wait()  # the runner's baseline is taken: the run is measuring
        async with ep.client() as client:
            for i in range(OTHER):
                got = await client.chat([{"role": "user", "content": f"hi {i}"}],
                                        max_tokens=4)
                assert got.ok, got.error
        other_done.append(time.time())

    other = asyncio.create_task(second_client())
    result = await run_load(ep, _requests(8), profile, progress=lambda _: started.set(),
                            progress_interval=0.2)
    await other
    ended = result.started_at + result.elapsed
    s = result.summary
    assert s["ok"] == s["requests"] == 8, s["errors_by_kind"]
    assert result.shared is True, result.other_clients
    found = result.other_clients["other_requests"]
    # all of them when the second client finished while the run was measured (the usual
    # case: 4 requests of 4 tokens beside 8 of 96); at least one otherwise
    assert found == OTHER if other_done[0] < ended else 1 <= found <= OTHER, (found, other_done,
                                                                            ended)
    assert result.other_clients["extra_prompt_tokens"] > 0
    assert f"SHARED: the server served {found} other request" in result.line()
    run = result.evidence("run-x", "test")
    assert run.shared is True and run.other_requests == found
