"""Closed-loop streaming request drivers for the transport benchmark.

Every driver has the same signature::

    async def run(url, concurrency, total_requests, chunks, *, warmup=0) -> list[Record]

``concurrency`` workers issue streaming chat/completions requests back to back
until ``total_requests`` have been *started* (``warmup`` extra requests are made
first on the same client, so connections are open, and are not recorded).  Each
driver does the same per-request work a real load test must do: serialise a
fresh JSON body, parse every SSE ``data:`` event with ``json.loads``, timestamp
every token, read ``usage`` from the final chunk, stop on ``[DONE]``.  Only the
HTTP client and the way SSE lines are read differ.

TTFT/e2e are measured from just before the request is handed to the client
(so client-side pool queueing is included, as a user would see it).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import aiohttp
import httpx

try:  # optional: variants (c)-(g)
    from httpx_aiohttp import AiohttpTransport
except ImportError:  # pragma: no cover
    AiohttpTransport = None  # type: ignore[assignment,misc]

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
from pytest_k3accept.observe.endpoint.transport import LeanAiohttpTransport  # noqa: E402  (the plugin's own)

perf = time.perf_counter
_loads = json.loads
_dumps = json.dumps

# Generous and identical for every variant: the benchmark must not fail on a
# pool timeout (httpx's default 5 s would turn c=512 queueing into errors).
HTTPX_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=None)
AIOHTTP_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=300.0)
HEADERS = {"content-type": "application/json", "accept": "text/event-stream",
           "accept-encoding": "identity"}


@dataclass(slots=True)
class Record:
    ok: bool
    ttft: float = float("nan")   # s, request start -> first token chunk
    e2e: float = float("nan")    # s, request start -> [DONE] / end of body
    n_chunks: int = 0            # token chunks (data events with choices)
    start: float = 0.0           # perf_counter at request start
    end: float = 0.0             # perf_counter at request end
    itls: list[float] = field(default_factory=list)  # s, gaps between token chunks
    usage: dict | None = None
    error: str | None = None


def make_body(chunks: int, i: int) -> bytes:
    return _dumps({
        "model": "stub-model",
        "messages": [{"role": "user", "content": f"request {i}: say something"}],
        "max_tokens": chunks, "stream": True,
        "stream_options": {"include_usage": True},
    }).encode()


class _SSE:
    """Per-request SSE event accounting shared by every driver."""

    __slots__ = ("t0", "stamps", "usage", "done")

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.stamps: list[float] = []
        self.usage: dict | None = None
        self.done = False

    def data(self, payload: bytes | str) -> None:
        """Handle the text after ``data:`` of one event."""
        now = perf()
        if payload in (b"[DONE]", "[DONE]"):
            self.done = True
            return
        ev = _loads(payload)
        if ev.get("choices"):
            self.stamps.append(now)
        u = ev.get("usage")
        if u:
            self.usage = u

    def record(self) -> Record:
        end = perf()
        s = self.stamps
        return Record(True, (s[0] - self.t0) if s else float("nan"), end - self.t0, len(s),
                      self.t0, end, [b - a for a, b in zip(s, s[1:])], self.usage)


def _feed_bytes_lines(sse: _SSE, buf: bytes, chunk: bytes) -> bytes:
    """Own SSE line splitting on raw bytes; returns the unterminated tail."""
    if buf:
        chunk = buf + chunk
    lines = chunk.split(b"\n")
    tail = lines.pop()
    for line in lines:
        if line[:5] == b"data:":
            sse.data(line[5:].strip())
    return tail


# Optional wall-clock cap for one measured phase (None = run all requests).  A
# pathological client (httpx default pool at c=512: ~25 req/s) then reports the
# rate over the requests it finished instead of holding the benchmark for minutes.
MAX_PHASE_S: float | None = None


class Records(list):
    """list[Record] plus the measured phase's wall time and this process's CPU time."""
    wall_s: float = float("nan")
    cpu_s: float = float("nan")


async def _closed_loop(one: Callable[[int], Awaitable[Record]], concurrency: int,
                       total: int, warmup: int) -> list[Record]:
    async def phase(n: int, out: list[Record] | None) -> None:
        counter = iter(range(n))
        stop_at = perf() + MAX_PHASE_S if MAX_PHASE_S else float("inf")

        async def worker() -> None:
            for i in counter:
                if perf() > stop_at:
                    break
                try:
                    rec = await one(i)
                except Exception as e:  # noqa: BLE001 - report, keep the load going
                    rec = Record(False, end=perf(), error=f"{type(e).__name__}: {e}")
                if out is not None:
                    out.append(rec)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))

    if warmup:
        await phase(warmup, None)
    records = Records()
    c0, t0 = time.process_time(), perf()
    await phase(total, records)
    records.cpu_s, records.wall_s = time.process_time() - c0, perf() - t0
    return records


# --------------------------------------------------------------------------- (a) raw aiohttp

async def run_aiohttp(url: str, concurrency: int, total_requests: int, chunks: int,
                      *, warmup: int = 0) -> list[Record]:
    conn = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
    async with aiohttp.ClientSession(connector=conn, timeout=AIOHTTP_TIMEOUT,
                                     auto_decompress=False) as s:
        async def one(i: int) -> Record:
            t0 = perf()
            sse = _SSE(t0)
            async with s.post(url, data=make_body(chunks, i), headers=HEADERS) as resp:
                if resp.status != 200:
                    return Record(False, error=f"HTTP {resp.status}", start=t0, end=perf())
                async for line in resp.content:  # StreamReader.readline()
                    if line[:5] == b"data:":
                        sse.data(line[5:].strip())
                        if sse.done:
                            break
            return sse.record()

        return await _closed_loop(one, concurrency, total_requests, warmup)


# --------------------------------------------------------------------------- httpx helpers

def _httpx_lines(client: httpx.AsyncClient, url: str, chunks: int) -> Callable[[int], Awaitable[Record]]:
    async def one(i: int) -> Record:
        t0 = perf()
        sse = _SSE(t0)
        async with client.stream("POST", url, content=make_body(chunks, i), headers=HEADERS) as r:
            if r.status_code != 200:
                return Record(False, error=f"HTTP {r.status_code}", start=t0, end=perf())
            async for line in r.aiter_lines():
                if line[:5] == "data:":
                    sse.data(line[5:].strip())
                    if sse.done:
                        break
        return sse.record()
    return one


def _httpx_raw(client: httpx.AsyncClient, url: str, chunks: int) -> Callable[[int], Awaitable[Record]]:
    async def one(i: int) -> Record:
        t0 = perf()
        sse = _SSE(t0)
        async with client.stream("POST", url, content=make_body(chunks, i), headers=HEADERS) as r:
            if r.status_code != 200:
                return Record(False, error=f"HTTP {r.status_code}", start=t0, end=perf())
            buf = b""
            # accept-encoding: identity, so raw bytes == decoded bytes
            async for chunk in r.aiter_raw():
                buf = _feed_bytes_lines(sse, buf, chunk)
                if sse.done:
                    break
        return sse.record()
    return one


async def _run_httpx(client: httpx.AsyncClient, reader, url: str, concurrency: int,
                     total: int, chunks: int, warmup: int) -> list[Record]:
    async with client:
        return await _closed_loop(reader(client, url, chunks), concurrency, total, warmup)


# --------------------------------------------------------------------------- (b) httpx default

async def run_httpx_default(url: str, concurrency: int, total_requests: int, chunks: int,
                            *, warmup: int = 0) -> list[Record]:
    """httpx's own transport (httpcore), default Limits(100, 20), aiter_lines()."""
    c = httpx.AsyncClient(timeout=HTTPX_TIMEOUT)
    return await _run_httpx(c, _httpx_lines, url, concurrency, total_requests, chunks, warmup)


