"""Remote GPU facts and memory readings: dcgm-exporter ``/metrics`` and Prometheus (PromQL).

For clusters where the test runner is not on the GPU host. dcgm-exporter series carry the
driver as the label ``DCGM_FI_DRIVER_VERSION`` on every series, plus ``gpu``, ``UUID``,
``modelName`` and ``Hostname`` (or ``hostname``); memory is ``DCGM_FI_DEV_FB_USED`` and
``DCGM_FI_DEV_FB_FREE`` (+ ``DCGM_FI_DEV_FB_RESERVED`` when exported) in MiB. The same series
read through Prometheus' HTTP API give the same facts. Failures raise :class:`RemoteError`
with the URL and what went wrong.
"""

from __future__ import annotations

import math
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from .facts import GpuFacts, NodeFacts

if TYPE_CHECKING:  # pragma: no cover
    from ..metrics import Snapshot

MIB = 1024 * 1024
USED, FREE, RESERVED = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"

Sample = tuple[str, dict[str, str], float]


class RemoteError(Exception):
    """A remote source could not be read; the message names the URL."""


#: labels naming the Kubernetes node a series was scraped on, as Prometheus relabelling adds
#: them (``__meta_kubernetes_pod_node_name`` -> ``node`` / ``kubernetes_node``)
NODE_LABELS = ("kubernetes_node", "node")


def _host(labels: dict[str, str]) -> str:
    """The node a dcgm series belongs to: the node label relabelling added, else the
    exporter's ``Hostname``, else the scrape address."""
    return (next((labels[k] for k in NODE_LABELS if labels.get(k)), None)
            or labels.get("Hostname") or labels.get("hostname") or labels.get("instance")
            or "unknown-host")


def _names(labels: dict[str, str]) -> set[str]:
    """The names in a dcgm series' labels that identify its machine (never the exporter
    pod's own name or a scrape address: see :mod:`.identity`)."""
    from .identity import identifying

    found = [labels.get(k) for k in (*NODE_LABELS, "Hostname", "hostname")]
    return {n for n in found if n and identifying(n)}


def _gpu_index(labels: dict[str, str]) -> int | None:
    try:
        return int(labels.get("gpu", ""))
    except ValueError:
        return None


def memory_from_samples(samples: Iterable[Sample]) -> dict[str, tuple[int, int | None]]:
    """``node/gpuN`` -> (used bytes, total bytes or None) from dcgm-style samples."""
    parts: dict[str, dict[str, float]] = {}
    for name, labels, value in samples:
        idx = _gpu_index(labels)
        if idx is None or name not in (USED, FREE, RESERVED) or math.isnan(value):
            continue
        parts.setdefault(f"{_host(labels)}/gpu{idx}", {})[name] = value
    out: dict[str, tuple[int, int | None]] = {}
    for key, p in sorted(parts.items()):
        if USED not in p:
            continue
        total = (p[USED] + p[FREE] + p.get(RESERVED, 0.0)) if FREE in p else None
        out[key] = (int(p[USED] * MIB), None if total is None else int(total * MIB))
    return out


def nodes_from_samples(samples: Iterable[Sample], source: str) -> list[NodeFacts]:
    """Group dcgm-style samples by node (:func:`_host`) into :class:`NodeFacts` (one per
    node), each with the names that identify it (``names``: none when ``Hostname`` is the
    exporter pod's name and no node label was added)."""
    samples = list(samples)
    memory = memory_from_samples(samples)
    nodes: dict[str, dict[str, Any]] = {}
    for name, labels, _ in samples:
        idx = _gpu_index(labels)
        if idx is None or not name.startswith("DCGM_FI_"):
            continue
        node = nodes.setdefault(_host(labels), {"driver": None, "gpus": {}, "names": set()})
        node["driver"] = node["driver"] or labels.get(DRIVER_LABEL)
        node["names"] |= _names(labels)
        gpu = node["gpus"].setdefault(idx, {"name": None, "uuid": None})
        gpu["name"] = gpu["name"] or labels.get("modelName")
        gpu["uuid"] = gpu["uuid"] or labels.get("UUID")
    out = []
    for host, info in sorted(nodes.items()):
        gpus = []
        for idx, g in sorted(info["gpus"].items()):
            used, total = memory.get(f"{host}/gpu{idx}", (None, None))
            gpus.append(GpuFacts(index=idx, name=g["name"], uuid=g["uuid"],
                                 memory_total_bytes=total, memory_used_bytes=used))
        out.append(NodeFacts(node=host, source=source, gpu_available=True,
                             driver_version=info["driver"], gpus=tuple(gpus),
                             collected_at=time.time(), names=tuple(sorted(info["names"]))))
    return out


