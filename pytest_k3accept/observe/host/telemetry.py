"""GPU memory telemetry while a test runs: a bounded background-thread sampler.

A :class:`GpuTelemetry` reads a *memory source* (``read() -> {gpu key: (used, total)}``:
local NVML, dcgm-exporter or Prometheus; see :func:`pick_source`) every ``interval`` seconds,
keeps the last ``max_samples`` readings per GPU, and tracks the peak over the whole run (the
peak is exact even after old samples are dropped). ``headroom`` is ``1 - peak / total`` per
GPU. When no GPU source exists it says so (``available`` False, ``reason``) and can instead
sample vLLM's own ``kv_cache_usage_perc``: that is KV-cache usage, *not* GPU memory, and is
labelled so everywhere (``kind == "kv-cache-usage"``). A KV reader may return one fraction or
one per engine (``{"0": 0.95, "1": 0.86}``, a data-parallel server): the figure is then the
fullest engine's, and with more than one engine each is kept too (``kv_cache_usage_perc/engineN``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Mapping, Protocol

GPU_MEMORY, KV_USAGE, NONE = "gpu-memory", "kv-cache-usage", "none"
GIB = 1024 ** 3
KV_KEY = "kv_cache_usage_perc"
#: what a KV reader returns: one fraction, one per engine, or None (no reading)
KvReading = float | Mapping[str, float] | None


class MemorySource(Protocol):
    """Anything that reads GPU memory: ``read()`` -> key -> (used bytes, total bytes)."""

    label: str

    def read(self) -> dict[str, tuple[int, int | None]]: ...

    def close(self) -> None: ...


class GpuTelemetry:
    """Samples GPU memory used (or, as a labelled fallback, KV-cache usage) in a thread.

    Use as a context manager, or ``start()`` / ``stop()``. Thread-safe reads at any time.
    """

    def __init__(self, source: MemorySource | None, interval: float = 0.5,
                 max_samples: int = 10_000, reason: str | None = None,
                 kv_reader: Callable[[], KvReading] | None = None,
                 kv_label: str = "") -> None:
        self.source = source
        self.interval = max(0.01, float(interval))
        self.max_samples = max(2, int(max_samples))
        self.kind = GPU_MEMORY if source is not None else (KV_USAGE if kv_reader else NONE)
        self.reason = None if source is not None else (reason or "no GPU memory source")
        self.source_label = source.label if source is not None else kv_label
        self._kv_reader = kv_reader
        self._lock = threading.Lock()
        self._series: dict[str, deque[tuple[float, float]]] = {}
        self._peak: dict[str, float] = {}
        self._total: dict[str, int | None] = {}
        self._count = 0
        self.errors = 0
        self.last_error: str | None = None
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def available(self) -> bool:
        """True when GPU memory (not a fallback) is being sampled."""
        return self.kind == GPU_MEMORY

    def start(self) -> "GpuTelemetry":
        """Take a first sample and start the sampling thread (no-op without any source)."""
        if self._thread is not None or self.kind == NONE:
            return self
        self.started_at = time.time()
        self.sample_now()
        self._thread = threading.Thread(target=self._run, name="k3-gpu-telemetry",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> "GpuTelemetry":
        """Stop the thread, take a last sample, release the source. Idempotent."""
        if self._stop.is_set():
            return self
        self._stop.set()
        if self._thread is None:
            if self.source is not None:
                self.source.close()
            return self
        self._thread.join(timeout=max(5.0, 3 * self.interval))
        self.sample_now()
        self.stopped_at = time.time()
        peak_between = getattr(self.source, "peak_between", None)
        if callable(peak_between) and self.started_at is not None:
            try:  # a Prometheus source also knows the highest value between its scrapes
                with self._lock:
                    for key, used in peak_between(self.started_at, self.stopped_at).items():
                        self._peak[key] = max(self._peak.get(key, 0.0), float(used))
            except Exception as exc:
                self._error(exc)
        if self.source is not None:
            self.source.close()
        return self

    def __enter__(self) -> "GpuTelemetry":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample_now()

    def _error(self, exc: Exception) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]

    def sample_now(self) -> dict[str, float]:
        """Read the source once and store it; returns key -> used bytes (or KV fraction)."""
        now = time.time()
        reading: dict[str, tuple[float, int | None]]
        try:
            if self.source is not None:
                reading = dict(self.source.read())
            elif self._kv_reader is not None:
                reading = kv_reading(self._kv_reader())
            else:
                return {}
        except Exception as exc:
            self._error(exc)
            return {}
        with self._lock:
            for key, (used, total) in reading.items():
                series = self._series.setdefault(key, deque(maxlen=self.max_samples))
                series.append((now, float(used)))
                self._peak[key] = max(self._peak.get(key, float(used)), float(used))
                if total is not None:
                    self._total[key] = int(total)
            self._count += 1
        return {k: float(u) for k, (u, _) in reading.items()}

    # -- results ------------------------------------------------------------------------
    @property
    def series(self) -> dict[str, list[tuple[float, float]]]:
        """Key -> [(unix time, used bytes or KV fraction)], the retained samples."""
        with self._lock:
            return {k: list(v) for k, v in self._series.items()}

    @property
    def peak(self) -> dict[str, float]:
        """Key -> highest used bytes (or KV fraction) seen during the run."""
        with self._lock:
            return dict(self._peak)

    @property
    def total(self) -> dict[str, int | None]:
        """Key -> memory total in bytes (GPU memory only)."""
        with self._lock:
            return {k: self._total.get(k) for k in self._peak}

    @property
    def headroom(self) -> dict[str, float | None]:
        """Key -> ``1 - peak / total`` (None when the total is unknown or for KV usage)."""
        if self.kind != GPU_MEMORY:
            return {}
        out: dict[str, float | None] = {}
        for key, peak in self.peak.items():
            total = self._total.get(key)
            out[key] = (1.0 - peak / total) if total else None
        return out

    def engine_peaks(self) -> dict[str, float]:
        """Engine -> peak KV usage, when a data-parallel server reported several engines."""
        prefix = KV_KEY + "/engine"
        return {k[len(prefix):]: v for k, v in sorted(self.peak.items())
                if k.startswith(prefix)}

    @property
    def samples(self) -> int:
        """How many readings were taken (including ones no longer retained)."""
        return self._count

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures for evidence and reports."""
        data: dict[str, Any] = {
            "kind": self.kind, "source": self.source_label, "reason": self.reason,
            "interval_s": self.interval, "samples": self._count, "errors": self.errors,
            "last_error": self.last_error, "started_at": self.started_at,
            "stopped_at": self.stopped_at}
        if self.kind == GPU_MEMORY:
            data.update(peak_bytes={k: int(v) for k, v in self.peak.items()},
                        total_bytes=self.total, headroom=self.headroom)
        elif self.kind == KV_USAGE:
            data.update(kv_cache_usage_peak=self.peak.get(KV_KEY),
                        kv_cache_usage_peak_per_engine=self.engine_peaks(),
                        note="vLLM kv_cache_usage_perc: KV-cache usage, NOT GPU memory "
                             "(the fullest engine's)")
        return data

    def describe(self) -> str:
        """One human line."""
        if self.kind == GPU_MEMORY:
            parts = []
            for key, peak in sorted(self.peak.items()):
                total = self._total.get(key)
                room = f", headroom {1 - peak / total:.1%}" if total else ""
                parts.append(f"{key} peak {peak / GIB:.2f} GiB{room}")
            return f"GPU memory ({self.source_label}, {self._count} samples): " + (
                "; ".join(parts) or "no reading")
        if self.kind == KV_USAGE:
            kv = self.peak.get(KV_KEY)
            shown = "no reading" if kv is None else f"peak {kv:.1%}"
            engines = self.engine_peaks()
            if engines:
                shown += " (fullest engine; " + ", ".join(
                    f"engine {e} {v:.1%}" for e, v in engines.items()) + ")"
            return (f"no GPU memory source ({self.reason}); vLLM KV-cache usage (NOT GPU "
                    f"memory, from {self.source_label}): {shown}")
        return f"no GPU memory source: {self.reason}"


