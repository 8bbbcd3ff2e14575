"""Request faults as data: which class a transport exception is, and the message a user sees.

``classify_exception`` sorts an exception raised while talking to a server into the client's
error classes (``timeout``, ``connection``, ``protocol``); ``describe_exception`` words it:
what happened to which URL, what had been received, what to do. Used by
:class:`~pytest_k3accept.observe.endpoint.client.K3Client`; kept apart so the rules are testable alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


def describe_exception(exc: BaseException, kind: str, res: "RequestResult", url: str,
                       timeout: float) -> str:
    """A specific message: what happened to which request, what was received, what to do."""
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
                "stalled; raise --k3-timeout if generation is this slow")
    if kind == "connection":
        if res.status is None:
            return (f"cannot connect to {url}, or it closed the connection before answering "
                    f"({detail}): the server is down, restarting or not listening there")
        return (f"the connection to {url} was lost{got} ({detail}): did the server process "
                "stop or crash? check its log")
    return f"unexpected response from {url}{got}: {detail}"