# --------------------------------------------------------------------------- (e) httpx tuned pool

_UNLIMITED = httpx.Limits(max_connections=None, max_keepalive_connections=None,
                          keepalive_expiry=60.0)


async def run_httpx_nolimit(url: str, concurrency: int, total_requests: int, chunks: int,
                            *, warmup: int = 0) -> list[Record]:
    """httpcore transport with an unlimited pool, aiter_lines()."""
    c = httpx.AsyncClient(timeout=HTTPX_TIMEOUT, limits=_UNLIMITED)
    return await _run_httpx(c, _httpx_lines, url, concurrency, total_requests, chunks, warmup)


async def run_httpx_nolimit_raw(url: str, concurrency: int, total_requests: int, chunks: int,
                                *, warmup: int = 0) -> list[Record]:
    """httpcore transport with an unlimited pool, aiter_raw() + own SSE split."""
    c = httpx.AsyncClient(timeout=HTTPX_TIMEOUT, limits=_UNLIMITED)
    return await _run_httpx(c, _httpx_raw, url, concurrency, total_requests, chunks, warmup)


# --------------------------------------------------------------------------- (c) httpx + aiohttp

async def run_httpx_aiohttp_default(url: str, concurrency: int, total_requests: int,
                                    chunks: int, *, warmup: int = 0) -> list[Record]:
    """AiohttpTransport() as shipped: Limits(100, 20) -> aiohttp limit=100; aiter_lines()."""
    c = httpx.AsyncClient(transport=AiohttpTransport(), timeout=HTTPX_TIMEOUT)
    return await _run_httpx(c, _httpx_lines, url, concurrency, total_requests, chunks, warmup)


