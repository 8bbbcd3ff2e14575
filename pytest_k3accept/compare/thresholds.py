"""Which figures are compared, which way is better, and how much worse is a regression.

The profile's ``[baseline]`` table (``--k3-profile``) sets the thresholds; the defaults::

    [baseline]
    ttft_p99 = 0.10            # p99 TTFT may grow by 10 % of the baseline's
    itl_p99 = 0.10
    e2e_p99 = 0.10
    request_throughput = 0.10  # throughput may drop by 10 %
    error_rate = 0.01          # the error rate may grow by 1 point (absolute)
    same_within = 0.02         # a change under 2 % is marked "same"

A threshold of a time or a throughput is *relative* (a fraction of the baseline's value); of
a rate (error rate, peak KV, hit rate) or a count (preemptions) it is *absolute* (in the
figure's own unit). A figure without a threshold is shown with its change and mark but never
fails. ``name = false`` removes a default. Pure: no pytest.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping


class ThresholdError(ValueError):
    """A bad ``[baseline]`` table or threshold; the message names where and the field."""


@dataclass(frozen=True)
class Figure:
    """One comparable figure: its key, label, unit, which way is better and whether its
    threshold is relative (a fraction of the baseline) or absolute."""

    key: str
    label: str
    unit: str
    higher_is_better: bool = False
    relative: bool = True


def _latencies() -> list[Figure]:
    out = []
    for name, label in (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "e2e")):
        out += [Figure(f"{name}_{p}", f"{label} {p}", "s") for p in ("p50", "p90", "p99")]
    return out


#: the figures of one load run, in display order
RUN_FIGURES: tuple[Figure, ...] = (
    *_latencies(),
    Figure("request_throughput", "throughput", "req/s", higher_is_better=True),
    Figure("output_throughput", "output throughput", "tok/s", higher_is_better=True),
    Figure("error_rate", "error rate", "%", relative=False),
    Figure("peak_kv", "peak KV usage", "%", relative=False),
    Figure("preemptions", "preemptions", "", relative=False),
    Figure("prefix_cache_hit_rate", "prefix-cache hit rate", "%", higher_is_better=True,
           relative=False),
)
#: startup durations are ``startup_<event>`` (seconds from process start), all lower-better
STARTUP_PREFIX = "startup_"
DEFAULTS: dict[str, float] = {"ttft_p99": 0.10, "itl_p99": 0.10, "e2e_p99": 0.10,
                              "request_throughput": 0.10, "error_rate": 0.01}
SAME_WITHIN = 0.02
_BY_KEY = {f.key: f for f in RUN_FIGURES}


def slug(label: str) -> str:
    """``"weights loaded"`` -> ``"weights_loaded"``."""
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def figure(key: str, label: str | None = None) -> Figure:
    """The figure of ``key`` (a run figure, or a ``startup_*`` duration)."""
    if key in _BY_KEY:
        return _BY_KEY[key]
    if key.startswith(STARTUP_PREFIX):
        return Figure(key, label or f"startup: {key[len(STARTUP_PREFIX):]}", "s")
    raise KeyError(key)


@dataclass(frozen=True)
class Thresholds:
    """Allowed worsening per figure key (see the module doc) and the "same" band."""

    limits: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULTS))
    same_within: float = SAME_WITHIN
    source: str = "defaults"

    def limit(self, key: str) -> float | None:
        """The threshold of ``key``, or None when it has none."""
        return self.limits.get(key)

    def merged(self, table: Mapping[str, Any], where: str) -> "Thresholds":
        """These thresholds with ``table``'s values over them (validated)."""
        limits = dict(self.limits)
        same = self.same_within
        for key, value in table.items():
            key = str(key)
            if key == "same_within":
                same = _fraction(value, f"{where}: same_within", upper=0.5)
                continue
            if key not in _BY_KEY and not (key.startswith(STARTUP_PREFIX)
                                           and len(key) > len(STARTUP_PREFIX)):
                raise ThresholdError(f"{where}: {key}: unknown figure{_suggest(key)}; known: "
                                     f"{', '.join(_BY_KEY)}, same_within, startup_<event> "
                                     "(e.g. startup_engine_init_done)")
            if value is False or value is None:
                limits.pop(key, None)
                continue
            fig = figure(key)
            bounded = fig.unit == "%" or fig.higher_is_better  # a rate, or a drop
            limits[key] = _fraction(value, f"{where}: {key}", upper=1.0 if bounded else None)
        return Thresholds(limits, same, where)

    def as_dict(self) -> dict[str, Any]:
        """Plain values (the record keeps them beside the comparison)."""
        return {"limits": dict(self.limits), "same_within": self.same_within,
                "source": self.source}

    def describe(self, key: str) -> str:
        """``"+10 %"`` / ``"-10 %"`` / ``"+0.01"`` for the threshold of ``key``."""
        value = self.limits.get(key)
        if value is None:
            return "none"
        fig = figure(key)
        sign = "-" if fig.higher_is_better else "+"
        if fig.relative:
            return f"{sign}{value * 100:g} %"
        if fig.unit == "%":
            return f"{sign}{value * 100:g} pts"
        return f"{sign}{value:g}"


def from_table(table: Any, where: str = "[baseline]") -> Thresholds:
    """The defaults with a profile's ``[baseline]`` table over them."""
    if table is None:
        return Thresholds()
    if not isinstance(table, Mapping):
        raise ThresholdError(f"{where}: expected a table of thresholds, got "
                             f"{type(table).__name__}")
    return Thresholds().merged(table, where)


def _fraction(value: Any, where: str, upper: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value) or value < 0 or (upper is not None and value > upper):
        bound = f" and <= {upper:g}" if upper is not None else ""
        raise ThresholdError(f"{where}: expected a number >= 0{bound} (0.10 = 10 % of the "
                             f"baseline for times and throughput), got {value!r}")
    return float(value)


def _suggest(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, [*_BY_KEY, "same_within"], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
