"""``/metrics`` over HTTP: :class:`MetricsScraper` (sync and async, bounded reads)."""

from __future__ import annotations

from typing import Any, Mapping

from .exposition import is_openmetrics
from .gauges import fold_gauges, scan_engine_gauges
from .snapshot import Snapshot

#: the most of a ``/metrics`` page that is read (vLLM's is ~100 KiB)
MAX_METRICS_BODY = 32 * 1024 * 1024


class MetricsUnavailable(Exception):
    """The server has no (vLLM) metrics; features that need them are not available."""


class MetricsScraper:
    """Scrapes ``{base_url}/metrics``; sync and async variants share the parsing.

    Synchronous reads go through one ``httpx.Client`` kept by the scraper (made on first
    use): a new client per read builds an SSL context each time, ~30 ms of CPU that made a
    0.5 s gauge sampler cost 7 % of a core. :meth:`close` releases it (also on garbage
    collection); the scraper can be used again after it.
    """

    def __init__(self, base_url: str, *, headers: Mapping[str, str] | None = None,
                 timeout: float = 10.0) -> None:
        self.url = f"{base_url.rstrip('/')}/metrics"
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._http: Any = None

    def close(self) -> None:
        """Close the kept synchronous client, if one was made."""
        http, self._http = self._http, None
        if http is not None:
            http.close()

    def __enter__(self) -> "MetricsScraper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, status: int, text: str, content_type: str | None = None) -> Snapshot:
        if status == 404:
            raise MetricsUnavailable(f"{self.url} answered 404: not available from this "
                                     "server (not vLLM, or metrics disabled)")
        if status in (401, 403):
            raise MetricsUnavailable(f"{self.url} answered HTTP {status}: the metrics need "
                                     "an API key the plugin does not have or that was "
                                     "rejected; not available from this server with this key")
        if status != 200:
            raise MetricsUnavailable(f"{self.url} answered HTTP {status}: not available "
                                     "from this server right now (is it healthy?)")
        if len(text) > MAX_METRICS_BODY:
            raise MetricsUnavailable(f"{self.url} returned more than "
                                     f"{MAX_METRICS_BODY // 2**20} MiB; not a vLLM metrics "
                                     "page, not read")
        try:
            snap = Snapshot.parse(text, content_type=content_type)
        except ValueError as exc:
            kind = ("OpenMetrics" if is_openmetrics(text, content_type)
                    else "Prometheus exposition format")
            raise MetricsUnavailable(f"{self.url} returned text that is not {kind}: "
                                     f"{exc}") from None
        if not snap.has_vllm:
            raise MetricsUnavailable(f"{self.url} exposes no vLLM engine statistics (no vllm: "
                                     "series such as vllm:num_requests_running): not "
                                     "available from this server (started with "
                                     "--disable-log-stats, or not a vLLM server)")
        return snap

    def _fetch(self) -> tuple[int, str, str | None]:
        """Status, text and content type of one GET, read up to just past
        :data:`MAX_METRICS_BODY`."""
        http = self._http
        if http is None:
            import httpx
            from ..endpoint.transport import httpx_limits

            http = self._http = httpx.Client(headers=self.headers, timeout=self.timeout,
                                             limits=httpx_limits())
        with http.stream("GET", self.url) as resp:
            raw = bytearray()  # appended in place: += on bytes copies the page each chunk
            for chunk in resp.iter_bytes():
                raw += chunk
                if len(raw) > MAX_METRICS_BODY:
                    break
        return (resp.status_code, raw.decode("utf-8", "replace"),
                resp.headers.get("content-type"))

    def scrape(self) -> Snapshot:
        """One synchronous scrape."""
        try:
            status, text, ctype = self._fetch()
        except Exception as exc:  # noqa: BLE001 - any transport failure: not available
            raise MetricsUnavailable(self._unreachable(exc)) from None
        return self._check(status, text, ctype)

    def engine_gauges(self) -> dict[str, dict[str, float]]:
        """One cheap synchronous sample of :data:`GAUGES` per engine (line scan, no full
        parse); empty when the page cannot be read or holds none of them."""
        try:
            status, text, _ = self._fetch()
        except Exception:  # noqa: BLE001 - a sample may fail under load
            return {}
        if status != 200 or len(text) > MAX_METRICS_BODY:
            return {}
        return scan_engine_gauges(text)

    def gauges(self) -> dict[str, float]:
        """:meth:`engine_gauges` folded over engines (KV usage: the fullest engine)."""
        return fold_gauges(self.engine_gauges())

    def _unreachable(self, exc: Exception) -> str:
        name = type(exc).__name__
        why = ("connection refused or host unreachable" if "ConnectError" in name
               else f"no answer within {self.timeout:g} s" if "Timeout" in name else name)
        return (f"cannot scrape {self.url}: {why}; metrics are not available (is the server "
                "still up?)")

    async def afetch(self, http: Any) -> tuple[int, str, str | None]:
        """Status, text and content type of one GET through an ``httpx.AsyncClient``, read
        up to just past :data:`MAX_METRICS_BODY` (a huge page is never held whole)."""
        raw = bytearray()
        async with http.stream("GET", self.url, headers=self.headers) as resp:
            async for chunk in resp.aiter_bytes():
                raw += chunk
                if len(raw) > MAX_METRICS_BODY:
                    break
        return (resp.status_code, raw.decode("utf-8", "replace"),
                resp.headers.get("content-type"))

    async def ascrape(self, http: Any = None) -> Snapshot:
        """One asynchronous scrape (optionally through an existing ``httpx.AsyncClient``)."""
        import httpx
        from ..endpoint.transport import httpx_limits

        try:
            if http is None:
                async with httpx.AsyncClient(headers=self.headers, timeout=self.timeout,
                                             limits=httpx_limits()) as c:
                    status, text, ctype = await self.afetch(c)
            else:
                status, text, ctype = await self.afetch(http)
        except Exception as exc:  # noqa: BLE001 - any transport failure: not available
            raise MetricsUnavailable(self._unreachable(exc)) from None
        return self._check(status, text, ctype)
