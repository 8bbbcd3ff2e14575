"""The async measuring client: httpx API over an aiohttp transport.

Why this transport: httpx's default transport adds seconds of queueing at 64+ concurrent
streams (see the README's design notes for the figures measured here), which would fail
healthy deployments on latency SLOs. :class:`~pytest_k3accept.observe.endpoint.transport.LeanAiohttpTransport`
keeps the httpx API and runs the sockets on one aiohttp session (unlimited pool unless
``max_connections``; see docs/benchmarks.md for why not ``httpx_aiohttp``). SSE is read from
raw byte chunks and split by hand.

Token counts come from the server's ``usage`` (``stream_options.include_usage``), never from
counting stream chunks. Failed requests carry an ``error_kind`` and no latency figures that a
summary could mistake for successes.

Bounds (no request can hang a session): ``timeout`` is the longest silence allowed while
connecting or between two reads (so also the wait for the first token); ``deadline`` bounds a
whole request (default ``max(600, 10 * timeout)`` seconds). A request cut by either keeps what
it received (``text``, ``chunks``) and fails as ``timeout``. A connection that drops (server
killed or crashed) fails as ``connection``. Whatever the server sends is untrusted: see
:mod:`pytest_k3accept.observe.endpoint.untrusted` for the limits on stored bodies and messages.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import httpx

from . import untrusted as U
from .auth import auth_headers
from .faults import classify_exception, describe_exception, describe_proxy_answer, proxy_of
from .transport import DirectResponse, PostStream, raw_chunks

_timeout = getattr(asyncio, "timeout", None)

#: error classes kept apart from latency figures
ERROR_KINDS = ("http-4xx", "http-5xx", "timeout", "connection", "protocol")


@dataclass
class RequestResult:
    """One request's outcome and timings (seconds, monotonic clock)."""

    ok: bool
    status: int | None = None
    error: str | None = None
    error_kind: str | None = None
    error_body: Any = None
    started_at: float = 0.0
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    e2e: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    text: str = ""
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    chunks: int = 0
    stream: bool = False
    #: the proxy that answered (``Server``/``Via`` header, error page), None: the server itself
    proxy: str | None = None

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (e2e - ttft) / (completion_tokens - 1)."""
        if self.e2e is None or self.ttft is None or not self.completion_tokens:
            return None
        if self.completion_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.completion_tokens - 1)

    def as_dict(self) -> dict[str, Any]:
        """All fields plus ``tpot``, as plain data."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"tpot": self.tpot}


