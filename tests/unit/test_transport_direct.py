"""observe/endpoint/transport.py: the hot path's direct POST (no httpx Request / Response).

The direct path must put the same request on the wire as ``client.send`` (the fallback for
clients with auth, event hooks or proxy mounts), follow the client's headers when they change,
and read a body a proxy compressed anyway as httpx would. A raw asyncio server stands in for
the model server (a unit test of the transport, not of vLLM).
"""

from __future__ import annotations

import asyncio
import gzip
from typing import Any, Awaitable, Callable

from openai_answers import ANSWER, EVENTS
from pytest_k3accept.observe.endpoint.client import K3Client
from pytest_k3accept.observe.endpoint.transport import DirectResponse, PostStream

async def _serve(answer: Callable[[bytes], bytes], run: Callable[[str], Awaitable[Any]],
                 ) -> tuple[list[bytes], Any]:
    """Run ``run(base_url)`` against a server that answers each request's bytes with
    ``answer(request)``; (the requests as received, what ``run`` returned)."""
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            request = head + await reader.readexactly(length)
            got.append(request)
            writer.write(answer(request))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return got, await run(f"http://127.0.0.1:{port}")
    finally:
        server.close()
        await server.wait_closed()


def _ok(request: bytes) -> bytes:
    if b'"stream":true' in request:
        return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(EVENTS), EVENTS))
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER))


def _headers(request: bytes) -> dict[str, str]:
    lines = request.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")[1:]
    out = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines)}
    out.pop("host")  # each server listens on its own port
    return out


def test_the_direct_post_sends_what_client_send_would() -> None:
    async def both(base: str) -> list[Any]:
        async with K3Client(base, "m", api_key=None, timeout=10) as direct, \
                K3Client(base, "m", timeout=10) as sent:
            async def hook(request: Any) -> None:
                return None
            sent.http.event_hooks["request"] = [hook]  # a hook: the client.send path
            out = []
            for client in (direct, sent):
                for stream in (False, True):
                    out.append(await client.chat([{"role": "user", "content": "hi"}],
                                                 stream=stream, max_tokens=1))
            return out

    got, results = asyncio.run(_serve(_ok, both))
    assert all(r.ok for r in results), [r.error for r in results]
    assert len(got) == 4
    for direct, sent in ((got[0], got[2]), (got[1], got[3])):
        assert direct.split(b"\r\n")[0] == sent.split(b"\r\n")[0] == (
            b"POST /v1/chat/completions HTTP/1.1")
        assert _headers(direct) == _headers(sent)
        assert _headers(direct)["accept-encoding"] == "identity"
        assert direct.split(b"\r\n\r\n", 1)[1] == sent.split(b"\r\n\r\n", 1)[1]


def test_the_direct_post_follows_the_clients_headers_when_they_change() -> None:
    async def run(base: str) -> list[Any]:
        async with K3Client(base, "m", timeout=10) as client:
            first = await client.chat([{"role": "user", "content": "hi"}], max_tokens=1)
            client.http.headers["x-team"] = "blue"
            second = await client.chat([{"role": "user", "content": "hi"}], max_tokens=1)
            client.http.headers["x-team"] = "red"
            third = await client.chat([{"role": "user", "content": "hi"}], max_tokens=1)
            return [first, second, third]

    got, results = asyncio.run(_serve(_ok, run))
    assert all(r.ok for r in results)
    assert [_headers(r).get("x-team") for r in got] == [None, "blue", "red"]


def test_a_body_a_proxy_compressed_anyway_is_decoded() -> None:
    packed = gzip.compress(ANSWER)

    def gzipped(request: bytes) -> bytes:
        return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-encoding: gzip\r\ncontent-length: %d\r\n\r\n%s"
                % (len(packed), packed))

    async def run(base: str) -> Any:
        async with K3Client(base, "m", timeout=10) as client:
            return await client.chat([{"role": "user", "content": "hi"}], max_tokens=1)

    _, res = asyncio.run(_serve(gzipped, run))
    assert res.ok, res.error
    assert res.text == "ok" and res.completion_tokens == 1


def test_the_hot_path_answer_is_a_direct_response_and_is_released() -> None:
    async def run(base: str) -> tuple[str, int, bytes]:
        async with K3Client(base, "m", timeout=10) as client:
            async with PostStream(client.http, "/v1/chat/completions",
                                  {"model": "m", "messages": []}) as resp:
                assert isinstance(resp, DirectResponse)
                body = b"".join([c async for c in resp.aiter_bytes()])
                return resp.headers.get("Content-Type", ""), resp.status_code, body

    _, (ctype, status, body) = asyncio.run(_serve(_ok, run))
    assert (ctype, status, body) == ("application/json", 200, ANSWER)
