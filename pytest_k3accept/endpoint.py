"""Discovery of a live OpenAI-compatible (vLLM) deployment, as plain data.

:func:`discover` asks ``/v1/models`` and ``/version`` once and returns an :class:`Endpoint`:
base URL, served model name, model root, ``max_model_len`` and vLLM version. Every failure is
an :class:`EndpointError` whose message says what happened, where, and what to do; the API key
is sent but never appears in a message.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import httpx

    from .client import K3Client


class EndpointError(Exception):
    """The endpoint could not be used; ``kind`` is a short machine-readable cause."""

    def __init__(self, message: str, kind: str = "endpoint") -> None:
        super().__init__(message)
        self.kind = kind


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The ``Authorization`` header for a key, or nothing."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


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
               ) -> "K3Client":
        """A new async client for this endpoint (use one per test / event loop)."""
        from .client import K3Client

        return K3Client(self.base_url, self.model, api_key=self._api_key,
                        timeout=self.timeout if timeout is None else timeout,
                        max_connections=max_connections)

    def as_dict(self) -> dict[str, Any]:
        """Serializable view without the key."""
        data = asdict(self)
        data.pop("_api_key", None)
        data["served_models"] = list(self.served_models)
        return data


def _describe(exc: Exception) -> str:
    import httpx

    if isinstance(exc, httpx.ConnectError):
        return "connection refused or host unreachable"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"


def _get(client: "httpx.Client", url: str) -> "httpx.Response":
    import httpx

    try:
        return client.get(url)
    except httpx.HTTPError as exc:
        raise EndpointError(
            f"cannot reach {url}: {_describe(exc)}. Is the server started and the URL right? "
            "(vLLM refuses connections until its engine is ready; with --k3-launch the plugin "
            "waits for it)", kind="unreachable") from None


def discover(base_url: str, *, model: str | None = None, api_key: str | None = None,
             api_key_env: str = "K3ACCEPT_API_KEY", timeout: float = 10.0) -> Endpoint:
    """Ask the server what it serves; raise :class:`EndpointError` with a specific message."""
    import httpx

    with httpx.Client(headers=auth_headers(api_key), timeout=timeout) as http:
        resp = _get(http, f"{base_url}/v1/models")
        if resp.status_code in (401, 403):
            has = "was rejected" if api_key else "is missing"
            raise EndpointError(
                f"{base_url}/v1/models answered HTTP {resp.status_code}: the API key {has}. "
                f"Put the key in the environment variable {api_key_env} (or name another "
                "variable with --k3-api-key-env)", kind="auth")
        if resp.status_code != 200:
            raise EndpointError(
                f"{base_url}/v1/models answered HTTP {resp.status_code} "
                f"({resp.text[:200]!r}); expected an OpenAI-compatible model list",
                kind="protocol")
        try:
            data = resp.json()["data"]
            served = [m["id"] for m in data]
        except (ValueError, KeyError, TypeError):
            raise EndpointError(f"{base_url}/v1/models did not return an OpenAI model list: "
                                f"{resp.text[:200]!r}", kind="protocol") from None
        if not served:
            raise EndpointError(f"{base_url} serves no model", kind="model")
        name = model or served[0]
        if name not in served:
            raise EndpointError(f"model {name!r} is not served at {base_url}; it serves "
                                f"{served}. Fix --k3-model (or drop it to use the first)",
                                kind="model")
        entry = data[served.index(name)]
        version = None
        try:
            vresp = http.get(f"{base_url}/version")
            if vresp.status_code == 200:
                version = str(vresp.json().get("version")) or None
        except (httpx.HTTPError, ValueError, AttributeError):
            version = None
    max_len = entry.get("max_model_len")
    return Endpoint(base_url=base_url, model=name, root=entry.get("root"),
                    max_model_len=int(max_len) if isinstance(max_len, int) else None,
                    version=version, served_models=tuple(served), api_key_env=api_key_env,
                    timeout=timeout, _api_key=api_key)
