"""The measuring client's transport: the httpx API over one lean aiohttp session.

Why not ``httpx_aiohttp.AiohttpTransport``: measured side by side on a streaming stub
(``benchmarks/run.py``, docs/benchmarks.md) it costs ~2.7x raw aiohttp's CPU per request and
its default pool silently caps at 100 connections, so 512 streams queue inside the client and
show up as TTFT. This transport keeps what a load generator needs and drops the rest:

* one ``aiohttp.ClientSession`` per transport, made lazily inside the running loop, with
  ``TCPConnector(limit=0)`` (unlimited) unless a pool size is given, idle connections
  reused for :data:`KEEPALIVE_S` (below the server's keep-alive), no cookie jar
  (``DummyCookieJar``) and no decompression (the bytes go to httpx as they came; httpx
  decodes ``Content-Encoding`` in ``aiter_bytes``; ``aiter_raw`` callers send
  ``accept-encoding: identity``);
* ``aiohttp.ClientTimeout`` and ``yarl.URL`` objects cached, bodies read with ``iter_any``;
* a request body of :data:`SEPARATE_BODY` bytes or more is written after its headers, from
  its own ``bytes`` object (:func:`separate_body`): aiohttp otherwise joins headers and body
  into one new buffer before the send, a copy of the whole body per request (512 KiB for a
  128K-token prompt, 4 MiB for 1M); a shorter body still goes out with its headers in one
  write;
* aiohttp exceptions mapped once to httpx ones, the aiohttp error kept as ``__cause__``:
  connect timeout -> ``httpx.ConnectTimeout``, refused/unreachable -> ``httpx.ConnectError``,
  read timeout -> ``httpx.ReadTimeout``, truncated body -> ``httpx.ReadError``, dropped
  connection -> ``httpx.RemoteProtocolError``. :func:`pytest_k3accept.observe.endpoint.faults.classify_exception`
  reads that chain.

:class:`PostStream` is the hot path's request. When the client has no auth, event hooks or
proxy mounts it goes straight to this transport's aiohttp session, with no httpx ``Request``
or ``Response`` object (:meth:`LeanAiohttpTransport.post_direct`: the URL, headers and
timeouts are worked out once per client and path, the body encoded by
:func:`bodies.encode_body`, a long prompt once per run) and the answer is a
:class:`DirectResponse`; otherwise it is a pre-built ``httpx.Request`` sent with
``client.send(stream=True)``. Either way it is closed on exit. The two httpx objects and their
header normalisation were ~35 us of client CPU per streamed request (py-spy at 8K tokens x 64
streams, docs/benchmarks.md), a third of the runner's cost over raw aiohttp's there.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, AsyncIterator, Mapping

import httpx

from pytest_k3accept.observe.endpoint.bodies import encode_body

if TYPE_CHECKING:  # pragma: no cover
    import aiohttp
    from yarl import URL

#: seconds an idle pooled connection is reused for, by every client of the plugin (this
#: transport, and the httpx clients through :func:`httpx_limits`). It must stay below the
#: server's own keep-alive timeout: uvicorn (vLLM's API server, SGLang) closes a connection
#: idle for 5 s (vLLM's ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``), and a request sent on it as it
#: closes fails with ``ServerDisconnectedError`` before any answer: an error of the client,
#: not of the server, yet counted as a ``connection`` error of the run. Measured against the
#: 0.32 testbed with aiohttp's former 60 s expiry: 2 of 42 requests sent 4.98-5.02 s after
#: the previous one on the same connection failed that way; with 4 s none can, because
#: aiohttp (and httpcore) check the expiry when they take a connection from the pool. A
#: server with a keep-alive below 4 s (uvicorn ``--timeout-keep-alive 2``) still races
#: this; :data:`KEEPALIVE_ENV` sets a lower value.
KEEPALIVE_S = 4.0
KEEPALIVE_ENV = "K3ACCEPT_KEEPALIVE_S"


def keepalive_s() -> float:
    """:data:`KEEPALIVE_S`, or ``$K3ACCEPT_KEEPALIVE_S`` when that is a number >= 0 (0: no
    connection is reused)."""
    import os

    raw = os.environ.get(KEEPALIVE_ENV, "").strip()
    try:
        value = float(raw) if raw else KEEPALIVE_S
    except ValueError:
        return KEEPALIVE_S
    return value if value >= 0 and value == value else KEEPALIVE_S


def httpx_limits() -> httpx.Limits:
    """httpx pool limits with :func:`keepalive_s` as the idle expiry (httpx's default,
    5 s, equals uvicorn's keep-alive and races it)."""
    return httpx.Limits(max_connections=100, max_keepalive_connections=20,
                        keepalive_expiry=keepalive_s())


#: headers the hot path sets itself (the client's own values for them are dropped)
_OWN = frozenset({"content-type", "content-length", "accept-encoding"})
#: bodies this long (bytes) are written after their headers instead of joined to them. The
#: join copies the body: ~100 us of client CPU per request at 512 KiB (a 128K-token prompt,
#: measured against the benchmark stub); the extra small write costs a few us and wakes the
#: server once more, which gained nothing at 128 KiB (32K tokens)
SEPARATE_BODY = 256 * 1024
_separate_type: Any = None


def _send_headers(writer: Any) -> None:
    """Send the writer's buffered status line and headers on their own (aiohttp 3.12+ buffers
    them to join them to the body; an older aiohttp has already written them)."""
    send = getattr(writer, "send_headers", None)
    if send is not None:
        send()


def separate_body(data: bytes) -> Any:
    """``data`` as the aiohttp payload it would get (a ``BytesPayload``: same size, headers
    and bytes on the wire) that sends the request's headers on their own before it, then
    writes ``data`` itself, so aiohttp does not copy headers and body into one buffer."""
    global _separate_type
    cls = _separate_type
    if cls is None:
        from aiohttp import payload

        class SeparateBody(payload.BytesPayload):
            """A ``BytesPayload`` written after its request's headers, never joined to them."""

            async def write_with_length(self, writer: Any, content_length: int | None,
                                        ) -> None:
                _send_headers(writer)
                await super().write_with_length(writer, content_length)

            async def write(self, writer: Any) -> None:
                _send_headers(writer)
                await super().write(writer)

        cls = _separate_type = SeparateBody
    return cls(data)


def map_exception(exc: BaseException) -> httpx.TransportError | None:
    """The httpx exception for an aiohttp/asyncio one raised while sending or reading
    (None: not a transport error, re-raise as is)."""
    import aiohttp

    text = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(text)
    if isinstance(exc, aiohttp.ServerTimeoutError):  # incl. SocketTimeoutError (sock_read)
        return httpx.ReadTimeout(text)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(text)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return httpx.ReadError(text)
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        return httpx.RemoteProtocolError(text)
    if isinstance(exc, aiohttp.ClientResponseError):  # unparsable status line/headers
        return httpx.RemoteProtocolError(text)
    if isinstance(exc, aiohttp.ClientError):
        return httpx.TransportError(text)
    if isinstance(exc, asyncio.TimeoutError):
        return httpx.ReadTimeout(text)
    return None


class _Body(httpx.AsyncByteStream):
    """An aiohttp response body as an httpx byte stream (raw bytes, mapped errors)."""

    __slots__ = ("_resp",)

    def __init__(self, resp: "aiohttp.ClientResponse") -> None:
        self._resp = resp

    async def __aiter__(self) -> AsyncIterator[bytes]:
        it = self._resp.content.iter_any().__aiter__()
        while True:
            try:
                chunk = await it.__anext__()
            except StopAsyncIteration:
                return
            except Exception as exc:
                mapped = map_exception(exc)
                if mapped is None:
                    raise
                raise mapped from exc
            yield chunk

    async def aclose(self) -> None:
        # back to the pool when fully read, else the connection is closed (aiohttp decides)
        self._resp.release()


class DirectResponse:
    """An answer the hot path got straight from aiohttp (:meth:`LeanAiohttpTransport.post_direct`),
    with the part of ``httpx.Response``'s interface the client reads: ``status_code``,
    ``headers`` (aiohttp's case-insensitive multidict: ``.get("server")``), ``stream`` (the
    raw body, see :func:`raw_chunks`), :meth:`aiter_bytes` and :meth:`aclose`."""

    __slots__ = ("status_code", "headers", "stream", "_resp")

    def __init__(self, resp: "aiohttp.ClientResponse") -> None:
        self._resp = resp
        self.status_code = resp.status
        self.headers = resp.headers
        self.stream = _Body(resp)

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body decoded as httpx decodes it: as sent when it has no ``Content-Encoding``
        (the hot path asks for ``identity``), else through an ``httpx.Response`` (gzip,
        deflate, br ... from a proxy that compresses anyway)."""
        coding = self.headers.get("content-encoding", "").strip().lower()
        if coding in ("", "identity"):
            return self.stream.__aiter__()
        return httpx.Response(self.status_code, headers=self._resp.raw_headers,
                              stream=self.stream).aiter_bytes()

    async def aclose(self) -> None:
        """Back to the pool when fully read, else the connection is closed."""
        self._resp.release()


def raw_chunks(resp: httpx.Response | DirectResponse) -> AsyncIterator[bytes]:
    """The body's bytes as they arrive, undecoded: straight from this transport's stream
    when the response came from it (one generator layer less per chunk), else
    ``resp.aiter_raw()``."""
    stream = resp.stream
    if isinstance(stream, _Body):
        return stream.__aiter__()
    assert isinstance(resp, httpx.Response)
    return resp.aiter_raw()


class LeanAiohttpTransport(httpx.AsyncBaseTransport):
    """httpx transport over one aiohttp session; ``limit`` = pool size (0: unlimited)."""

    def __init__(self, *, limit: int = 0, keepalive_expiry: float | None = None) -> None:
        self._limit = max(0, int(limit))
        self._keepalive = keepalive_s() if keepalive_expiry is None else keepalive_expiry
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[Any, Any, Any], aiohttp.ClientTimeout] = {}
        self._urls: dict[str, URL] = {}
        #: path -> (the client's raw headers, its Timeout and base URL objects, then the
        #: parts post_direct sends): valid while those three are unchanged
        self._direct: dict[str, tuple[Any, ...]] = {}

    def _make_session(self) -> "aiohttp.ClientSession":
        import aiohttp

        pool: dict[str, Any] = ({"force_close": True} if self._keepalive <= 0
                                else {"keepalive_timeout": self._keepalive})
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._limit, limit_per_host=0, **pool),
            cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None))

    def _timeout(self, spec: Mapping[str, Any] | None) -> "aiohttp.ClientTimeout":
        key = (spec.get("connect"), spec.get("read"), spec.get("pool")) if spec else (
            None, None, None)
        cached = self._timeouts.get(key)
        if cached is None:
            import aiohttp

            connect = None if key[0] is None or key[2] is None else key[0] + key[2]
            cached = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None, sock_connect=key[0], sock_read=key[1], connect=connect)
        return cached

    def _url(self, url: httpx.URL) -> "URL":
        text = str(url)
        found = self._urls.get(text)
        if found is None:
            from yarl import URL

            found = URL(text, encoded=True)
            if len(self._urls) < 1024:
                self._urls[text] = found
        return found

    def direct_parts(self, client: httpx.AsyncClient, path: str,
                     ) -> tuple["URL", list[tuple[str, str]], "aiohttp.ClientTimeout"]:
        """The URL, headers and timeouts :meth:`post_direct` sends a JSON POST to ``path``
        with: those ``client.stream("POST", path, json=...)`` would send, plus
        ``accept-encoding: identity``. Cached per path while the client's headers, timeout
        and base URL stay the same objects and values."""
        raw, timeout, base = client.headers.raw, client.timeout, client.base_url
        hit = self._direct.get(path)
        if hit is not None and hit[1] is timeout and hit[2] is base and hit[0] == raw:
            return hit[3], hit[4], hit[5]
        headers = [kv for kv in client.headers.multi_items() if kv[0] not in _OWN]
        headers += [("content-type", "application/json"), ("accept-encoding", "identity")]
        merged = _merge(base, path)
        url = self._url(merged if isinstance(merged, httpx.URL) else httpx.URL(merged))
        parts = (url, headers, self._timeout(timeout.as_dict()))
        if len(self._direct) > 256:
            self._direct.clear()
        self._direct[path] = (raw, timeout, base, *parts)
        return parts

    async def post_direct(self, url: "URL", headers: list[tuple[str, str]], body: bytes,
                          timeout: "aiohttp.ClientTimeout") -> DirectResponse:
        """POST ``body`` on the aiohttp session (no httpx objects); errors mapped as for
        :meth:`handle_async_request`."""
        session = self._session
        if session is None or session.closed:
            session = self._session = self._make_session()
        data: Any = separate_body(body) if len(body) >= SEPARATE_BODY else body
        try:
            resp = await session.request(
                "POST", url, data=data or None, headers=headers, allow_redirects=False,
                auto_decompress=False, compress=None, timeout=timeout)
        except Exception as exc:
            mapped = map_exception(exc)
            if mapped is None:
                raise
            raise mapped from exc
        return DirectResponse(resp)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` on the aiohttp session; the body streams as it arrives."""
        session = self._session
        if session is None or session.closed:
            session = self._session = self._make_session()
        headers = request.headers.multi_items()
        data: Any
        try:
            data = request.content or None
            if data is not None and len(data) >= SEPARATE_BODY:
                data = separate_body(data)
        except httpx.RequestNotRead:  # streaming upload: aiohttp does the chunking
            data = request.stream
            headers = [kv for kv in headers if kv[0] != "transfer-encoding"]
        try:
            resp = await session.request(
                request.method, self._url(request.url), data=data, headers=headers,
                allow_redirects=False, auto_decompress=False, compress=None,
                timeout=self._timeout(request.extensions.get("timeout")),
                server_hostname=request.extensions.get("sni_hostname"))
        except Exception as exc:
            mapped = map_exception(exc)
            if mapped is None:
                raise
            raise mapped from exc
        ext: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if resp.reason:
            ext["reason_phrase"] = resp.reason.encode()
        return httpx.Response(resp.status, headers=resp.raw_headers, stream=_Body(resp),
                              extensions=ext)

    async def aclose(self) -> None:
        """Close the aiohttp session (and its connections)."""
        if self._session is not None:
            await self._session.close()
            self._session = None


_MERGED: dict[tuple[int, str], tuple[httpx.URL, httpx.URL | str]] = {}


def _merge(base: httpx.URL, path: str) -> httpx.URL | str:
    """``path`` under ``base`` the way ``httpx.AsyncClient`` merges it (base path kept);
    cached per base URL object (``URL.copy_with`` costs ~7 % of a streamed request)."""
    key = (id(base), path)
    hit = _MERGED.get(key)
    if hit is not None and hit[0] is base:
        return hit[1]
    if not base.raw_path or "://" in path:
        merged: httpx.URL | str = path
    else:
        merged = base.copy_with(
            raw_path=base.raw_path.rstrip(b"/") + b"/" + path.lstrip("/").encode())
    if len(_MERGED) > 256:
        _MERGED.clear()
    _MERGED[key] = (base, merged)
    return merged


class PostStream:
    """``async with PostStream(client, path, body) as resp``: POST ``body`` as JSON with
    ``accept-encoding: identity`` (so ``aiter_raw`` yields the body as sent), response
    streamed, closed on exit. Same headers, auth, base URL and timeouts as
    ``client.stream("POST", path, json=body)``, minus the per-request merging cost."""

    __slots__ = ("_client", "_path", "_body", "_resp")

    def __init__(self, client: httpx.AsyncClient, path: str, body: Any) -> None:
        self._client, self._path, self._body = client, path, body
        self._resp: httpx.Response | DirectResponse | None = None

    async def __aenter__(self) -> httpx.Response | DirectResponse:
        client = self._client
        transport = getattr(client, "_transport", None)
        resp: httpx.Response | DirectResponse
        if (isinstance(transport, LeanAiohttpTransport) and not getattr(client, "_mounts", 1)
                and client.auth is None and not any(client.event_hooks.values())):
            # Straight to the session: no auth, hooks, proxies or redirects to apply, and an
            # LLM API sets no cookies
            url, headers, timeout = transport.direct_parts(client, self._path)
            resp = await transport.post_direct(url, headers, encode_body(self._body), timeout)
        else:
            headers = [kv for kv in client.headers.multi_items() if kv[0] not in _OWN]
            headers += [("content-type", "application/json"), ("accept-encoding", "identity")]
            request = httpx.Request(
                "POST", _merge(client.base_url, self._path),
                content=encode_body(self._body), headers=headers,
                extensions={"timeout": client.timeout.as_dict()})
            resp = await client.send(request, stream=True)
        self._resp = resp
        return resp

    async def __aexit__(self, *exc: object) -> None:
        if self._resp is not None:
            await self._resp.aclose()
