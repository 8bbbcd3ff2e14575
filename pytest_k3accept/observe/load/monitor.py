"""Server-side view of a load run: ``/metrics`` before, during and after it.

Full scrapes (prometheus_client parser, ~30 ms for vLLM's page) happen only before and after
the run, for counter deltas. During the run a background task reads just the KV-cache usage,
running and waiting gauges with a line scan (~0.1 ms) every ``interval`` seconds and keeps
their peaks (every :data:`CATCH_UP_S` while requests are in flight and no sample has yet caught
the server at work, so a short run's requests do not all fall between samples). After the run the final scrape is repeated briefly until the server's
``vllm:request_success_total`` has caught up with the requests the runner saw succeed, so
token counters are complete when they are compared.

With several engines (``--data-parallel-size``) the gauges are kept per engine: the peak KV
usage is the fullest engine's (``per_engine`` lists each engine's peaks and counters), the
running / waiting figures are the server's totals (see ``pytest_k3accept.observe.metrics``).

Peak KV usage is the highest sample, raised to 1.0 when the run's preemption count grew:
vLLM preempts only when the KV cache has no free block, so a preemption proves the cache
was full even when no sample caught that moment (``peak_kv_from`` says which; per engine,
by that engine's preemptions). Likewise
the sustained queue is at least 1 when vLLM's ``request_queue_time_seconds`` histogram shows
a request that waited longer than :data:`SUSTAINED_S` (``queued_over_1s``).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..metrics import MAX_METRICS_BODY, fold_gauges, number, scan_engine_gauges

if TYPE_CHECKING:  # pragma: no cover
    import httpx

    from ..metrics import Delta, MetricsScraper, Snapshot

#: a queue counts as sustained when it was present in every sample over this many seconds
SUSTAINED_S = 1.0
#: while requests are in flight and no sample has yet caught the server at work, samples
#: come this often (a short run's requests otherwise fall between samples on a busy host)
CATCH_UP_S = 0.02
#: at most this many such catch-up samples a run (a server whose gauges never move)
CATCH_UP_MAX = 100


def _successes(later: "Snapshot", earlier: "Snapshot | None") -> float:
    if earlier is None:
        return 0.0
    return sum((later - earlier).successes().values())


class Monitor:
    """Scrapes one server's ``/metrics`` for a run; ``error`` says why it could not."""

    def __init__(self, client: Any, metrics: "MetricsScraper | bool | None",
                 interval: float = 0.25, settle_timeout: float = 3.0) -> None:
        self.client = client
        self.interval = interval
        self.settle_timeout = settle_timeout
        self.scraper: MetricsScraper | None = None
        self.enabled = metrics is not None and metrics is not False
        self.error: str | None = None if self.enabled else "metrics scraping turned off"
        self._spec = metrics
        self._http: httpx.AsyncClient | None = None
        self.last: Snapshot | None = None
        self.before: Snapshot | None = None
        self.peaks: dict[str, float] = {}
        #: gauge -> engine -> highest value sampled
        self.engine_peaks: dict[str, dict[str, float]] = {}
        #: engine -> [(t, kv)] KV usage samples per engine
        self.engine_series: dict[str, list[tuple[float, float]]] = {}
        self.series: list[tuple[float, float, float, float]] = []  # t, kv, running, waiting
        self.t0 = time.perf_counter()
        self.samples = 0
        #: samples that caught the server at work (a request running, or KV in
        #: use); None while no sample had a running / waiting gauge to tell
        self.busy_samples: int | None = None
        self.sample_errors = 0
        #: why the first failed sample failed (``ReadTimeout: ...``, ``HTTP 503``)
        self.sample_error: str | None = None
        #: samples taken early because requests were in flight and none had been caught
        self.catch_up_samples = 0
        self.reported = False

    async def open(self) -> None:
        """Make the scraper and take a first full scrape (disables itself on failure)."""
        if not self.enabled:
            return
        import httpx
        from ..endpoint.transport import httpx_limits

        from ..metrics import MetricsScraper

        if isinstance(self._spec, MetricsScraper):
            self.scraper = self._spec
        else:
            http = getattr(self.client, "http", None)  # K3Client: its httpx client
            auth = http.headers.get("authorization") if http is not None else None
            self.scraper = MetricsScraper(self.client.base_url,
                                          headers={"Authorization": auth} if auth else {})
        self._http = httpx.AsyncClient(headers=self.scraper.headers, timeout=10.0,
                                       limits=httpx_limits())
        self.last = await self._full()

    async def _full(self) -> "Snapshot | None":
        from ..metrics import MetricsUnavailable

        if not self.enabled or self.scraper is None:
            return None
        try:
            return await self.scraper.ascrape(self._http)
        except MetricsUnavailable as exc:
            self.enabled, self.error = False, str(exc)
            return None

    async def settle(self, expected_ok: int, since: "Snapshot | None" = None) -> None:
        """Scrape until the server counted ``expected_ok`` successes since ``since``
        (default: the last scrape before the phase), at most ``settle_timeout`` s."""
        since = since or self.last
        deadline = time.monotonic() + self.settle_timeout
        while self.enabled:
            snap = await self._full()
            if snap is None:
                return
            self.last = snap
            if _successes(snap, since) >= expected_ok or time.monotonic() > deadline:
                return
            await asyncio.sleep(0.1)

    async def baseline(self) -> None:
        """The snapshot the run's deltas start from (the last settled one)."""
        if self.enabled and self.last is None:
            self.last = await self._full()
        self.before = self.last

    async def sample(self) -> None:
        """One cheap gauge sample; peaks kept in ``peaks``."""
        assert self._http is not None and self.scraper is not None
        why = "no vLLM gauge on the page"
        try:
            status, text, _ = await self.scraper.afetch(self._http)  # bounded read
            per = (scan_engine_gauges(text) if status == 200 and len(text) <= MAX_METRICS_BODY
                   else {})
            if status != 200:
                why = f"HTTP {status}"
        except Exception as exc:  # noqa: BLE001 - a sample may fail under load; counted
            per, why = {}, " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        if not per:
            self.sample_errors += 1
            self.sample_error = self.sample_error or why
            return
        self.samples += 1
        gauges = fold_gauges(per)
        if "running" in gauges or "waiting" in gauges:
            # a request running or KV in use: a sample of the server at work, which is what
            # makes the KV peak a measurement; requests only waiting (queued, no KV yet) show
            # queueing, not the peak (CI saw "peak KV 0 %" from such a sample alone)
            busy = gauges.get("running", 0.0) > 0 or gauges.get("kv", 0.0) > 0
            self.busy_samples = (self.busy_samples or 0) + int(busy)
        t = time.perf_counter() - self.t0
        self.series.append((t, gauges.get("kv", math.nan), gauges.get("running", math.nan),
                            gauges.get("waiting", math.nan)))
        for engine, kv in per.get("kv", {}).items():
            self.engine_series.setdefault(engine, []).append((t, kv))
        self._fold(per)

    def _fold(self, per: dict[str, dict[str, float]]) -> None:
        """Keep the peaks of one per-engine gauge reading."""
        for key, value in fold_gauges(per).items():
            if value > self.peaks.get(key, float("-inf")):
                self.peaks[key] = value
        for key, values in per.items():
            peaks = self.engine_peaks.setdefault(key, {})
            for engine, value in values.items():
                peaks[engine] = max(peaks.get(engine, value), value)

    async def watch(self, run: Any, t0: float, progress: Callable[[Any], Any] | None,
                    progress_interval: float) -> None:
        """Sample gauges and report progress until cancelled."""
        next_report = t0 + progress_interval
        next_sample = t0
        self.t0, self.series, self.engine_series, self.reported = t0, [], {}, False
        tick = min(self.interval, progress_interval) if progress else self.interval
        first = True
        while True:
            now = time.perf_counter()
            if self.enabled and now >= next_sample:
                # the first sample, at the start, sees the server before any request of the
                # run is in flight; the second comes 50 ms in, when the first requests are
                # being served, so a run shorter than one interval is still seen at work;
                # then, while requests are in flight and every sample so far showed an idle
                # server, one every CATCH_UP_S until one catches the server at work
                await self.sample()
                if first:
                    step = min(self.interval, 0.05)
                elif self.catching_up(run):
                    step = min(self.interval, CATCH_UP_S)
                    self.catch_up_samples += 1
                else:
                    step = self.interval
                next_sample = now + step
                first = False
            if progress is not None and now >= next_report:
                next_report = now + progress_interval
                self.report(run, t0, progress)
            wait = min(tick, next_sample - time.perf_counter()) if self.enabled else tick
            await asyncio.sleep(max(0.0, wait))

    def catching_up(self, run: Any) -> bool:
        """Sample early? Requests are in flight, the gauges exist but no sample has caught
        a request running yet, and the run's catch-up budget is not spent."""
        return (self.busy_samples == 0 and self.catch_up_samples < CATCH_UP_MAX
                and (getattr(run, "in_flight", 0) or 0) > 0)

    def report(self, run: Any, t0: float, progress: Callable[[Any], Any]) -> None:
        """Hand a :class:`Progress` to ``progress`` (its errors never end a run)."""
        from .result import Progress

        try:
            progress(Progress(run.done, run.errors, run.in_flight, run.total,
                              time.perf_counter() - t0))
            self.reported = True
        except Exception:  # noqa: BLE001 - a broken printer must not end the run
            pass

    async def final(self, ok: int) -> dict[str, Any] | None:
        """Counter deltas over the run plus the sampled peaks, or None without metrics."""
        if not self.enabled or self.before is None:
            return None
        await self.settle(ok, since=self.before)
        after = self.last
        if after is None or not self.enabled:
            return None
        self.sample_gauges_from(after)
        delta = after - self.before
        out = delta.as_dict()
        cfg = after.cache_config()
        peak_kv, peak_from = _peak_kv(self.peaks.get("kv"), delta.preemptions())
        engines = self.per_engine(delta)
        queued_long = delta.histogram_over("vllm:request_queue_time_seconds", SUSTAINED_S)
        out.update({
            "peak_kv_usage": peak_kv,
            "peak_kv_from": peak_from,
            "peak_running": self.peaks.get("running"),
            "peak_waiting": self.peaks.get("waiting"),
            "sustained_waiting": sustained_floor(
                sustained([(t, w) for t, _, _, w in self.series], SUSTAINED_S), queued_long),
            "queued_over_1s": queued_long,
            "gauge_series": {"t": [round(s[0], 3) for s in self.series],
                             "kv_usage": [_r(s[1]) for s in self.series],
                             "running": [_r(s[2]) for s in self.series],
                             "waiting": [_r(s[3]) for s in self.series]},
            "gauge_samples": self.samples,
            "gauge_busy_samples": self.busy_samples,
            "gauge_sample_errors": self.sample_errors,
            "gauge_sample_error": self.sample_error,
            "gauge_catch_up_samples": self.catch_up_samples,
            "queue_time_mean": delta.histogram_mean("vllm:request_queue_time_seconds"),
            "prefill_time_mean": delta.histogram_mean("vllm:request_prefill_time_seconds"),
            "kv_cache_size_tokens": number(cfg.get("kv_cache_size_tokens")),
            "prefix_caching": after.prefix_caching_enabled(),
            "engines": len(engines),
            "per_engine": engines,
        })
        return out

    def per_engine(self, delta: "Delta") -> dict[str, dict[str, Any]]:
        """Engine -> its peaks (KV raised to 1.0 by its own preemptions), counters and KV
        series over the run; ``{}`` for a server without an ``engine`` label."""
        kv = self.engine_peaks.get("kv", {})
        names = {"preemptions": "vllm:num_preemptions_total",
                 "prompt_tokens": "vllm:prompt_tokens_total",
                 "generation_tokens": "vllm:generation_tokens_total"}
        counters = {key: delta.per_engine(name) for key, name in names.items()}
        engines = set(kv).union(*(c.keys() for c in counters.values())) - {""}
        out: dict[str, dict[str, Any]] = {}
        for engine in sorted(engines, key=lambda e: (len(e), e)):
            peak, peak_from = _peak_kv(kv.get(engine), counters["preemptions"].get(engine))
            out[engine] = {
                "peak_kv_usage": peak, "peak_kv_from": peak_from,
                "peak_running": self.engine_peaks.get("running", {}).get(engine),
                "peak_waiting": self.engine_peaks.get("waiting", {}).get(engine),
                **{key: c.get(engine) for key, c in counters.items()},
                "kv_usage": [_r(v) for _, v in self.engine_series.get(engine, [])]}
        return out

    def sample_gauges_from(self, snap: "Snapshot") -> None:
        """Fold a full snapshot's gauges into the peaks (covers runs shorter than a sample)."""
        self._fold(snap.engine_gauges())

    async def close(self) -> None:
        """Close the scrape client."""
        if self._http is not None:
            await self._http.aclose()