def kv_reading(value: KvReading) -> dict[str, tuple[float, int | None]]:
    """A KV reader's answer as telemetry readings: the fullest engine under
    :data:`KV_KEY`, each engine under ``KV_KEY/engineN`` when there are several."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return {KV_KEY: (float(value), None)}
    if not value:
        return {}
    out: dict[str, tuple[float, int | None]] = {KV_KEY: (max(value.values()), None)}
    if len(value) > 1:
        out.update({f"{KV_KEY}/engine{e}": (float(v), None) for e, v in value.items()})
    return out


def pick_source(dcgm_url: str | None = None, prometheus_url: str | None = None,
                nvml_module: Any = None, timeout: float = 10.0,
                prometheus_selector: str | None = None, local: bool = True,
                ) -> tuple[MemorySource | None, str | None]:
    """The first memory source that answers: dcgm-exporter and Prometheus when given (they
    name the deployment's GPUs explicitly, scoped by the GPU selector), then local NVML
    (only when ``local``: this machine's GPUs belong to the deployment).

    Returns ``(source, None)`` or ``(None, why none works)``.
    """
    from .nvml import NvmlMemory
    from .remote import Dcgm, Prometheus, RemoteError, shown

    why: list[str] = []
    remotes: list[Dcgm | Prometheus] = []
    if dcgm_url:
        remotes.append(Dcgm(dcgm_url, timeout=timeout, selector=prometheus_selector))
    if prometheus_url:
        remotes.append(Prometheus(prometheus_url, timeout=timeout, selector=prometheus_selector))
    for remote in remotes:
        try:
            if remote.read():
                return remote, None
            scope = f" ({remote.scope})" if isinstance(remote, Prometheus) else ""
            why.append(f"{remote.label} at {shown(remote.url)}{scope}: no "
                       "DCGM_FI_DEV_FB_USED series")
        except RemoteError as exc:
            why.append(f"{remote.label}: {exc}")
    if not local:
        why.append("local NVML not used: this machine is not the deployment's "
                   "(--k3-local-gpu uses it)")
        return None, "; ".join(why)
    mine = NvmlMemory(nvml_module)
    if mine.available:
        return mine, None
    why.append(f"local NVML: {mine.error}")
    if not dcgm_url and not prometheus_url:
        why.append("no --k3-dcgm-url / --k3-prometheus-url given")
    return None, "; ".join(why)
