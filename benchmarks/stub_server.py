"""Minimal streaming OpenAI-compatible HTTP/1.1 server on raw asyncio.

This is a *benchmark peer*, not a test double for vLLM: it answers in
microseconds so that a load generator pointed at it measures the client's own
overhead.  It speaks just enough HTTP/1.1 (keep-alive, Content-Length request
bodies, chunked responses for SSE) for httpx/aiohttp clients.

Endpoints
    POST /v1/chat/completions, /v1/completions
        ``stream: true``  -> ``text/event-stream`` (chunked): ``--chunks`` events
        ``data: {json}\\n\\n`` (one token each), then a usage-only chunk when
        ``stream_options.include_usage`` is true, then ``data: [DONE]\\n\\n``.
        otherwise         -> one JSON completion with ``usage``.
    GET /v1/models, /version, /health
    GET /stats: ``{"requests", "body_bytes", "prompt_tokens"}`` summed over the completion
        requests so far (what each tool really sent: the context axis reads it before and
        after a tool's run)

Run standalone::

    python benchmarks/stub_server.py --port 8123 --chunks 16 [--itl-ms 0] [--max-model-len N]

or from a benchmark, in a separate *process* (never in the client's loop)::

    with spawn(chunks=16) as srv:
        ... srv.url ...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any, Iterator

MODEL = "stub-model"
#: the stub stands in for vLLM's API server and answers as it does (``server: uvicorn``): a
#: ``Server`` name the plugin does not know is a proxy in front of the model server, and a
#: stream whose chunks all arrive at once through a proxy is judged buffered (TTFT withheld)
_OK_HDR = b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\n"


def _fixed(status: bytes, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\nserver: uvicorn\r\ncontent-type: " + ctype
        + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


#: the served context it reports (``--max-model-len``); it answers longer prompts all the same
MAX_MODEL_LEN = 131072


def _models(max_model_len: int) -> bytes:
    """The ``/v1/models`` answer, reporting ``max_model_len``."""
    return _fixed(b"200 OK", json.dumps({
        "object": "list",
        "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "k3stub",
                  "max_model_len": max_model_len}],
    }).encode())


_VERSION = _fixed(b"200 OK", b'{"version":"0.0.0-k3stub"}')
_HEALTH = _fixed(b"200 OK", b"", b"text/plain")
_NOT_FOUND = _fixed(b"404 Not Found", b'{"error":{"message":"not found","code":404}}')
_BAD = _fixed(b"400 Bad Request", b'{"error":{"message":"bad request","code":400}}')


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer frame."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _Templates:
    """Pre-rendered response pieces; per request only ids/usage are spliced in."""

    def __init__(self) -> None:
        self.sse_head = (_OK_HDR + b"content-type: text/event-stream; charset=utf-8\r\n"
                         b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")

    def chat_event(self, rid: str, i: int, n: int) -> bytes:
        delta = {"role": "assistant", "content": "tok"} if i == 0 else {"content": " tok"}
        ev = {"id": rid, "object": "chat.completion.chunk", "created": 0, "model": MODEL,
              "choices": [{"index": 0, "delta": delta, "logprobs": None,
                           "finish_reason": "stop" if i == n - 1 else None}]}
        return _chunk(b"data: " + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n")

    def completion_event(self, rid: str, i: int, n: int) -> bytes:
        ev = {"id": rid, "object": "text_completion", "created": 0, "model": MODEL,
              "choices": [{"index": 0, "text": " tok", "logprobs": None,
                           "finish_reason": "stop" if i == n - 1 else None}]}
        return _chunk(b"data: " + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n")


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _prompt_tokens(body: dict, chat: bool) -> int:
    if chat:
        text = "".join(str(m.get("content", "")) for m in body.get("messages") or ())
    else:
        p = body.get("prompt", "")
        text = p if isinstance(p, str) else json.dumps(p)
    return max(1, len(text) // 4)


class StubServer:
    def __init__(self, chunks: int = 16, itl_s: float = 0.0,
                 max_model_len: int = MAX_MODEL_LEN) -> None:
        self.t = _Templates()
        self.chunks = chunks
        self.itl_s = itl_s
        self._seq = 0
        self._models = _models(max_model_len)
        #: completion requests, their body bytes and prompt tokens (len / 4), for ``/stats``
        self.stats = {"requests": 0, "body_bytes": 0, "prompt_tokens": 0}
        # Per-request event bodies depend only on the request id; cache a few
        # fully rendered streams keyed by (kind, n) so the hot path is memcpy.
        self._cache: dict[tuple[bool, int], list[bytes]] = {}

    def _events(self, chat: bool, n: int) -> list[bytes]:
        key = (chat, n)
        ev = self._cache.get(key)
        if ev is None:
            mk = self.t.chat_event if chat else self.t.completion_event
            rid = ("chatcmpl-" if chat else "cmpl-") + "stub"
            ev = [mk(rid, i, n) for i in range(n)]
            self._cache[key] = ev
        return ev

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    writer.write(_BAD)
                    return
                line_end = head.index(b"\r\n")
                parts = head[:line_end].split(b" ")
                if len(parts) != 3:
                    writer.write(_BAD)
                    return
                method, target = parts[0], parts[1].split(b"?", 1)[0]
                clen = 0
                close = False
                for h in head[line_end + 2:-4].split(b"\r\n"):
                    k, _, v = h.partition(b":")
                    k = k.strip().lower()
                    if k == b"content-length":
                        clen = int(v)
                    elif k == b"connection" and v.strip().lower() == b"close":
                        close = True
                    elif k == b"transfer-encoding":  # not needed by any client we drive
                        writer.write(_BAD)
                        return
                body = await reader.readexactly(clen) if clen else b""
                await self._dispatch(method, target, body, writer)
                if close:
                    await writer.drain()
                    return
                if writer.transport.get_write_buffer_size() > 1 << 16:
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _dispatch(self, method: bytes, target: bytes, body: bytes,
                        writer: asyncio.StreamWriter) -> None:
        if method == b"GET":
            if target == b"/health":
                writer.write(_HEALTH)
            elif target == b"/v1/models":
                writer.write(self._models)
            elif target == b"/stats":
                writer.write(_fixed(b"200 OK", json.dumps(self.stats).encode()))
            elif target == b"/version":
                writer.write(_VERSION)
            else:
                writer.write(_NOT_FOUND)
            return
        if method != b"POST" or target not in (b"/v1/chat/completions", b"/v1/completions"):
            writer.write(_NOT_FOUND)
            return
        chat = target == b"/v1/chat/completions"
        try:
            req = json.loads(body)
        except ValueError:
            writer.write(_BAD)
            return
        n = req.get("max_tokens") or req.get("max_completion_tokens") or self.chunks
        n = max(1, min(int(n), self.chunks))
        ptoks = _prompt_tokens(req, chat)
        st = self.stats
        st["requests"] += 1
        st["body_bytes"] += len(body)
        st["prompt_tokens"] += ptoks
        if req.get("stream"):
            writer.write(self.t.sse_head)
            events = self._events(chat, n)
            if self.itl_s > 0:
                for ev in events:
                    writer.write(ev)
                    await writer.drain()
                    await asyncio.sleep(self.itl_s)
            else:
                # one write() per event -> one send() per event (TCP_NODELAY)
                for ev in events:
                    writer.write(ev)
            so = req.get("stream_options") or {}
            if so.get("include_usage"):
                u: dict[str, Any] = {
                    "id": "stub", "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": 0, "model": MODEL, "choices": [], "usage": _usage(ptoks, n)}
                writer.write(_chunk(b"data: " + json.dumps(u, separators=(",", ":")).encode()
                                    + b"\n\n"))
            writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            return
        text = "tok" + " tok" * (n - 1)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": "stop"}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}
            obj = "text_completion"
        resp = {"id": "stub", "object": obj, "created": int(time.time()), "model": MODEL,
                "choices": [choice], "usage": _usage(ptoks, n)}
        writer.write(_fixed(b"200 OK", json.dumps(resp, separators=(",", ":")).encode()))


async def serve(host: str = "127.0.0.1", port: int = 0, chunks: int = 16,
                itl_s: float = 0.0, max_model_len: int = MAX_MODEL_LEN) -> asyncio.Server:
    """Start the stub in the *current* loop (use ``spawn`` for benchmarks)."""
    stub = StubServer(chunks, itl_s, max_model_len)
    return await asyncio.start_server(stub.handle, host, port, backlog=4096,
                                      reuse_address=True, limit=1 << 20)


# --------------------------------------------------------------------------- process helper

class SpawnedServer:
    def __init__(self, proc: subprocess.Popen, host: str, port: int) -> None:
        self.proc, self.host, self.port = proc, host, port
        self.base_url = f"http://{host}:{port}"
        self.url = self.base_url + "/v1/chat/completions"

    def stats(self) -> dict[str, int]:
        """The stub's ``/stats``: completion requests, body bytes and prompt tokens so far."""
        with socket.create_connection((self.host, self.port), timeout=5) as s:
            s.sendall(b"GET /stats HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
        return json.loads(raw.partition(b"\r\n\r\n")[2])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_process(host: str = "127.0.0.1", port: int = 0, chunks: int = 16,
                  itl_ms: float = 0.0, use_uvloop: bool = True,
                  cpu: int | None = None, max_model_len: int = MAX_MODEL_LEN) -> SpawnedServer:
    """Start the stub in a separate Python process; returns once it accepts."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("stub server is loopback-only")
    cmd = [sys.executable, os.path.abspath(__file__), "--host", host, "--port", str(port),
           "--chunks", str(chunks), "--itl-ms", str(itl_ms), "--print-port",
           "--max-model-len", str(max_model_len)]
    if not use_uvloop:
        cmd.append("--no-uvloop")
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"stub server failed to start: {line!r}")
    srv = SpawnedServer(proc, host, int(line.split()[1]))
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection((host, srv.port), timeout=1) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return srv
        except OSError:
            if time.monotonic() > deadline:
                srv.stop()
                raise
            time.sleep(0.05)


@contextlib.contextmanager
def spawn(**kw) -> Iterator[SpawnedServer]:
    srv = start_process(**kw)
    try:
        yield srv
    finally:
        srv.stop()


# Alias kept for callers that expect the brief's name; it is a *process*, not a thread,
# so client and server never share an event loop or a GIL.
run_in_process = spawn


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--chunks", type=int, default=16, help="token chunks per response")
    ap.add_argument("--itl-ms", type=float, default=0.0, help="sleep between chunks (0 = none)")
    ap.add_argument("--no-uvloop", action="store_true", help="use the stdlib loop")
    ap.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    ap.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN,
                    help="the max_model_len /v1/models reports (longer prompts are answered)")
    ap.add_argument("--print-port", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        ap.error("stub server is loopback-only")
    if a.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    if not a.no_uvloop:
        try:
            import uvloop  # type: ignore[import-not-found]
            uvloop.install()
        except ImportError:
            pass

    async def _main() -> None:
        server = await serve(a.host, a.port, a.chunks, a.itl_ms / 1000.0, a.max_model_len)
        port = server.sockets[0].getsockname()[1]
        if a.print_port:
            print(f"PORT {port}", flush=True)
        else:
            print(f"k3stub listening on http://{a.host}:{port} chunks={a.chunks}", flush=True)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main())


if __name__ == "__main__":
    main()
