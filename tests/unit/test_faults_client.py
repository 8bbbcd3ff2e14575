"""Client faults against a NOT-vLLM stub: stalls, deadlines, drops, hostile bodies, odd JSON.

What vLLM itself does (401, killed server, ...) is in ``tests/live/test_faults_live.py``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fault_stub import StubServer, chunk, reply
from pytest_k3accept.observe.endpoint import untrusted
from pytest_k3accept.observe.endpoint.client import K3Client, RequestResult
from pytest_k3accept.observe.endpoint.faults import classify_exception
from pytest_k3accept.observe.server.launch import free_port

USER = [{"role": "user", "content": "x"}]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def chat(url: str, *, stream: bool, timeout: float = 1.0,
               deadline: float | None = None, **kw: Any) -> RequestResult:
    async with K3Client(url, "m", timeout=timeout, deadline=deadline, **kw) as client:
        return await client.chat(USER, stream=stream)


def stall_after_one(req: Any) -> None:
    req.body()
    req.start_stream()
    req.event(chunk("partial"))
    req.server.stub.stall(30)


def trickle(req: Any) -> None:
    """Sends an SSE comment every 0.2 s forever: never silent, never done."""
    req.body()
    req.start_stream()
    req.event(chunk("t"))
    while not req.server.stub.release.wait(0.2):
        req.wfile.write(b": keep-alive\n\n")
        req.wfile.flush()


def drop_chunked(req: Any) -> None:
    """Chunked SSE that stops in the middle, the way a killed server's stream ends."""
    req.body()
    req.send_response(200)
    req.send_header("Content-Type", "text/event-stream")
    req.send_header("Transfer-Encoding", "chunked")
    req.end_headers()
    data = b"data: " + json.dumps(chunk("half")).encode() + b"\n\n"
    req.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    req.wfile.flush()
    req.connection.shutdown(socket.SHUT_RDWR)


@pytest.mark.parametrize("stream", [True, False])
def test_stalled_answer_times_out_between_reads_and_keeps_partial_output(stream: bool) -> None:
    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", stall_after_one)
        t0 = time.monotonic()
        res = run(chat(stub.base_url, stream=stream, timeout=1.0))
    assert time.monotonic() - t0 < 5
    assert not res.ok and res.error_kind == "timeout"
    assert "sent nothing for 1 s" in (res.error or "")
    assert "raise --k3-timeout" in (res.error or "")
    assert res.ttft is None and res.itl == []
    if stream:
        assert res.chunks == 1 and res.text == "partial"
        assert "partial output kept" in (res.error or "")


def test_a_never_ending_stream_is_cut_at_the_deadline() -> None:
    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", trickle)
        t0 = time.monotonic()
        res = run(chat(stub.base_url, stream=True, timeout=1.0, deadline=2.0))
    took = time.monotonic() - t0
    assert 1.9 < took < 5
    assert res.error_kind == "timeout" and res.text == "t"
    assert "per-request deadline of 2 s" in (res.error or "")
    assert res.e2e is not None and res.e2e >= 1.9


def test_default_deadline_is_bounded() -> None:
    assert K3Client("http://127.0.0.1:9", "m", timeout=60).deadline == 600
    assert K3Client("http://127.0.0.1:9", "m", timeout=120).deadline == 1200


@pytest.mark.parametrize("stream", [True, False])
def test_dropped_connection_is_connection_not_timeout(stream: bool) -> None:
    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", drop_chunked)
        res = run(chat(stub.base_url, stream=stream, timeout=5.0))
    assert res.error_kind == "connection"
    assert "was lost after HTTP 200" in (res.error or "")
    assert "did the server process stop or crash" in (res.error or "")
    if stream:
        assert res.text == "half" and res.chunks == 1


def test_refused_connection_is_connection_with_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    res = run(chat(url, stream=True))
    assert res.error_kind == "connection" and res.status is None
    assert f"cannot connect to {url}/v1/chat/completions" in (res.error or "")


def test_classification_rules() -> None:
    """httpx_aiohttp maps every aiohttp connection error to ConnectTimeout: the cause decides."""
    def mapped(cause: BaseException, to: type[Exception]) -> Exception:
        try:
            raise to("mapped") from cause
        except Exception as exc:
            return exc
    import aiohttp

    assert classify_exception(mapped(aiohttp.ServerDisconnectedError(),
                                     httpx.ConnectTimeout)) == "connection"
    assert classify_exception(mapped(ConnectionRefusedError(111, "refused"),
                                     httpx.ConnectTimeout)) == "connection"
    assert classify_exception(mapped(aiohttp.SocketTimeoutError("t"),
                                     httpx.ConnectTimeout)) == "timeout"
    assert classify_exception(httpx.ReadTimeout("t")) == "timeout"
    assert classify_exception(ValueError("bad http")) == "protocol"