class K3Client:
    """Async client for one endpoint; ``async with`` it, or call :meth:`aclose`."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 timeout: float = 60.0, max_connections: int | None = None,
                 deadline: float | None = None) -> None:
        from .transport import LeanAiohttpTransport

        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self.deadline = deadline if deadline is not None else max(600.0, 10 * timeout)
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=auth_headers(api_key),
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=LeanAiohttpTransport(limit=max_connections or 0))

    async def __aenter__(self) -> "K3Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    @property
    def http(self) -> httpx.AsyncClient:
        """The underlying ``httpx.AsyncClient`` (for endpoints this class does not wrap)."""
        return self._http

    async def chat(self, messages: Sequence[Mapping[str, Any]], *, stream: bool = False,
                   max_tokens: int = 16, **params: Any) -> RequestResult:
        """POST /v1/chat/completions; ``params`` go into the body (tools, temperature ...)."""
        body = {"model": self.model, "messages": list(messages), "max_tokens": max_tokens,
                **params}
        return await self.request("/v1/chat/completions", body, stream=stream)

    async def completion(self, prompt: str | list[int], *, stream: bool = False,
                         max_tokens: int = 16, **params: Any) -> RequestResult:
        """POST /v1/completions."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, **params}
        return await self.request("/v1/completions", body, stream=stream)

    async def tokenize(self, prompt: str | None = None,
                       messages: Sequence[Mapping[str, Any]] | None = None,
                       **params: Any) -> list[int]:
        """Token ids of a prompt (or rendered chat) as the served model counts them."""
        body: dict[str, Any] = {"model": self.model, **params}
        if messages is not None:
            body["messages"] = list(messages)
        else:
            body["prompt"] = prompt or ""
        resp = await self._http.post("/tokenize", json=body)
        resp.raise_for_status()
        return list(resp.json()["tokens"])

    async def request(self, path: str, body: dict[str, Any], *, stream: bool = False,
                      ) -> RequestResult:
        """Send one request and measure it; never raises for HTTP, transport or content
        errors, and returns within ``deadline`` seconds."""
        body = dict(body)
        if stream:
            body["stream"] = True
            opts = dict(body.get("stream_options") or {})
            opts.setdefault("include_usage", True)
            body["stream_options"] = opts
        res = RequestResult(ok=False, stream=stream, started_at=time.time())
        t0 = time.perf_counter()
        try:
            if _timeout is not None:  # Python 3.11+: no extra task per request
                async with _timeout(self.deadline):
                    await self._guarded(path, body, res, t0)
            else:
                await asyncio.wait_for(self._guarded(path, body, res, t0), self.deadline)
        except (TimeoutError, asyncio.TimeoutError):
            res.ok, res.error_kind = False, "timeout"
            res.error = (f"no complete answer from {self.base_url}{path} within the "
                         f"per-request deadline of {self.deadline:g} s ({res.chunks} stream "
                         "chunks received; partial output kept)")
        if res.e2e is None:
            res.e2e = time.perf_counter() - t0
        if not res.ok:
            res.ttft = None
            res.itl = []
        return res

    async def _guarded(self, path: str, body: dict[str, Any], res: RequestResult,
                       t0: float) -> None:
        try:
            if res.stream:
                await self._stream(path, body, res, t0)
            else:
                await self._full(path, body, res, t0)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - a request never raises; it fails
            res.ok, res.error_kind = False, classify_exception(exc)
            last = None if res.ttft is None else t0 + res.ttft + math.fsum(res.itl)
            res.error = describe_exception(  # silence: since the last token (None: none)
                exc, res.error_kind, res, self.base_url + path, self.timeout,
                silence=None if last is None else time.perf_counter() - last)

    async def _full(self, path: str, body: dict[str, Any], res: RequestResult,
                    t0: float) -> None:
        async with PostStream(self._http, path, body) as resp:
            res.status = resp.status_code
            res.proxy = proxy_of(resp.headers)
            limit = U.MAX_ERROR_BODY if resp.status_code >= 400 else U.MAX_BODY
            raw, total = await _read_capped(resp, limit)
        res.e2e = time.perf_counter() - t0
        if resp.status_code >= 400:
            self._fail_http(res, raw, total)
            return
        if total is not None:
            res.error_kind = "protocol"
            res.error = (f"the response body is larger than {U.MAX_BODY // 2**20} MiB; "
                         "reading stopped there")
            return
        payload = U.parse_json(raw)
        if not isinstance(payload, dict):
            res.error_kind = "protocol"
            res.error = (f"HTTP {res.status} but the body is not a JSON object: "
                         f"{U.clean(U.decode(raw[:300]), 300)!r}")
            return
        U.absorb_full(res, payload)
        res.ok = True

    def _fail_http(self, res: RequestResult, raw: bytes, total: int | None) -> None:
        status = res.status or 0
        res.error_kind = "http-5xx" if status >= 500 else "http-4xx"
        res.error_body = U.error_body(raw, total)
        message = U.message_of(res.error_body, U.decode(raw[:300]) or f"HTTP {status}")
        text = U.decode(raw[:2000])
        if status >= 500 and not text.lstrip().startswith("{"):  # not vLLM's JSON error
            named = proxy_of({}, text)
            res.proxy = res.proxy or named
            if res.proxy and (status in (502, 503, 504) or named):
                message = describe_proxy_answer(status, res.proxy, self.base_url)
        if status in (401, 403):
            message += (" [the API key is missing or was rejected: put it in the environment "
                        "variable named by --k3-api-key-env]")
        res.error = message

    async def _stream(self, path: str, body: dict[str, Any], res: RequestResult,
                      t0: float) -> None:
        async with PostStream(self._http, path, body) as resp:
            res.status = resp.status_code
            res.proxy = proxy_of(resp.headers)
            if resp.status_code >= 400:
                raw, total = await _read_capped(resp, U.MAX_ERROR_BODY)
                res.e2e = time.perf_counter() - t0
                self._fail_http(res, raw, total)
                return
            buf = b""
            last: float | None = None
            done = False
            perf, decode, absorb = time.perf_counter, U.parse_event, U.absorb_delta
            async for chunk in raw_chunks(resp):
                now = perf()
                if buf:
                    chunk = buf + chunk
                lines = chunk.split(b"\n")
                buf = lines.pop()
                if len(buf) > U.MAX_EVENT_LINE:
                    res.error_kind = "protocol"
                    res.error = (f"a stream line is longer than {U.MAX_EVENT_LINE // 2**20} "
                                 "MiB; reading stopped")
                    return
                for line in lines:
                    # the stream's hot path (once per line): blank separators skipped first
                    if not line or line[:5] != b"data:":
                        continue
                    data = line[5:].strip()  # also the "\r" of a CRLF line end
                    if data == b"[DONE]":
                        done = True
                        continue
                    event = decode(data)
                    if not isinstance(event, dict):
                        continue
                    if "error" in event:
                        res.error_kind = "http-5xx"
                        res.error_body = U.error_body(data)
                        res.error = U.message_of(event, "error event in stream")
                        continue
                    res.chunks += 1
                    if absorb(res, event):
                        if last is None:
                            res.ttft = now - t0
                        else:
                            res.itl.append(now - last)
                        last = now
            res.e2e = time.perf_counter() - t0
            if res.error_kind is None:
                if not done:
                    ctype = resp.headers.get("content-type", "")
                    res.error_kind = "protocol"
                    res.error = ("the stream ended without [DONE] (the server closed it after "
                                 f"{res.chunks} chunks)" if "event-stream" in ctype else
                                 "asked for a stream but the answer is not an event stream "
                                 f"(Content-Type: {U.clean(ctype, 100) or 'none'})")
                else:
                    res.ok = True


async def _read_capped(resp: httpx.Response | DirectResponse, limit: int,
                       ) -> tuple[bytes, int | None]:
    """Up to ``limit`` bytes of the body; ``total`` is None when it all fit, else the bytes
    seen before reading stopped (more than ``limit``)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(parts)[:limit], size
    return b"".join(parts), None

