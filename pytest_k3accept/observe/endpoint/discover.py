"""Discovery of a live OpenAI-compatible (vLLM) deployment, as plain data.

:func:`discover` asks ``/v1/models`` and ``/version`` once and returns an :class:`Endpoint`:
base URL, served model name, model root, ``max_model_len`` and vLLM version. Every failure is
an :class:`EndpointError` whose message says what happened, where, and what to do; the API key
is sent but never appears in a message. Answers are untrusted: bodies are read up to 8 MiB,
excerpts in messages are cleaned (:mod:`pytest_k3accept.observe.endpoint.untrusted`). ``discover(..., wait=S)``
retries for up to S seconds while the server refuses connections or answers 502/503/504.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from . import untrusted as U
from .auth import auth_headers

if TYPE_CHECKING:  # pragma: no cover
    import httpx

    from .client import K3Client


class EndpointError(Exception):
    """The endpoint could not be used; ``kind`` is a short machine-readable cause."""

    def __init__(self, message: str, kind: str = "endpoint") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Endpoint:
    """A discovered deployment. Plain, serializable data plus a client factory.

    Use :meth:`client` inside an async test to talk to it::

        async with k3_endpoint.client() as client:
            result = await client.chat([{"role": "user", "content": "hi"}])
    """

    base_url: str
    model: str
    root: str | None = None
    max_model_len: int | None = None
    version: str | None = None
    served_models: tuple[str, ...] = ()
    api_key_env: str = "K3ACCEPT_API_KEY"
    timeout: float = 60.0
    _api_key: str | None = field(default=None, repr=False, compare=False)

    @property
    def is_vllm(self) -> bool:
        """True when ``/version`` answered like vLLM does."""
        return self.version is not None

    def client(self, *, timeout: float | None = None, max_connections: int | None = None,
               deadline: float | None = None) -> "K3Client":
        """A new async client for this endpoint (use one per test / event loop).

        ``timeout``: longest silence while connecting or between reads (default: the
        session's ``--k3-timeout``); ``deadline``: bound on a whole request (default
        ``max(600, 10 * timeout)`` s).
        """
        from .client import K3Client

        return K3Client(self.base_url, self.model, api_key=self._api_key,
                        timeout=self.timeout if timeout is None else timeout,
                        max_connections=max_connections, deadline=deadline)

    def as_dict(self) -> dict[str, Any]:
        """Serializable view without the key."""
        data = asdict(self)
        data.pop("_api_key", None)
        data["served_models"] = list(self.served_models)
        return data


def _describe(exc: Exception, timeout: float) -> str:
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None}
    if "ConnectError" in names or isinstance(exc, ConnectionError):
        return "connection refused or host unreachable"
    if any("Timeout" in n for n in names) or isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    text = " ".join(str(exc).split())
    return U.clean(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 300)


#: the most of a discovery answer (/v1/models, /version) that is read
MAX_DISCOVERY_BODY = 8 * 1024 * 1024


def _get(client: "httpx.Client", url: str, timeout: float) -> tuple[int, bytes]:
    """GET ``url``: (status, body up to :data:`MAX_DISCOVERY_BODY` bytes)."""
    try:
        with client.stream("GET", url) as resp:
            body = b""
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > MAX_DISCOVERY_BODY:
                    raise EndpointError(
                        f"{url} answered with more than {MAX_DISCOVERY_BODY // 2**20} MiB; "
                        "this is not an OpenAI-compatible server answer (wrong URL?)",
                        kind="protocol")
            return resp.status_code, body
    except EndpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - any transport failure gets the same message
        raise EndpointError(
            f"cannot reach {url}: {_describe(exc, timeout)}. Is the server started and the URL "
            "right? (vLLM refuses connections until its engine is ready; with --k3-launch the "
            "plugin waits for it)", kind="unreachable") from None


def _models(base_url: str, status: int, raw: bytes, api_key: str | None,
            api_key_env: str) -> list[dict[str, Any]]:
    """The entries of a ``/v1/models`` answer, or an :class:`EndpointError` saying why not."""
    url = f"{base_url}/v1/models"
    excerpt = U.clean(U.decode(raw[:200]), 200)
    if status in (401, 403):
        has = "was rejected" if api_key else "is missing"
        raise EndpointError(
            f"{url} answered HTTP {status}: the API key {has}. Put the key in the environment "
            f"variable {api_key_env} (or name another variable with --k3-api-key-env)",
            kind="auth")
    if status in (502, 503, 504):
        raise EndpointError(
            f"{url} answered HTTP {status} ({excerpt!r}): the server, or a proxy in front of "
            "it, is up but not ready (still starting, or its engine is down); check its "
            "/health and log", kind="unready")
    if status != 200:
        raise EndpointError(
            f"{url} answered HTTP {status} ({excerpt!r}); expected an OpenAI-compatible model "
            "list: is the URL the server's base URL (http://host:port, without /v1)?",
            kind="protocol")
    payload = U.parse_json(raw)
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or not all(
            isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
        raise EndpointError(f"{url} did not return an OpenAI model list "
                            f'({{"data": [{{"id": ...}}]}}): {excerpt!r}', kind="protocol")
    if not data:
        raise EndpointError(f"{base_url} serves no model (its /v1/models list is empty)",
                            kind="model")
    return data


def _version(http: "httpx.Client", base_url: str, timeout: float) -> str | None:
    """vLLM's ``/version``, or None for servers without it (not vLLM)."""
    try:
        status, raw = _get(http, f"{base_url}/version", timeout)
    except EndpointError:
        return None
    payload = U.parse_json(raw) if status == 200 else None
    version = payload.get("version") if isinstance(payload, dict) else None
    return U.clean(version, 100) if isinstance(version, str) and version else None