def _aiohttp_session_factory(limit: int = 0) -> Callable[[], aiohttp.ClientSession]:
    # Called lazily by AiohttpTransport on the first request, i.e. inside the loop.
    # NB: Limits(max_connections=None) would *not* give an unlimited pool: the
    # transport then omits `limit`, and aiohttp's default is 100.
    def make() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=60.0),
            timeout=AIOHTTP_TIMEOUT, auto_decompress=False)
    return make


async def run_httpx_aiohttp(url: str, concurrency: int, total_requests: int, chunks: int,
                            *, warmup: int = 0) -> list[Record]:
    """AiohttpTransport over an unlimited aiohttp pool; aiter_lines()."""
    c = httpx.AsyncClient(transport=AiohttpTransport(client=_aiohttp_session_factory()),
                          timeout=HTTPX_TIMEOUT)
    return await _run_httpx(c, _httpx_lines, url, concurrency, total_requests, chunks, warmup)


# --------------------------------------------------------------------------- (d) + raw SSE split

async def run_httpx_aiohttp_raw(url: str, concurrency: int, total_requests: int, chunks: int,
                                *, warmup: int = 0) -> list[Record]:
    """AiohttpTransport over an unlimited aiohttp pool; aiter_raw() + own SSE split."""
    c = httpx.AsyncClient(transport=AiohttpTransport(client=_aiohttp_session_factory()),
                          timeout=HTTPX_TIMEOUT)
    return await _run_httpx(c, _httpx_raw, url, concurrency, total_requests, chunks, warmup)


# --------------------------------------------------------------------------- (f) lean variants

def _httpx_send_raw(client: httpx.AsyncClient, url: str, chunks: int) -> Callable[[int], Awaitable[Record]]:
    """Skip build_request's merging: prebuilt URL/headers/timeout, Request + send(stream=True)."""
    u = httpx.URL(url)
    ext = {"timeout": HTTPX_TIMEOUT.as_dict()}

    async def one(i: int) -> Record:
        t0 = perf()
        sse = _SSE(t0)
        req = httpx.Request("POST", u, content=make_body(chunks, i), headers=HEADERS,
                            extensions=ext)
        r = await client.send(req, stream=True)
        try:
            if r.status_code != 200:
                return Record(False, error=f"HTTP {r.status_code}", start=t0, end=perf())
            buf = b""
            async for chunk in r.aiter_raw():
                buf = _feed_bytes_lines(sse, buf, chunk)
                if sse.done:
                    break
        finally:
            await r.aclose()
        return sse.record()
    return one