def test_html_huge_and_invalid_utf8_error_bodies_are_kept_safely() -> None:
    huge = b"<html><script>alert(1)</script>" + b"A" * (1 << 20)

    def hostile(req: Any) -> None:
        req.body()
        path = req.headers.get("X-Case")
        body = {"html": huge, "utf8": b"\xff\xfe bad \x1b[2J bytes",
                "json": json.dumps({"error": {"message": "\x1b[31mred\x1b[0m <b>x</b>"}})
                .encode()}[path]
        req.send(500, body, "text/html")

    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", hostile)

        async def case(name: str) -> RequestResult:
            async with K3Client(stub.base_url, "m", timeout=5) as client:
                client.http.headers["X-Case"] = name
                return await client.chat(USER)

        big, bad, esc = run(case("html")), run(case("utf8")), run(case("json"))
    assert big.error_kind == "http-5xx" and isinstance(big.error_body, str)
    assert len(big.error_body) < untrusted.MAX_ERROR_BODY + 200
    assert "truncated: the body has more than 64 KiB" in big.error_body
    assert len(big.error or "") <= untrusted.MAX_MESSAGE + 40
    assert "\ufffd" in (bad.error or "") and "\x1b" not in (bad.error or "")
    assert esc.error == "\\x1b[31mred\\x1b[0m <b>x</b>"  # kept as text, control chars shown


def test_absurd_usage_numbers_and_odd_shapes_do_not_crash() -> None:
    def odd(req: Any) -> None:
        req.body()
        req.send(200, json.dumps({"choices": "nope", "usage": {
            "prompt_tokens": -5, "completion_tokens": 1e300,
            "prompt_tokens_details": {"cached_tokens": "many"}}}).encode())

    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", odd)
        res = run(chat(stub.base_url, stream=False))
    assert res.ok and res.text == ""
    assert res.prompt_tokens is None and res.completion_tokens is None
    assert res.cached_tokens is None


def test_200_that_is_not_json_is_a_protocol_error() -> None:
    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions",
                   reply(200, b"<html>welcome</html>", "text/html"))
        plain = run(chat(stub.base_url, stream=False))
        streamed = run(chat(stub.base_url, stream=True))
    assert plain.error_kind == "protocol" and "not a JSON object" in (plain.error or "")
    assert streamed.error_kind == "protocol"
    assert "not an event stream (Content-Type: text/html)" in (streamed.error or "")


def test_an_endless_stream_line_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(untrusted, "MAX_EVENT_LINE", 4096)

    def long_line(req: Any) -> None:
        req.body()
        req.start_stream()
        req.wfile.write(b"data: " + b"x" * 20000)
        req.wfile.flush()

    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", long_line)
        res = run(chat(stub.base_url, stream=True))
    assert res.error_kind == "protocol" and "stream line is longer" in (res.error or "")


def test_401_says_what_to_do() -> None:
    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", reply(401, b'{"error":"Unauthorized"}'))
        res = run(chat(stub.base_url, stream=True))
    assert res.status == 401 and res.error_kind == "http-4xx"
    assert res.error is not None and res.error.startswith("Unauthorized [the API key is missing")


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                       lambda k: st.lists(k, max_size=3) | st.dictionaries(st.text(max_size=5),
                                                                           k, max_size=4),
                       max_leaves=12)
EVENT = st.fixed_dictionaries({}, optional={"choices": JSONISH | st.lists(
    st.fixed_dictionaries({}, optional={"delta": JSONISH, "text": JSONISH,
                                        "finish_reason": JSONISH}), max_size=2),
    "usage": JSONISH | st.fixed_dictionaries({}, optional={
        "prompt_tokens": JSONISH, "completion_tokens": JSONISH,
        "prompt_tokens_details": JSONISH})})


