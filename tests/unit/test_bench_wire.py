"""benchmarks/wire.py: the relay's reading of an exchange (where the first text and the end of a
response are, across reads) and one real relay in front of the benchmark's stub server."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import wire  # noqa: E402

CHUNKED = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
           b"transfer-encoding: chunked\r\n\r\n")


def _event(payload: bytes) -> bytes:
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n" % len(data) + data + b"\r\n"


def test_the_first_text_and_the_chunked_end_are_found_across_reads() -> None:
    done: list[wire.Exchange] = []
    conn = wire._Conn(done, threading.Lock())
    conn.request_bytes(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n{", 1.0)
    conn.request_bytes(b'"model": "m"}', 1.5)  # the rest of the body: the same exchange
    role = _event(b'{"choices":[{"delta":{"role":"assistant","content":""}}]}')
    text = _event(b'{"choices":[{"delta":{"content":"Hi"}}]}')
    conn.response_bytes(CHUNKED + role, 2.0)
    assert conn.cur is not None and conn.cur.first_text_at is None  # the empty role event
    conn.response_bytes(text[:20], 3.0)  # '"content":"H' straddles two reads
    conn.response_bytes(text[20:], 3.5)
    conn.response_bytes(_event(b"[DONE]"), 4.0)
    assert not done
    conn.response_bytes(b"0\r\n\r\n", 5.0)
    (ex,) = done
    assert ex.head == b"POST /v1/chat/completions HTTP/1.1"
    assert (ex.request_at, ex.first_text_at, ex.end_at) == (1.0, 3.5, 5.0)
    assert (ex.ttft, ex.e2e) == (2.5, 4.0) and conn.cur is None


def test_a_sized_answer_ends_at_its_length_and_the_next_request_is_new() -> None:
    done: list[wire.Exchange] = []
    conn = wire._Conn(done, threading.Lock())
    conn.request_bytes(b"GET /v1/models HTTP/1.1\r\n\r\n", 1.0)
    conn.response_bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", 2.0)
    assert not done
    conn.response_bytes(b"67890", 3.0)
    assert done[0].end_at == 3.0 and done[0].first_text_at is None
    conn.request_bytes(b"POST /v1/completions HTTP/1.1\r\n\r\n", 4.0)
    assert conn.cur is not None and conn.cur.request_at == 4.0


def test_a_real_relay_times_a_streamed_request_to_the_stub() -> None:
    import accuracy
    from stub_server import spawn

    with spawn(chunks=8) as srv, wire.WireTap(srv.url) as tap:
        body = accuracy._raw_body("m", [{"role": "user", "content": "hello"}], 8)

        async def go() -> tuple[float, float, float]:
            async with accuracy._raw_session() as session:
                return await accuracy._raw_one(session, f"{tap.base_url}/v1/chat/completions",
                                               body)
        ttft, e2e, _ = asyncio.run(go())
        (ex,) = tap.take(1)
        assert ex.head.startswith(b"POST /v1/chat/completions")
        assert ex.ttft is not None and ex.e2e is not None
        # the relay sees the request after the client sent it and the answer before the
        # client read it: inside the client's own interval
        assert 0 < ex.ttft <= ttft and ex.ttft <= ex.e2e <= e2e
        assert tap.take(0) == []  # taken once
