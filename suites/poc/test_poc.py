"""POC acceptance (single researcher): short context, concurrency 1, one feature at a time.

At best this suite establishes "functional verification possible", never production
capacity.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.asyncio

SHORT = [{"role": "user", "content": "Reply with a short greeting."}]


async def test_api_round_trip(k3_client) -> None:
    """One plain (non-streamed) chat completion on a short context."""
    res = await k3_client.chat(SHORT, max_tokens=16)
    assert res.ok, f"HTTP {res.status}: {res.error}"
    assert res.prompt_tokens and res.completion_tokens, "server reported no usage"


async def test_streamed_response(k3_client) -> None:
    """One streamed response: first token and usage arrive separately from the request."""
    res = await k3_client.chat(SHORT, stream=True, max_tokens=16)
    assert res.ok, f"HTTP {res.status}: {res.error}"
    assert res.ttft is not None, "no output token arrived in the stream"
    assert res.completion_tokens, "stream carried no usage (stream_options.include_usage)"
