"""The measured figures of two records side by side (pure; no pytest).

Load runs are matched by their profile: first by profile name and the test that ran them
(the n-th run of profile P in test T with the n-th), then what is left by profile name alone.
Each figure gets its change and a mark: ``better``, ``worse``, ``same`` (within the "same"
band) or ``unknown`` (not measured on one side: never better, never a regression). A
regression is a figure worse than its threshold allows (:mod:`.thresholds`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .read import Record
from .thresholds import RUN_FIGURES, STARTUP_PREFIX, Figure, Thresholds, figure, slug

BETTER, WORSE, SAME, UNKNOWN = "better", "worse", "same", "unknown"
SESSION = "session"


@dataclass(frozen=True)
class Run:
    """One load run of a record: its label, figures and request-set fingerprint."""

    profile: str
    nodeid: str
    figures: Mapping[str, float | None]
    fingerprint: str | None = None
    concurrency: Any = None

    @property
    def label(self) -> str:
        where = f" in {self.nodeid}" if self.nodeid else ""
        return f"load {self.profile!r}{where}"


@dataclass(frozen=True)
class Row:
    """One figure compared: baseline (old) and this session (new) values."""

    run: str
    key: str
    label: str
    unit: str
    old: float | None
    new: float | None
    mark: str
    change: float | None
    threshold: float | None
    regression: bool

    def as_dict(self) -> dict[str, Any]:
        """Plain values."""
        return {"run": self.run, "key": self.key, "label": self.label, "unit": self.unit,
                "old": self.old, "new": self.new, "mark": self.mark, "change": self.change,
                "threshold": self.threshold, "regression": self.regression}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _pct(summary: Mapping[str, Any], name: str, p: str) -> float | None:
    dist = summary.get(name)
    return _num(dist.get(p)) if isinstance(dist, Mapping) else None


def run_figures(data: Mapping[str, Any]) -> dict[str, float | None]:
    """The figures of one load entry's data (the typed fields win over the plain view:
    ``peak_kv`` is None there when no sample was taken during the run)."""
    summary, server = _map(data.get("summary")), _map(data.get("server"))
    out: dict[str, float | None] = {}
    for name in ("ttft", "itl", "e2e"):
        for p in ("p50", "p90", "p99"):
            out[f"{name}_{p}"] = _pct(summary, name, p)
    out["request_throughput"] = _num(summary.get("request_throughput"))
    out["output_throughput"] = _num(summary.get("output_throughput"))
    out["error_rate"] = _num(data.get("error_rate", summary.get("error_rate")))
    out["peak_kv"] = _num(data["peak_kv"] if "peak_kv" in data else server.get("peak_kv_usage"))
    out["preemptions"] = _num(data["preemptions"] if "preemptions" in data
                              else server.get("preemptions"))
    out["prefix_cache_hit_rate"] = _num(server.get("prefix_cache_hit_rate"))
    return out


def runs_of(record: Record) -> list[Run]:
    """The record's load runs, in the order they were observed."""
    out = []
    for ev in record.evidence:
        if ev.get("kind") != "load" or not isinstance(ev.get("data"), Mapping):
            continue
        d = ev["data"]
        profile = d.get("profile_name") or (d.get("profile") or {}).get("name") or "default"
        rs = _map(d.get("request_set"))
        out.append(Run(str(profile), str(ev.get("nodeid") or ""), run_figures(d),
                       str(rs["fingerprint"]) if rs.get("fingerprint") else None,
                       d.get("concurrency")))
    return out


def startup_figures(record: Record) -> dict[str, tuple[str, float]]:
    """``startup_<event>`` -> (label, seconds from process start) of the record's last server
    timeline, plus vLLM's own engine-init figure."""
    timelines = [e for e in record.evidence if e.get("kind") == "timeline"
                 and isinstance(e.get("data"), Mapping)]
    if not timelines:
        return {}
    data = timelines[-1]["data"]
    events = [e for e in data.get("events") or () if isinstance(e, Mapping)
              and _num(e.get("at")) is not None and e.get("label")]
    out: dict[str, tuple[str, float]] = {}
    if events:
        t0 = min(float(e["at"]) for e in events)
        for ev in events:
            key = STARTUP_PREFIX + slug(str(ev["label"]))
            if float(ev["at"]) > t0 and key not in out:
                out[key] = (f"startup: {ev['label']}", float(ev["at"]) - t0)
    logged = _num(data.get("engine_init_logged_seconds"))
    if logged is not None:
        out[STARTUP_PREFIX + "engine_init_logged"] = ("startup: engine init (vLLM's figure)",
                                                      logged)
    return out


