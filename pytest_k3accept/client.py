"""The async measuring client: httpx API over an aiohttp transport.

Why this transport: httpx's default transport adds seconds of queueing at 64+ concurrent
streams (see the README's design notes for the figures measured here), which would fail
healthy deployments on latency SLOs. ``httpx_aiohttp.AiohttpTransport`` keeps the httpx API
and runs the sockets on aiohttp. SSE is read from raw byte chunks and split by hand.

Token counts come from the server's ``usage`` (``stream_options.include_usage``), never from
counting stream chunks. Failed requests carry an ``error_kind`` and no latency figures that a
summary could mistake for successes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import httpx

from .endpoint import auth_headers

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

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (e2e - ttft) / (completion_tokens - 1)."""
        if self.e2e is None or self.ttft is None or not self.completion_tokens:
            return None
        if self.completion_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.completion_tokens - 1)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"tpot": self.tpot}


def _classify_exc(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    name = type(cause).__name__
    if isinstance(exc, httpx.TimeoutException) and "Timeout" in name:
        return "timeout"
    if isinstance(cause, TimeoutError) or "Timeout" in name:
        return "timeout"
    if isinstance(exc, (httpx.TransportError, OSError)):
        return "connection"
    return "protocol"


def _error_message(body: Any, fallback: str) -> str:
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return fallback


class K3Client:
    """Async client for one endpoint; ``async with`` it, or call :meth:`aclose`."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 timeout: float = 60.0, max_connections: int | None = None) -> None:
        from httpx_aiohttp import AiohttpTransport

        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=None)
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=auth_headers(api_key),
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=AiohttpTransport(limits=limits))

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
        """Send one request and measure it; never raises for HTTP or transport errors."""
        body = dict(body)
        if stream:
            body["stream"] = True
            opts = dict(body.get("stream_options") or {})
            opts.setdefault("include_usage", True)
            body["stream_options"] = opts
        res = RequestResult(ok=False, stream=stream, started_at=time.time())
        t0 = time.perf_counter()
        try:
            if stream:
                await self._stream(path, body, res, t0)
            else:
                resp = await self._http.post(path, json=body)
                res.status = resp.status_code
                res.e2e = time.perf_counter() - t0
                payload = _json(resp.content)
                if resp.status_code >= 400:
                    self._fail_http(res, payload, resp.text)
                else:
                    self._absorb_full(res, payload)
                    res.ok = True
        except httpx.HTTPError as exc:
            res.ok, res.error_kind = False, _classify_exc(exc)
            res.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if not res.ok:
            res.ttft = None
            res.itl = []
        return res

    @staticmethod
    def _fail_http(res: RequestResult, payload: Any, text: str) -> None:
        status = res.status or 0
        res.error_kind = "http-5xx" if status >= 500 else "http-4xx"
        res.error_body = payload if payload is not None else text[:2000]
        res.error = _error_message(payload, text[:300] or f"HTTP {status}")
        res.e2e = res.e2e

    async def _stream(self, path: str, body: dict[str, Any], res: RequestResult,
                      t0: float) -> None:
        async with self._http.stream("POST", path, json=body) as resp:
            res.status = resp.status_code
            if resp.status_code >= 400:
                raw = await resp.aread()
                res.e2e = time.perf_counter() - t0
                self._fail_http(res, _json(raw), raw.decode("utf-8", "replace"))
                return
            buf = b""
            last: float | None = None
            done = False
            async for chunk in resp.aiter_raw():
                now = time.perf_counter()
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        continue
                    event = _json(data)
                    if not isinstance(event, dict):
                        continue
                    if "error" in event:
                        res.error_kind = "http-5xx"
                        res.error_body = event
                        res.error = _error_message(event, "error event in stream")
                        continue
                    res.chunks += 1
                    if self._absorb_delta(res, event):
                        if last is None:
                            res.ttft = now - t0
                        else:
                            res.itl.append(now - last)
                        last = now
            res.e2e = time.perf_counter() - t0
            if res.error_kind is None:
                if not done:
                    res.error_kind, res.error = "protocol", "stream ended without [DONE]"
                else:
                    res.ok = True

    @staticmethod
    def _usage(res: RequestResult, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        res.prompt_tokens = usage.get("prompt_tokens", res.prompt_tokens)
        res.completion_tokens = usage.get("completion_tokens", res.completion_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            res.cached_tokens = int(details["cached_tokens"])

    def _absorb_full(self, res: RequestResult, payload: Any) -> None:
        if not isinstance(payload, dict):
            return
        self._usage(res, payload.get("usage"))
        choice = (payload.get("choices") or [{}])[0]
        msg = choice.get("message") or {}
        res.text = msg.get("content") or choice.get("text") or ""
        res.tool_calls = list(msg.get("tool_calls") or [])
        res.finish_reason = choice.get("finish_reason")

    def _absorb_delta(self, res: RequestResult, event: dict[str, Any]) -> bool:
        """Fold one stream event into ``res``; True when it carried output."""
        self._usage(res, event.get("usage"))
        choices = event.get("choices") or []
        if not choices:
            return False
        choice = choices[0]
        res.finish_reason = choice.get("finish_reason") or res.finish_reason
        delta = choice.get("delta")
        if delta is None:  # /v1/completions
            piece = choice.get("text") or ""
            res.text += piece
            return bool(piece)
        piece = delta.get("content") or ""
        res.text += piece
        calls = delta.get("tool_calls") or []
        res.tool_calls.extend(calls)
        return bool(piece or calls or delta.get("reasoning_content")
                    or delta.get("reasoning"))


def _json(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