async def run_httpx_aiohttp_send(url: str, concurrency: int, total_requests: int, chunks: int,
                                 *, warmup: int = 0) -> list[Record]:
    """AiohttpTransport (unlimited) + prebuilt httpx.Request + send(stream=True) + aiter_raw()."""
    c = httpx.AsyncClient(transport=AiohttpTransport(client=_aiohttp_session_factory()),
                          timeout=HTTPX_TIMEOUT)
    return await _run_httpx(c, _httpx_send_raw, url, concurrency, total_requests, chunks, warmup)


async def run_httpx_lean(url: str, concurrency: int, total_requests: int, chunks: int,
                         *, warmup: int = 0) -> list[Record]:
    """LeanAiohttpTransport + client.stream() + aiter_raw() + own SSE split."""
    c = httpx.AsyncClient(transport=LeanAiohttpTransport(), timeout=HTTPX_TIMEOUT)
    return await _run_httpx(c, _httpx_raw, url, concurrency, total_requests, chunks, warmup)


async def run_httpx_lean_send(url: str, concurrency: int, total_requests: int, chunks: int,
                              *, warmup: int = 0) -> list[Record]:
    """LeanAiohttpTransport + prebuilt httpx.Request + send(stream=True) + aiter_raw()."""
    c = httpx.AsyncClient(transport=LeanAiohttpTransport(), timeout=HTTPX_TIMEOUT)
    return await _run_httpx(c, _httpx_send_raw, url, concurrency, total_requests, chunks, warmup)


class _NoCookies(httpx.Cookies):
    """A cookie store that never stores or sends anything (an LLM API needs none)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        pass

    def set_cookie_header(self, request: httpx.Request) -> None:
        pass

    def __bool__(self) -> bool:
        return False


class NoCookieAsyncClient(httpx.AsyncClient):
    """httpx.AsyncClient that skips per-response Set-Cookie parsing (~10-30 us/request)."""

    _NO_COOKIES = _NoCookies()

    @property  # type: ignore[override]
    def cookies(self) -> httpx.Cookies:
        return self._NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        pass


async def run_httpx_lean_send_nc(url: str, concurrency: int, total_requests: int, chunks: int,
                                 *, warmup: int = 0) -> list[Record]:
    """As httpx_lean_send, on NoCookieAsyncClient (no Set-Cookie handling)."""
    c = NoCookieAsyncClient(transport=LeanAiohttpTransport(), timeout=HTTPX_TIMEOUT)
    return await _run_httpx(c, _httpx_send_raw, url, concurrency, total_requests, chunks, warmup)


DRIVERS: dict[str, Callable[..., Awaitable[list[Record]]]] = {
    "aiohttp_raw": run_aiohttp,
    "httpx_default": run_httpx_default,
    "httpx_nolimit": run_httpx_nolimit,
    "httpx_nolimit_raw": run_httpx_nolimit_raw,
    "httpx_aiohttp_default": run_httpx_aiohttp_default,
    "httpx_aiohttp": run_httpx_aiohttp,
    "httpx_aiohttp_raw": run_httpx_aiohttp_raw,
    "httpx_aiohttp_send": run_httpx_aiohttp_send,
    "httpx_lean": run_httpx_lean,
    "httpx_lean_send": run_httpx_lean_send,
    "httpx_lean_send_nc": run_httpx_lean_send_nc,
}
BASELINE = "aiohttp_raw"


def run_driver(name: str) -> Callable[..., Awaitable[list[Record]]]:
    return DRIVERS[name]


__all__ = ["Record", "DRIVERS", "BASELINE", "run_driver", "make_body"] + [
    f.__name__ for f in DRIVERS.values()]
