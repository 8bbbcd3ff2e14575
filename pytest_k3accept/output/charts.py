"""Charts for the HTML report, drawn with matplotlib (optional: ``pytest-k3accept[charts]``).

Each function returns a base64-encoded PNG, or ``None`` when there is nothing to draw or
matplotlib is not installed (:func:`missing_reason` says so). matplotlib is imported lazily
through its object-oriented API with the Agg canvas: no pyplot, no global backend switch,
no display needed. The ``*_from`` helpers read the shapes evidence producers use.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any, Mapping, Sequence

Series = dict[str, list[tuple[float, float]]]

_TIME_KEYS = ("t", "time", "at", "ts", "timestamp", "elapsed", "offset", "offset_s")
_VALUE_KEYS = ("value", "v", "used_bytes", "memory_used_bytes", "kv_cache_usage", "usage")
_NAME_KEYS = ("name", "event", "label")
METRICS = ("ttft", "itl", "tpot", "e2e")


def missing_reason() -> str | None:
    """None when charts can be drawn, else why not and what to install."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "charts need matplotlib: pip install 'pytest-k3accept[charts]'"
    return None


def _figure(width: float = 7.0, height: float = 3.0) -> Any:
    import logging

    # matplotlib's font manager logs every font it scores at DEBUG: not the user's business
    logging.getLogger("matplotlib").setLevel(logging.INFO)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=90)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _num(value: Any) -> float | None:
    """``value`` as a finite float, or None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _finite(values: Sequence[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(float(v))]


def latency_chart(samples: Mapping[str, Sequence[float]] | None = None,
                  percentiles: Mapping[str, Mapping[str, float]] | None = None,
                  title: str = "Latency distribution") -> str | None:
    """Histogram of per-request latencies (seconds) per metric, or, with only summaries,
    bars of their p50/p90/p99."""
    if missing_reason():
        return None
    data = {k: _finite(v) for k, v in (samples or {}).items() if _finite(v)}
    if data:
        fig = _figure()
        ax = fig.add_subplot(1, 1, 1)
        for name, values in data.items():
            ax.hist([v * 1000 for v in values], bins=min(30, max(5, len(values) // 2)),
                    alpha=0.6, label=f"{name} (n={len(values)})")
        ax.set_xlabel("milliseconds")
        ax.set_ylabel("requests")
    else:
        dists = {k: v for k, v in (percentiles or {}).items()
                 if isinstance(v, Mapping) and _finite([v.get("p50")])}
        if not dists:
            return None
        fig = _figure()
        ax = fig.add_subplot(1, 1, 1)
        names = list(dists)
        width = 0.25
        for i, q in enumerate(("p50", "p90", "p99")):
            ax.bar([j + (i - 1) * width for j in range(len(names))],
                   [float(dists[n].get(q) or 0.0) * 1000 for n in names], width, label=q)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel("milliseconds")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return _png(fig)


def series_chart(series: Series, title: str, ylabel: str, scale: float = 1.0) -> str | None:
    """Lines over time (seconds from the first sample), one per series label."""
    series = {k: v for k, v in series.items() if v}
    if missing_reason() or not series:
        return None
    t0 = min(t for points in series.values() for t, _ in points)
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    for label, points in sorted(series.items()):
        ax.plot([t - t0 for t, _ in points], [v * scale for _, v in points],
                marker="." if len(points) < 40 else None, label=label)
    ax.set_xlabel("seconds")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize="small")
    return _png(fig)


def timeline_chart(events: Sequence[tuple[str, float]],
                   title: str = "Startup timeline") -> str | None:
    """Events of a server's life on one time axis (seconds from the first event)."""
    events = [(n, t) for n, t in events if _finite([t])]
    if missing_reason() or not events:
        return None
    events = sorted(events, key=lambda e: e[1])
    t0 = events[0][1]
    fig = _figure(7.0, 0.45 * len(events) + 1.2)
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(events)))[::-1]
    xs = [t - t0 for _, t in events]
    ax.hlines(ys, 0, xs, color="#8fb3d9")
    ax.plot(xs, ys, "o", color="#1f5fa0")
    ax.set_yticks(ys, [n for n, _ in events], fontsize="small")
    for x, y in zip(xs, ys):
        ax.annotate(f"{x:.1f} s", (x, y), textcoords="offset points", xytext=(6, -3),
                    fontsize="x-small")
    ax.set_xlabel("seconds since the first event")
    ax.set_title(title)
    return _png(fig)