def shown(url: str) -> str:
    """``url`` fit for messages and evidence: credentials in it become ``***``."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


class _Http:
    """One ``httpx.Client`` kept for a source's repeated reads (made on first use): a new
    client per read builds an SSL context each time, ~30 ms of CPU per telemetry sample."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._client: Any = None

    def get(self, url: str, params: dict[str, str] | None = None) -> Any:
        """GET ``url``; RemoteError (URL credentials hidden) unless it answers 200."""
        import httpx
        from ..endpoint.transport import httpx_limits

        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout, limits=httpx_limits())
        try:
            resp = self._client.get(url, params=params)
        except httpx.HTTPError as exc:
            raise RemoteError(f"cannot reach {shown(url)}: {type(exc).__name__}") from None
        if resp.status_code != 200:
            raise RemoteError(f"{shown(url)} answered HTTP {resp.status_code}: "
                              f"{resp.text[:200]}")
        return resp

    def close(self) -> None:
        """Close the kept client (a later read makes a new one)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()


def metrics_url(url: str) -> str:
    """dcgm-exporter URL with ``/metrics`` appended when only host:port was given."""
    from urllib.parse import urlsplit

    return url if urlsplit(url).path not in ("", "/") else url.rstrip("/") + "/metrics"


class Dcgm:
    """dcgm-exporter's ``/metrics``: facts and memory readings; ``selector`` (the GPU
    selector's label matchers) keeps only the series it matches, as PromQL would."""

    label = "dcgm"

    def __init__(self, url: str, timeout: float = 10.0, selector: str | None = None) -> None:
        self.url = metrics_url(url)
        self.timeout = timeout
        self.matchers = selector_matchers(selector)
        self._match = label_filter(self.matchers)
        self._http = _Http(timeout)

    def samples(self) -> list[Sample]:
        """One scrape, parsed with prometheus_client's text parser (within the selector)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self._http.get(self.url).text
        try:
            return [(s.name, dict(s.labels), float(s.value))
                    for fam in text_string_to_metric_families(text) for s in fam.samples
                    if self._match(s.labels)]
        except ValueError as exc:
            raise RemoteError(f"{shown(self.url)} did not return Prometheus text: {exc}"
                              ) from None

    def facts(self) -> list[NodeFacts]:
        """Node facts from one scrape; RemoteError when there are no dcgm series."""
        nodes = nodes_from_samples(self.samples(), f"dcgm:{shown(self.url)}")
        if not nodes and self.matchers:
            raise RemoteError(f"the selector matched no GPU series: {{{self.matchers}}} at "
                              f"dcgm-exporter {shown(self.url)}")
        if not nodes:
            raise RemoteError(f"{shown(self.url)} exposes no DCGM_FI_* series with a 'gpu' label: "
                              "is it dcgm-exporter?")
        return nodes

    def read(self) -> dict[str, tuple[int, int | None]]:
        """``node/gpuN`` -> (used, total) bytes."""
        return memory_from_samples(self.samples())

    def close(self) -> None:
        """Close the kept HTTP client."""
        self._http.close()


def selector_matchers(selector: str | None) -> str:
    """A label selector as PromQL matchers (``cluster="k3",pod=~"vllm-.*"``; surrounding
    braces allowed), ``""`` for none; ValueError for one PromQL could not take."""
    text = (selector or "").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    shaped = re.match(r'^\s*[A-Za-z_]\w*\s*(=|!=|=~|!~)\s*"', text)
    if any(c in text for c in "{}\n") or (text and not shaped):
        raise ValueError(f"not a PromQL label selector: {selector!r} (write e.g. "
                         "'cluster=\"k3\",namespace=\"vllm\"')")
    _parse(text)
    return text


_MATCHER = re.compile(r'\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def _parse(matchers: str) -> list[tuple[str, str, str]]:
    """``[(label, op, value)]`` of PromQL matchers; ValueError naming the selector."""
    tests: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(matchers):
        m = _MATCHER.match(matchers, pos)
        if m is None:
            raise ValueError(f"not a PromQL label selector: {matchers!r} (write e.g. "
                             "'cluster=\"k3\",pod=~\"vllm-.*\"')")
        tests.append((m.group(1), m.group(2), re.sub(r'\\(.)', r"\1", m.group(3))))
        pos = m.end()
    return tests


def label_filter(matchers: str) -> Callable[[Mapping[str, str]], bool]:
    """A test of a series' labels against PromQL matchers (``=``, ``!=``, ``=~``, ``!~``;
    regular expressions anchored, as PromQL's), for sources read without PromQL; a
    regular expression Python cannot compile is a ValueError naming it."""
    tests = _parse(matchers)
    for _, op, value in tests:
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"selector {matchers!r}: bad regular expression "
                                 f"{value!r}: {exc}") from None

    def match(labels: Mapping[str, str]) -> bool:
        for name, op, value in tests:
            have = labels.get(name, "")
            if op in ("=", "!=") and (have == value) != (op == "="):
                return False
            if op in ("=~", "!~") and bool(re.fullmatch(value, have)) != (op == "=~"):
                return False
        return True
    return match


def scoped(metric: str, matchers: str) -> str:
    """``metric{matchers}`` (just ``metric`` without matchers)."""
    return f"{metric}{{{matchers}}}" if matchers else metric


#: the vLLM families the Prometheus path reads (current and older names, see
#: :data:`pytest_k3accept.observe.metrics.RENAMED`)
VLLM_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
               "vllm:num_requests_running", "vllm:num_requests_waiting")


class Prometheus:
    """A Prometheus server's HTTP API (instant and range PromQL queries).

    ``selector`` (label matchers such as ``cluster="k3"``) is applied to every query, so
    only the deployment's series count; a selector that matches nothing says so.
    """

    label = "prometheus"

    def __init__(self, url: str, timeout: float = 10.0, selector: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.matchers = selector_matchers(selector)
        self._http = _Http(timeout)

    @property
    def scope(self) -> str:
        """How the queries are scoped, for messages and records."""
        return f"selector {{{self.matchers}}}" if self.matchers else "no selector"

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """Instant query -> ``(metric name, labels, value)`` for each series of the vector."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        endpoint = f"{self.url}/api/v1/query"
        resp = self._http.get(endpoint, params)
        try:
            body = resp.json()
        except ValueError:
            raise RemoteError(f"{shown(endpoint)} did not answer JSON: is "
                              f"{shown(self.url)} Prometheus?") from None
        if body.get("status") != "success":
            raise RemoteError(f"{shown(endpoint)} query {promql!r} failed: {body.get('errorType')}: "
                              f"{body.get('error')}")
        data = body.get("data") or {}
        if data.get("resultType") == "scalar":
            return [("scalar", {}, float(data["result"][1]))]
        out: list[Sample] = []
        for series in data.get("result", []):
            labels = dict(series.get("metric", {}))
            name = labels.pop("__name__", promql)
            out.append((name, labels, float(series["value"][1])))
        return out

    def _memory_samples(self) -> list[Sample]:
        out: list[Sample] = []
        for metric in (USED, FREE, RESERVED):
            out.extend((metric, labels, value) for _, labels, value in
                       self.query(scoped(metric, self.matchers)))
        return out

    def facts(self) -> list[NodeFacts]:
        """Node facts from the dcgm series Prometheus holds (within the selector)."""
        nodes = nodes_from_samples(self._memory_samples(), f"prometheus:{shown(self.url)}")
        if not nodes and self.matchers:
            raise RemoteError(f"the selector matched no GPU series: {{{self.matchers}}} "
                              f"({USED}) at Prometheus {shown(self.url)}")
        if not nodes:
            raise RemoteError(f"Prometheus at {shown(self.url)} holds no {USED} series: is it "
                              "scraping dcgm-exporter?")
        return nodes

    def read(self) -> dict[str, tuple[int, int | None]]:
        """``node/gpuN`` -> (used, total) bytes, latest values."""
        return memory_from_samples(self._memory_samples())

    def peak_between(self, start: float, end: float) -> dict[str, int]:
        """``node/gpuN`` -> highest used bytes Prometheus recorded in ``[start, end]``."""
        window = max(1, math.ceil(end - start))
        samples = [(USED, labels, value) for _, labels, value in
                   self.query(f"max_over_time({scoped(USED, self.matchers)}[{window}s])",
                              at=end)]
        return {k: used for k, (used, _) in memory_from_samples(samples).items()}

    def snapshot(self, names: Iterable[str] = VLLM_GAUGES, at: float | None = None,
                 ) -> "Snapshot":
        """The vLLM series ``names`` (sample names, e.g. ``vllm:prompt_tokens_total``) within
        the selector as a :class:`~pytest_k3accept.observe.metrics.Snapshot`: the same
        accessors as a direct ``/metrics`` scrape, so both paths give the same figures."""
        from ..metrics import Snapshot

        pattern = "|".join(re.escape(n) for n in names)
        matchers = ",".join(m for m in (f'__name__=~"{pattern}"', self.matchers) if m)
        return Snapshot.from_samples(self.query(f"{{{matchers}}}", at=at),
                                     time.time() if at is None else at)

    def engine_peaks(self, start: float, end: float) -> dict[str, dict[str, float]]:
        """The highest KV usage / running / waiting per engine Prometheus recorded in
        ``[start, end]`` (``max_over_time``), shaped as
        :meth:`~pytest_k3accept.observe.metrics.Snapshot.engine_gauges`:
        ``{"kv": {"0": 0.55, "1": 0.52}, "running": ...}``. The window is whole seconds
        ending at ``end``; a peak shorter than Prometheus' scrape interval can be missed."""
        from ..metrics import Snapshot

        window = max(1, math.ceil(end - start))
        rows: list[Sample] = []
        for name in VLLM_GAUGES:  # max_over_time drops the name: one query per family
            rows += [(name, labels, value) for _, labels, value in self.query(
                f"max_over_time({scoped(name, self.matchers)}[{window}s])", at=end)]
        return Snapshot.from_samples(rows, end).engine_gauges()

    def kv_cache_usage_per_engine(self) -> dict[str, float]:
        """``vllm:kv_cache_usage_perc`` (or the older ``gpu_cache_usage_perc``) per engine."""
        return self.snapshot().kv_cache_usage_per_engine()

    def kv_cache_usage(self) -> float | None:
        """``vllm:kv_cache_usage_perc`` of the fullest engine within the selector (0..1)."""
        return self.snapshot().kv_cache_usage()

    def close(self) -> None:
        """Close the kept HTTP client."""
        self._http.close()