@settings(max_examples=300, deadline=None)
@given(EVENT, EVENT)
def test_any_event_or_body_shape_is_absorbed_without_error(delta: dict[str, Any],
                                                           full: dict[str, Any]) -> None:
    res = RequestResult(ok=False, stream=True)
    untrusted.absorb_delta(res, delta)
    untrusted.absorb_full(res, full)
    assert isinstance(res.text, str)
    assert all(isinstance(c, dict) for c in res.tool_calls)
    for n in (res.prompt_tokens, res.completion_tokens, res.cached_tokens):
        assert n is None or (isinstance(n, int) and 0 <= n <= untrusted.MAX_TOKENS_PLAUSIBLE)


def test_stream_closed_without_done_is_a_protocol_error() -> None:
    def no_done(req: Any) -> None:
        req.body()
        req.start_stream()  # Connection: close, no length: EOF ends the body cleanly
        req.event(chunk("a"))
        req.event(chunk("b"))

    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", no_done)
        res = run(chat(stub.base_url, stream=True))
    assert res.error_kind == "protocol" and res.text == "ab"
    assert res.error == "the stream ended without [DONE] (the server closed it after 2 chunks)"


def test_oversized_body_is_not_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(untrusted, "MAX_BODY", 10_000)
    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", reply(200, b'{"x": "' + b"y" * 50_000
                                                         + b'"}'))
        res = run(chat(stub.base_url, stream=False))
    assert res.error_kind == "protocol" and "larger than 0 MiB" in (res.error or "")


def _absorb_delta_spec(res: Any, event: dict[str, Any]) -> bool:
    """What absorb_delta did before its hot path was inlined (the specification it keeps)."""
    untrusted._usage(res, event.get("usage"))
    choice = untrusted._first(event.get("choices"))
    if not choice:
        return False
    reason = choice.get("finish_reason")
    res.finish_reason = reason if isinstance(reason, str) else res.finish_reason
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        piece = untrusted._text(choice.get("text"))
        res.text += piece
        return bool(piece)
    piece = untrusted._text(delta.get("content"))
    res.text += piece
    calls = delta.get("tool_calls")
    calls = [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    res.tool_calls.extend(calls)
    return bool(piece or calls or delta.get("reasoning_content") or delta.get("reasoning"))


DELTA_EVENT = st.fixed_dictionaries({}, optional={
    "choices": JSONISH | st.lists(st.fixed_dictionaries({}, optional={
        "delta": JSONISH | st.fixed_dictionaries({}, optional={
            "content": JSONISH, "tool_calls": JSONISH | st.lists(JSONISH, max_size=3),
            "reasoning_content": JSONISH, "reasoning": JSONISH}),
        "text": JSONISH, "finish_reason": JSONISH}), max_size=2),
    "usage": JSONISH})


@settings(max_examples=500, deadline=None)
@given(st.lists(DELTA_EVENT, min_size=1, max_size=4))
def test_the_inlined_delta_reader_agrees_with_its_specification(
        events: list[dict[str, Any]]) -> None:
    fast, spec = RequestResult(ok=False, stream=True), RequestResult(ok=False, stream=True)
    for event in events:
        assert untrusted.absorb_delta(fast, event) == _absorb_delta_spec(spec, event), event
    assert fast.as_dict() == spec.as_dict()


@pytest.mark.parametrize("event", [
    {"choices": [{"delta": {"content": "a"}, "finish_reason": None}], "usage": None},
    {"choices": [{"delta": {"reasoning": "think"}}]},
    {"choices": [{"delta": {"reasoning_content": "think"}}]},
    {"choices": [{"delta": {"tool_calls": [{"id": "1"}, 3]}}]},
    {"choices": [{"delta": {"tool_calls": [5]}}]},
    {"choices": [{"delta": {}, "finish_reason": "stop"}]},
    {"choices": [{"text": "b", "finish_reason": "length"}]},
    {"choices": [{"text": ""}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                              "prompt_tokens_details": {"cached_tokens": 1}}},
    {"choices": [7]},
    {"choices": "x"},
], ids=["content", "reasoning", "reasoning_content", "tool_calls", "no-dict-call", "finish",
        "text", "empty-text", "usage", "not-a-dict", "not-a-list"])
def test_each_delta_shape_is_read_as_its_specification_reads_it(event: dict[str, Any]) -> None:
    fast, spec = RequestResult(ok=False, stream=True), RequestResult(ok=False, stream=True)
    assert untrusted.absorb_delta(fast, event) == _absorb_delta_spec(spec, event)
    assert fast.as_dict() == spec.as_dict()
