"""observe/endpoint/transport.py: a long request body is written after its headers from its
own bytes object (no copy joining headers and body); the bytes on the wire are the same as
when aiohttp joins them, and a short body still goes out with its headers in one write."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from aiohttp import http_writer

from openai_answers import ANSWER, EVENTS
from pytest_k3accept.observe.endpoint import bodies, transport
from pytest_k3accept.observe.endpoint.client import K3Client

LONG = "lorem ipsum dolor sit amet " * (transport.SEPARATE_BODY // 20)
SHORT = "short prompt"


async def _capture(prompt: str, *, stream: bool) -> tuple[bytes, Any]:
    """One chat request through K3Client to a raw asyncio server: (the request's bytes as
    received, the result)."""
    got = bytearray()
    answer, events = ANSWER, EVENTS

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        got.extend(head + await reader.readexactly(length))
        if stream:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(events), events))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(answer), answer))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with K3Client(f"http://127.0.0.1:{port}", "m", timeout=10) as client:
            res = await client.chat([{"role": "user", "content": prompt}], stream=stream,
                                    max_tokens=1)
    finally:
        server.close()
        await server.wait_closed()
    return bytes(got), res


class _Writes:
    """What aiohttp's stream writer hands the socket transport: ("one", chunk) per single
    write, ("joined", parts) per headers-and-body write."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, Any]] = []
        one, joined = http_writer.StreamWriter._write, http_writer.StreamWriter._writelines

        def _write(writer: Any, chunk: Any) -> None:
            self.calls.append(("one", chunk))
            one(writer, chunk)

        def _writelines(writer: Any, chunks: Any) -> None:
            chunks = list(chunks)
            self.calls.append(("joined", chunks))
            joined(writer, chunks)

        monkeypatch.setattr(http_writer.StreamWriter, "_write", _write)
        monkeypatch.setattr(http_writer.StreamWriter, "_writelines", _writelines)


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_body_is_written_alone_from_its_own_bytes(
        monkeypatch: pytest.MonkeyPatch, stream: bool) -> None:
    writes = _Writes(monkeypatch)
    wire, res = asyncio.run(_capture(LONG, stream=stream))
    assert res.ok, res.error
    assert res.prompt_tokens == 3 and res.completion_tokens == 1
    body = {"model": "m", "messages": [{"role": "user", "content": LONG}], "max_tokens": 1}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    sent = bodies.encode_body(body)  # the cached bytes object the request sent
    assert len(sent) >= transport.SEPARATE_BODY
    assert wire.endswith(b"\r\n\r\n" + sent)
    assert [kind for kind, _ in writes.calls] == ["one", "one"]  # headers, then the body
    assert writes.calls[0][1].endswith(b"\r\n\r\n") and writes.calls[1][1] is sent


def test_a_short_body_goes_out_with_its_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    writes = _Writes(monkeypatch)
    wire, res = asyncio.run(_capture(SHORT, stream=True))
    assert res.ok, res.error
    assert [kind for kind, _ in writes.calls] == ["joined"]
    head, body = writes.calls[0][1]
    assert wire == bytes(head) + bytes(body)


@pytest.mark.parametrize("stream", [False, True])
def test_the_wire_bytes_are_those_of_the_joined_write(
        monkeypatch: pytest.MonkeyPatch, stream: bool) -> None:
    separate, res = asyncio.run(_capture(LONG, stream=stream))
    monkeypatch.setattr(transport, "SEPARATE_BODY", 1 << 62)  # every body joined
    joined, res2 = asyncio.run(_capture(LONG, stream=stream))
    assert res.ok and res2.ok

    def portless(wire: bytes) -> bytes:  # each server listens on its own port
        return re.sub(rb"(?im)^host: .*$", b"host: -", wire)
    assert portless(separate) == portless(joined)
    assert b"\r\ncontent-length: %d\r\n" % (len(separate) - separate.index(b"\r\n\r\n") - 4) \
        in separate.lower()


def test_a_writer_without_buffered_headers_gets_the_body_as_is() -> None:
    """An aiohttp before 3.12 writes headers at once and has no ``send_headers``: the body is
    then written as a plain ``BytesPayload`` would write it."""
    class OldWriter:
        def __init__(self) -> None:
            self.chunks: list[Any] = []

        async def write(self, chunk: Any) -> None:
            self.chunks.append(chunk)

    data = b"x" * transport.SEPARATE_BODY
    writer = OldWriter()
    asyncio.run(transport.separate_body(data).write_with_length(writer, len(data)))
    asyncio.run(transport.separate_body(data).write(writer))
    assert writer.chunks == [data, data] and writer.chunks[0] is data
