"""A scriptable, NOT-vLLM OpenAI-compatible HTTP stub for fault tests of the plugin's own code.

It stands in for "some other server" (stalled streams, dropped connections, hostile bodies,
no ``/version``, no vLLM metrics), never for vLLM: behaviour that vLLM has is tested against
the real testbed in ``tests/live``. Use as a context manager::

    with StubServer() as stub:
        stub.chat = stall_after(2)        # what POST /v1/chat/completions does
        ... stub.base_url ...
"""

from __future__ import annotations

# httpx imports httpcore lazily and caches httpcore's exception classes on first use. If that
# first use happens inside an in-process pytester run, pytester drops httpcore from sys.modules
# afterwards, a later re-import makes NEW classes, and raw httpcore errors escape httpx in
# every later test. Importing it here (at collection) keeps one httpcore for the session.
import httpcore  # noqa: F401
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Handler = Callable[["_Req"], None]


class _Req(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def send(self, status: int, payload: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def start_stream(self, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, data: Any) -> None:
        raw = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.wfile.write(b"data: " + raw + b"\n\n")
        self.wfile.flush()

    def _route(self) -> None:
        stub = self.server.stub
        path = self.path.split("?")[0]
        stub.requests.append((self.command, path))
        handler = stub.routes.get((self.command, path))
        if handler is None:
            self.send(404, b'{"detail":"Not Found"}')
            return
        try:
            handler(self)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = _route
    do_POST = _route


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stub: "StubServer"


def models(req: _Req, name: str = "stub-model") -> None:
    """An OpenAI model list without vLLM's ``max_model_len``."""
    req.body()
    req.send(200, json.dumps({"object": "list", "data": [
        {"id": name, "object": "model", "owned_by": "someone"}]}).encode())


def reply(status: int, payload: bytes, ctype: str = "application/json") -> Handler:
    """A handler that reads the request body and answers ``status`` with ``payload``."""
    def handle(req: _Req) -> None:
        req.body()
        req.send(status, payload, ctype)
    return handle


def chunk(text: str = "", usage: dict[str, Any] | None = None,
          finish: str | None = None) -> dict[str, Any]:
    """One chat.completion.chunk event."""
    choices = [] if usage is not None else [
        {"index": 0, "delta": {"content": text}, "finish_reason": finish}]
    out: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "choices": choices}
    if usage is not None:
        out["usage"] = usage
    return out


def normal_chat(req: _Req) -> None:
    """A plain non-streamed chat completion."""
    body = json.loads(req.body() or b"{}")
    if body.get("stream"):
        req.start_stream()
        for word in ("a", "b", "c"):
            req.event(chunk(word))
        req.event(chunk(usage={"prompt_tokens": 5, "completion_tokens": 3,
                               "total_tokens": 8}))
        req.event(b"[DONE]")
        return
    req.send(200, json.dumps({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}).encode())


class StubServer:
    """A loopback HTTP server whose routes are plain functions of the request handler."""

    def __init__(self, port: int = 0) -> None:
        self.release = threading.Event()  # set on exit: stalled handlers return
        self.requests: list[tuple[str, str]] = []
        self.routes: dict[tuple[str, str], Handler] = {
            ("GET", "/v1/models"): models,
            ("POST", "/v1/chat/completions"): normal_chat,
        }
        self._server = _Server(("127.0.0.1", port), _Req)
        self._server.stub = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def route(self, method: str, path: str, handler: Handler) -> None:
        """Set what ``METHOD path`` does."""
        self.routes[(method, path)] = handler

    def stall(self, seconds: float = 60.0) -> None:
        """Block the calling handler until the stub closes (or ``seconds`` pass)."""
        self.release.wait(seconds)

    def __enter__(self) -> "StubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