def _peak_kv(sampled: float | None, preemptions: float | None) -> tuple[float | None, str]:
    """The peak KV usage and where it comes from: the samples, or 1.0 when preemptions grew.

    vLLM preempts a running request only when the KV cache has no free block for it: the
    cache was full even if no sample landed at that moment (a sample can wait seconds for a
    busy API server, or fall between two reads)."""
    if preemptions and preemptions > 0 and (sampled is None or sampled < 1.0):
        return 1.0, "preemptions"
    return sampled, "samples"


def _r(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def sustained_floor(sampled: float | None, queued_long: float | None) -> float | None:
    """The sampled sustained queue, at least 1 when vLLM's own queue-time histogram shows a
    request that waited longer than the window (a queue held for that long even if the
    samples, held back by a busy API server, missed it)."""
    if queued_long:
        return max(sampled or 0.0, 1.0)
    return sampled


def sustained(series: list[tuple[float, float]], window: float) -> float | None:
    """The largest value held at every sample over at least ``window`` seconds.

    ``series`` is ``[(t, value)]`` in time order; NaN samples break a window. None when no
    window of that length was sampled (a run shorter than ``window``).
    """
    best: float | None = None
    n = len(series)
    for i in range(n):
        low = math.inf
        for j in range(i, n):
            v = series[j][1]
            if math.isnan(v):
                break
            low = min(low, v)
            if series[j][0] - series[i][0] >= window:
                best = low if best is None else max(best, low)
                break
    return best


def gpu_figures(telemetry: Any, since: float, until: float) -> dict[str, Any] | None:
    """GPU figures from a telemetry sampler the caller started (its lifecycle is theirs).

    Understands ``pytest_k3accept.observe.host.telemetry.GpuTelemetry`` (``summary()``, and ``series`` /
    ``total`` for the peak within the run's unix-time window ``since``..``until``), any
    object with ``summary()`` or ``peak``, or a plain callable returning a mapping. Adds
    ``free_fraction`` (lowest over GPUs) when GPU memory, not KV usage, was sampled.
    """
    if telemetry is None:
        return None
    if hasattr(telemetry, "summary") and callable(telemetry.summary):
        out = dict(telemetry.summary())
    elif hasattr(telemetry, "peak"):
        peak = telemetry.peak() if callable(telemetry.peak) else telemetry.peak
        out = {"peak": peak}
    elif callable(telemetry):
        got = telemetry()
        out = dict(got) if isinstance(got, Mapping) else {"value": got}
    else:
        return None
    if out.get("kind", "gpu-memory") != "gpu-memory":
        return out
    series, totals = getattr(telemetry, "series", None), getattr(telemetry, "total", None)
    if isinstance(series, Mapping) and isinstance(totals, Mapping):
        run_peak = {k: max((u for t, u in pts if since <= t <= until), default=None)
                    for k, pts in series.items()}
        free = {k: 1.0 - v / totals[k] for k, v in run_peak.items()
                if v is not None and totals.get(k)}
        out["run_peak_bytes"] = {k: v for k, v in run_peak.items() if v is not None}
        out["run_headroom"] = free
        if free:
            out["free_fraction"] = min(free.values())
    elif isinstance(out.get("headroom"), Mapping):
        room = [v for v in out["headroom"].values() if isinstance(v, (int, float))]
        if room:
            out["free_fraction"] = min(room)
    return out
