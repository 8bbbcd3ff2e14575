"""Request faults as data: which class a transport exception is, and the message a user sees.

``classify_exception`` sorts an exception raised while talking to a server into the client's
error classes (``timeout``, ``connection``, ``protocol``); ``describe_exception`` words it:
what happened to which URL, what had been received, what to do. Used by
:class:`~pytest_k3accept.observe.endpoint.client.K3Client`; kept apart so the rules are testable alone.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import httpx

from . import untrusted as U

if TYPE_CHECKING:  # pragma: no cover
    from .client import RequestResult


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < 8:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def classify_exception(exc: BaseException) -> str:
    """``timeout``, ``connection`` or ``protocol`` for an exception raised by a request.

    httpx_aiohttp maps every aiohttp connection error to ``httpx.ConnectTimeout``, so the
    aiohttp cause decides: timeouts are timeouts, refused/reset/dropped connections and
    incomplete bodies are ``connection``, anything else (unparsable HTTP) is ``protocol``.
    """
    chain = _chain(exc)
    root = chain[-1] if len(chain) > 1 else exc
    names = {type(e).__name__ for e in chain}
    if isinstance(root, TimeoutError) or "ServerTimeoutError" in names or (
            root is exc and isinstance(exc, httpx.TimeoutException)):
        return "timeout"
    if isinstance(root, (OSError, ConnectionError)) or names & {
            "ClientConnectorError", "ServerDisconnectedError", "ClientOSError",
            "ClientPayloadError", "ClientConnectionError", "ClientConnectionResetError",
            "ServerConnectionError", "RemoteProtocolError", "ReadError", "ConnectError",
            "WriteError", "CloseError"}:
        return "connection"
    return "protocol"


#: a stream through a proxy cut after this long without a token: the proxy's idle timeout
PROXY_IDLE_S = 1.0


def describe_exception(exc: BaseException, kind: str, res: "RequestResult", url: str,
                       timeout: float, silence: float | None = None) -> str:
    """A specific message: what happened to which request, what was received, what to do.
    ``silence``: seconds since the stream's last token when it failed (None: no token)."""
    chain = _chain(exc)
    root = chain[-1]
    text = " ".join(str(root).split())
    detail = U.clean(f"{type(root).__name__}: {text}" if text else type(root).__name__, 300)
    got = ""
    if res.status is not None:
        got = (f" after HTTP {res.status} and {res.chunks} stream chunks" if res.stream
               else f" after HTTP {res.status}, in the middle of the body")
        got += " (partial output kept)" if res.chunks else ""
    if kind == "timeout":
        if res.status is None:
            return (f"no answer from {url} within {timeout:g} s ({detail}); the server is "
                    "overloaded, stalled or unreachable; raise --k3-timeout if it is just slow")
        return (f"the server sent nothing for {timeout:g} s{got} ({detail}): the stream "
                "stalled; raise --k3-timeout if generation is this slow"
                + proxy_cut(res.proxy))
    if kind == "connection":
        if res.proxy and res.status == 200 and silence is not None and silence >= PROXY_IDLE_S:
            return (f"the proxy {res.proxy} in front of {url} cut the stream{got}, "
                    f"{silence:.1f} s after its last token ({detail}), not vLLM: a proxy ends "
                    "a stream that sends nothing for its read timeout (nginx: "
                    "proxy_read_timeout, default 60 s); the server behind it stopped sending "
                    "(a stalled or frozen engine, a long pause): raise the proxy's timeout, "
                    "or check the server")
        if res.status is None:
            return (f"cannot connect to {url}, or it closed the connection before answering "
                    f"({detail}): the server is down, restarting or not listening there")
        return (f"the connection to {url} was lost{got} ({detail}): did the server process "
                "stop or crash? check its log" + proxy_cut(res.proxy))
    return f"unexpected response from {url}{got}: {detail}"


#: ``Server`` header values that are the model server itself, not a proxy in front of it
_SERVERS = ("uvicorn", "hypercorn", "vllm", "granian", "gunicorn", "python", "basehttp",
            "aiohttp", "werkzeug", "tornado", "daphne", "sglang", "tgi", "text-generation")
#: proxies that name themselves in their error pages when they send no ``Server`` header
_PAGE_NAMES = ("nginx", "openresty", "envoy", "haproxy", "traefik", "cloudflare", "apache",
               "istio", "kong", "caddy", "squid", "varnish")


def proxy_of(headers: Any, body: str = "") -> str | None:
    """The proxy that answered, from the ``Server`` / ``Via`` header or an error page's body
    (``nginx/1.22.1``, ``envoy``); None when the answer came from the model server itself."""
    server = U.clean(str(headers.get("server") or ""), 80)
    if server and not server.lower().startswith(_SERVERS):
        return server
    via = U.clean(str(headers.get("via") or ""), 80)
    if via:
        return f"via {via}"
    low = body[:2000].lower()
    if body.lstrip().startswith("{"):
        return None  # a JSON error: vLLM's own (or an OpenAI-compatible server's)
    for name in _PAGE_NAMES:
        if name in low:
            match = re.search(rf"{name}(/[0-9][0-9.]*)?", low)
            return match.group(0) if match else name
    if not server and ("bad gateway" in low or "gateway time" in low):
        return "a proxy (unnamed)"
    return None


def describe_proxy_answer(status: int, proxy: str, url: str) -> str:
    """A proxy's own 502/503/504 (or other 5xx) answer, worded apart from vLLM's errors."""
    head = f"HTTP {status} from the proxy {proxy} in front of {url}, not from vLLM: "
    if status == 502:
        return head + ("the proxy could not get an answer from the server (server down, "
                       "restarting or crashed, or the proxy's upstream address is wrong); "
                       "check the server, then the proxy's upstream")
    if status == 504:
        return head + ("the server did not answer within the proxy's read timeout (nginx: "
                       "proxy_read_timeout, default 60 s); raise it for long generations, "
                       "or check whether the server is stalled")
    if status == 503:
        return head + "the proxy has no healthy server to send the request to"
    return head + "the proxy failed the request itself; check the proxy's log"


def proxy_cut(proxy: str | None) -> str:
    """What to add to a lost or stalled stream's message when it came through a proxy."""
    if not proxy:
        return ""
    return (f" [through the proxy {proxy}: it may have cut an idle stream at its read timeout "
            "(nginx: proxy_read_timeout), or the server behind it stopped]")
