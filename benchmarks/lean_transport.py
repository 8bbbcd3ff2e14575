"""A lean httpx transport over one aiohttp ClientSession (benchmark candidate).

Same idea as ``httpx_aiohttp.AiohttpTransport`` but trimmed for a load
generator: unlimited (or explicit) aiohttp pool, no cookie jar, cached
``ClientTimeout``/``yarl.URL`` objects, ``iter_any()`` body reads, exception
mapping once per request/stream instead of per chunk.  The httpx API
(``httpx.AsyncClient``, ``client.stream``, ``Response.aiter_raw``) is unchanged.
"""

from __future__ import annotations

import asyncio
import typing

import aiohttp
import httpx
from yarl import URL as YURL


def _map_exc(exc: BaseException) -> httpx.TransportError | None:
    if isinstance(exc, (aiohttp.ServerTimeoutError, aiohttp.SocketTimeoutError)):
        return httpx.ReadTimeout(str(exc))
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(str(exc))
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(exc))
    if isinstance(exc, aiohttp.ClientPayloadError):
        return httpx.ReadError(str(exc))
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        return httpx.RemoteProtocolError(str(exc))
    if isinstance(exc, aiohttp.ClientError):
        return httpx.TransportError(str(exc))
    if isinstance(exc, asyncio.TimeoutError):
        return httpx.TimeoutException(str(exc))
    return None


class _Body(httpx.AsyncByteStream):
    __slots__ = ("_resp",)

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp

    async def __aiter__(self) -> typing.AsyncIterator[bytes]:
        it = self._resp.content.iter_any().__aiter__()
        while True:
            try:
                chunk = await it.__anext__()
            except StopAsyncIteration:
                return
            except Exception as e:
                m = _map_exc(e)
                if m is None:
                    raise
                raise m from e
            yield chunk

    async def aclose(self) -> None:
        # release() returns the connection to the pool if the body was fully
        # read, and closes it otherwise (aiohttp checks should_close).
        self._resp.release()


class LeanAiohttpTransport(httpx.AsyncBaseTransport):
    def __init__(self, *, limit: int = 0, limit_per_host: int = 0,
                 keepalive_expiry: float = 60.0,
                 session_factory: typing.Callable[[], aiohttp.ClientSession] | None = None) -> None:
        self._limit = limit
        self._limit_per_host = limit_per_host
        self._keepalive = keepalive_expiry
        self._factory = session_factory
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple, aiohttp.ClientTimeout] = {}
        self._urls: dict[str, YURL] = {}

    def _make_session(self) -> aiohttp.ClientSession:
        # Must run inside the event loop -> created lazily on first request.
        if self._factory is not None:
            return self._factory()
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._limit, limit_per_host=self._limit_per_host,
                                           keepalive_timeout=self._keepalive),
            cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None))

    def _timeout(self, t: dict | None) -> aiohttp.ClientTimeout:
        key = (t.get("connect"), t.get("read"), t.get("pool")) if t else (None, None, None)
        ct = self._timeouts.get(key)
        if ct is None:
            ct = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None, sock_connect=key[0], sock_read=key[1], connect=key[2])
        return ct

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        s = self._session
        if s is None:
            s = self._session = self._make_session()
        su = str(request.url)
        url = self._urls.get(su)
        if url is None:
            url = YURL(su, encoded=True)
            if len(self._urls) < 1024:
                self._urls[su] = url
        headers = request.headers.multi_items()
        try:
            data: typing.Any = request.content or None
        except httpx.RequestNotRead:  # streaming upload: aiohttp does the chunking
            data = request.stream
            headers = [kv for kv in headers if kv[0].lower() != "transfer-encoding"]
        try:
            resp = await s.request(
                request.method, url, data=data, headers=headers, allow_redirects=False,
                auto_decompress=False, compress=False,
                timeout=self._timeout(request.extensions.get("timeout")),
                server_hostname=request.extensions.get("sni_hostname"))
        except Exception as e:
            m = _map_exc(e)
            if m is None:
                raise
            raise m from e
        ext: dict[str, typing.Any] = {"http_version": b"HTTP/1.1"}
        if resp.reason:
            ext["reason_phrase"] = resp.reason.encode()
        return httpx.Response(resp.status, headers=resp.raw_headers, stream=_Body(resp),
                              extensions=ext)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