def _discover_once(base_url: str, model: str | None, api_key: str | None, api_key_env: str,
                   timeout: float) -> Endpoint:
    import httpx

    with httpx.Client(headers=auth_headers(api_key), timeout=timeout) as http:
        status, raw = _get(http, f"{base_url}/v1/models", timeout)
        data = _models(base_url, status, raw, api_key, api_key_env)
        served = [str(m["id"]) for m in data]
        name = model or served[0]
        if name not in served:
            shown = served[:20] + ([f"... {len(served) - 20} more"] if len(served) > 20 else [])
            raise EndpointError(f"model {U.clean(name, 200)!r} is not served at {base_url}; it "
                                f"serves {U.clean(shown, 2000)}. Fix --k3-model (or drop it to "
                                "use the first)", kind="model")
        entry = data[served.index(name)]
        version = _version(http, base_url, timeout)
    max_len = entry.get("max_model_len")
    root = entry.get("root")
    return Endpoint(base_url=base_url, model=name,
                    root=U.clean(root, 1000) if isinstance(root, str) else None,
                    max_model_len=max_len if isinstance(max_len, int) and not isinstance(
                        max_len, bool) and max_len > 0 else None,
                    version=version, served_models=tuple(served), api_key_env=api_key_env,
                    timeout=timeout, _api_key=api_key)


def discover(base_url: str, *, model: str | None = None, api_key: str | None = None,
             api_key_env: str = "K3ACCEPT_API_KEY", timeout: float = 10.0,
             wait: float = 0.0) -> Endpoint:
    """Ask the server what it serves; raise :class:`EndpointError` with a specific message.

    ``wait`` > 0 keeps retrying for up to that many seconds while the server refuses
    connections or answers 502/503/504 (a server still starting), then raises with the time
    waited. Other failures (key, model, protocol) are raised at once.
    """
    t0 = time.monotonic()
    while True:
        try:
            return _discover_once(base_url, model, api_key, api_key_env, timeout)
        except EndpointError as exc:
            waited = time.monotonic() - t0
            if exc.kind not in ("unreachable", "unready") or wait <= 0:
                raise
            if waited >= wait:
                raise EndpointError(f"{base_url} was not ready after waiting {waited:.1f} s "
                                    f"(limit {wait:g} s); last attempt: {exc}",
                                    kind=exc.kind) from None
            time.sleep(min(1.0, max(0.05, wait - waited)))