# -- reading evidence shapes ------------------------------------------------------------
def _point(p: Any) -> tuple[float, float] | None:
    if isinstance(p, (list, tuple)) and len(p) >= 2:
        t, v = p[0], p[1]
    elif isinstance(p, Mapping):
        t = next((p[k] for k in _TIME_KEYS if k in p), None)
        v = next((p[k] for k in _VALUE_KEYS if k in p), None)
    else:
        return None
    if _finite([t]) and _finite([v]):
        return float(t), float(v)
    return None


def _points(raw: Any) -> list[tuple[float, float]]:
    if not isinstance(raw, (list, tuple)):
        return []
    return [pt for pt in (_point(p) for p in raw) if pt is not None]


def series_from(data: Mapping[str, Any], keys: Sequence[str]) -> Series:
    """``{label: [(t, v), ...]}`` from ``data[key]``: a list of ``[t, v]`` pairs or of
    ``{"t":..., "value":...}`` dicts, or a mapping of label to such a list."""
    out: Series = {}
    for key in keys:
        raw = data.get(key)
        if isinstance(raw, Mapping):
            for label, points in raw.items():
                if _points(points):
                    out[str(label)] = _points(points)
        elif _points(raw):
            out[key] = _points(raw)
    return out


def columns_from(data: Any, key: str, columns: Sequence[str], depth: int = 0) -> Series:
    """``{column: [(t, v), ...]}`` from a columnar ``{"t": [...], column: [...]}`` stored
    under ``key`` anywhere in ``data`` (e.g. a load run's ``server.gauge_series``)."""
    if not isinstance(data, Mapping) or depth > 4:
        return {}
    raw = data.get(key)
    if isinstance(raw, Mapping) and isinstance(raw.get("t"), list):
        out: Series = {}
        for col in columns:
            values = raw.get(col)
            if isinstance(values, list):
                pts = [(float(t), float(v)) for t, v in zip(raw["t"], values)
                       if _num(t) is not None and _num(v) is not None]
                if pts:
                    out[col] = pts
        return out
    for value in data.values():
        found = columns_from(value, key, columns, depth + 1)
        if found:
            return found
    return {}


def events_from(data: Mapping[str, Any]) -> list[tuple[str, float]]:
    """``[(name, t)]`` from ``data["events"]`` (a list of ``{"name", "t"}`` dicts or a
    mapping of name to time); events without a time are left out."""
    raw = data.get("events")
    out: list[tuple[str, float]] = []
    if isinstance(raw, Mapping):
        for name, value in raw.items():
            t = _num(value if not isinstance(value, Mapping) else next(
                (value[k] for k in _TIME_KEYS if k in value), None))
            if t is not None:
                out.append((str(name), t))
    elif isinstance(raw, (list, tuple)):
        for ev in raw:
            if not isinstance(ev, Mapping):
                continue
            name = next((ev[k] for k in _NAME_KEYS if ev.get(k)), None)
            t = _num(next((ev[k] for k in _TIME_KEYS if ev.get(k) is not None), None))
            if name is not None and t is not None:
                out.append((str(name), t))
    return out


def latencies_from(data: Mapping[str, Any]) -> tuple[dict[str, list[float]],
                                                      dict[str, Mapping[str, float]]]:
    """Per-request latencies (``data["records"]``: dicts with ttft/e2e ..., only those with
    ``ok`` not false) and summary distributions (``{"ttft": {"p50":...}}``, also under
    ``data["summary"]``)."""
    samples: dict[str, list[float]] = {}
    for rec in data.get("records") or []:
        if isinstance(rec, Mapping) and rec.get("ok", True):
            for m in ("ttft", "e2e"):
                if _finite([rec.get(m)]):
                    samples.setdefault(m, []).append(float(rec[m]))
    dists: dict[str, Mapping[str, float]] = {}
    summary = data.get("summary")
    sources: list[Mapping[str, Any]] = [data] + ([summary] if isinstance(summary, Mapping)
                                                  else [])
    for src in sources:
        for m in METRICS:
            if isinstance(src.get(m), Mapping) and "p50" in src[m]:
                dists.setdefault(m, src[m])
    return samples, dists