def match(old: list[Run], new: list[Run]) -> tuple[list[tuple[Run, Run]], list[Run], list[Run]]:
    """Pairs of matched runs, then the runs only in ``old`` and only in ``new``."""
    pairs: list[tuple[Run, Run]] = []
    left_old, left_new = list(old), list(new)
    for key in (lambda r: (r.profile, r.nodeid), lambda r: r.profile):
        for o in list(left_old):
            n = next((n for n in left_new if key(n) == key(o)), None)
            if n is not None:
                pairs.append((o, n))
                left_old.remove(o)
                left_new.remove(n)
    pairs.sort(key=lambda p: old.index(p[0]))
    return pairs, left_old, left_new


def mark(fig: Figure, old: float | None, new: float | None, same_within: float) -> str:
    """better / worse / same / unknown for a change from ``old`` to ``new``."""
    if old is None or new is None:
        return UNKNOWN
    delta = new - old
    band = same_within * abs(old) if fig.relative else 1e-9
    if abs(delta) <= max(band, 1e-12):
        return SAME
    return BETTER if (delta > 0) == fig.higher_is_better else WORSE


def change(fig: Figure, old: float | None, new: float | None) -> float | None:
    """The change: relative (a fraction of ``old``) for relative figures, else absolute;
    None when unknown (or relative to a zero baseline)."""
    if old is None or new is None:
        return None
    if not fig.relative:
        return new - old
    if old == 0:
        return 0.0 if new == 0 else None
    return (new - old) / abs(old)


def regressed(fig: Figure, old: float | None, new: float | None, limit: float | None) -> bool:
    """True when ``new`` is worse than ``old`` by more than ``limit`` allows."""
    if limit is None or old is None or new is None:
        return False
    worse_by = (old - new) if fig.higher_is_better else (new - old)
    if worse_by <= 0:
        return False
    if not fig.relative:
        return worse_by > limit + 1e-12
    if old == 0:
        return True  # from nothing to something, for a figure where less is better
    return worse_by / abs(old) > limit + 1e-12


def compare_row(run: str, fig: Figure, old: float | None, new: float | None,
                th: Thresholds) -> Row:
    """One figure compared."""
    limit = th.limit(fig.key)
    bad = regressed(fig, old, new, limit)
    return Row(run, fig.key, fig.label, fig.unit, old, new,
               WORSE if bad else mark(fig, old, new, th.same_within), change(fig, old, new),
               limit, bad)


def rows(old: Record, new: Record, th: Thresholds,
         ) -> tuple[list[Row], list[str], list[tuple[Run, Run]]]:
    """Every compared figure, lines about unmatched runs, and the matched run pairs."""
    pairs, only_old, only_new = match(runs_of(old), runs_of(new))
    out: list[Row] = []
    for o, n in pairs:
        label = n.label  # matched by profile: the same load, maybe in a moved test file
        out += [compare_row(label, fig, o.figures.get(fig.key), n.figures.get(fig.key), th)
                for fig in RUN_FIGURES]
    so, sn = startup_figures(old), startup_figures(new)
    for key in dict.fromkeys([*so, *sn]):
        label = (so.get(key) or sn[key])[0]
        out.append(compare_row(SESSION, figure(key, label), (so.get(key) or (label, None))[1],
                               (sn.get(key) or (label, None))[1], th))
    notes = [f"only in the baseline: {r.label} (not run in this session)" for r in only_old]
    notes += [f"only in this session: {r.label} (not in the baseline)" for r in only_new]
    return out, notes, pairs


def fingerprints(runs: Iterable[Run]) -> list[str]:
    """The distinct request-set fingerprints of ``runs`` (in order)."""
    return list(dict.fromkeys(r.fingerprint for r in runs if r.fingerprint))
