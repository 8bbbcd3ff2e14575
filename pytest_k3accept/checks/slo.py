"""Service-level objectives of a load run, and the check that lists their breaches.

An :class:`SLO` is a set of named limits (seconds for latencies, fractions for rates)::

    ttft_p99 = 2.0        # at most 2 s to the first token for 99 % of successful requests
    e2e_p90 = 30.0
    error_rate = 0.01     # at most 1 % failed requests
    goodput = 1.5         # at least 1.5 good requests/s ("good": ok and within goodput_*)
    goodput_ttft = 2.0    # per-request limits that make a request "good"

:func:`check` compares a run's measured values with them and returns one :class:`Breach`
(measured vs required) per violated limit; :func:`outcome` is the judgement (met, breached
or unknown). Pure: no pytest, no network.

A partial run (a worker of a split run lost mid-run: ``summary["partial"]``, docs/load.md
"Past one process") offered less than the target load. Decision: limits met on it are not
met at the target, so the SLO is **unknown** (``outcome`` None, never met); a breach
measured even at the smaller load stays a breach. Every limit judged on it carries the note
"judged on a partial run: <the partial text>" (:func:`~.headroom.partial_note`).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from ..observe.load import stats

# observe.load's package imports its profile module, which imports this one: the load
# statistics are imported where they are used, so either side may be imported first

_LAT = ("ttft", "itl", "tpot", "e2e")
_STATS = ("p50", "p90", "p99", "mean", "max")

#: every SLO name -> (direction, unit, meaning); "max": measured must be <=, "min": >=
SLO_KEYS: dict[str, tuple[str, str, str]] = {
    **{f"{m}_{s}": ("max", "s", f"{s} of {m.upper()} over successful requests")
       for m in _LAT for s in _STATS},
    "error_rate": ("max", "", "failed requests / all requests"),
    "request_throughput": ("min", "req/s", "successful requests per second"),
    "output_throughput": ("min", "tok/s", "generated tokens per second"),
    "goodput": ("min", "req/s", "good requests per second (ok and within goodput_*)"),
    "goodput_ratio": ("min", "", "good requests / all requests"),
    "goodput_ttft": ("limit", "s", "per-request TTFT limit of a good request"),
    "goodput_tpot": ("limit", "s", "per-request TPOT limit of a good request"),
    "goodput_e2e": ("limit", "s", "per-request e2e limit of a good request"),
}


class SLOError(ValueError):
    """An SLO name or value is invalid; the message names it."""


def suggest(name: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for a near-miss name, else ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass(frozen=True)
class SLO:
    """Named limits; build with :meth:`from_mapping` to validate them."""

    limits: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "slo") -> "SLO":
        """Validate ``{name: number}``; raise :class:`SLOError` naming the bad entry."""
        if not isinstance(data, Mapping):
            raise SLOError(f"{where}: expected a table of limits, got {type(data).__name__}")
        limits: dict[str, float] = {}
        for name, value in data.items():
            if name not in SLO_KEYS:
                raise SLOError(f"{where}.{name}: unknown SLO{suggest(str(name), list(SLO_KEYS))}"
                               f"; known: {', '.join(SLO_KEYS)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SLOError(f"{where}.{name}: expected a number, got {value!r}")
            number = float(value)
            if not math.isfinite(number) or number < 0:
                raise SLOError(f"{where}.{name}: must be a finite number >= 0, got {value!r}")
            if name.endswith("_rate") or name.endswith("_ratio"):
                if number > 1:
                    raise SLOError(f"{where}.{name}: is a fraction within [0, 1], got {value!r}")
            limits[str(name)] = number
        return cls(limits)

    def merged(self, other: "SLO") -> "SLO":
        """These limits overridden by ``other``'s."""
        return SLO({**self.limits, **other.limits})

    def __bool__(self) -> bool:
        return bool(self.limits)

    def as_dict(self) -> dict[str, float]:
        """The limits as a plain mapping."""
        return dict(self.limits)


@dataclass(frozen=True)
class Breach:
    """One violated limit: ``measured`` (None when it could not be measured) vs ``required``."""

    name: str
    measured: float | None
    required: float
    direction: str
    unit: str = ""
    note: str = ""

    def __str__(self) -> str:
        op = "<=" if self.direction == "max" else ">="
        unit = f" {self.unit}" if self.unit else ""
        got = "not measured" if self.measured is None else f"{self.measured:.4g}{unit}"
        tail = f" ({self.note})" if self.note else ""
        return f"{self.name} = {got}, required {op} {self.required:.4g}{unit}{tail}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-serializable view."""
        return {"name": self.name, "measured": self.measured, "required": self.required,
                "direction": self.direction, "unit": self.unit, "note": self.note}


def check(summary: Mapping[str, Any], slo: SLO,
          records: Sequence[stats.Record] | None = None) -> list[Breach]:
    """Breaches of ``slo`` by a run (its ``summary`` from :func:`stats.summarize`).

    Goodput limits need the per-request ``records``. A latency limit with no successful
    request to measure is a breach ("not measured"); one that a buffering proxy made
    unmeasurable carries the proxy's message as its note (:func:`unknown`: the SLO is unknown).
    """
    from ..observe.load import stats
    from .headroom import partial_note

    out: list[Breach] = []
    good: dict[str, float] | None = None
    lim = slo.limits
    buffered = summary.get("latency_unreliable")
    if buffered and (lim.keys() & {"goodput_ttft", "goodput_tpot"}):
        records = None  # a "good" request's TTFT/TPOT is not measurable through the proxy
    if ("goodput" in lim or "goodput_ratio" in lim) and records is not None:
        good = stats.goodput(records, float(summary.get("elapsed") or 0.0),
                             ttft=lim.get("goodput_ttft"), tpot=lim.get("goodput_tpot"),
                             e2e=lim.get("goodput_e2e"))
    for name, required in lim.items():
        direction, unit, _ = SLO_KEYS[name]
        if direction == "limit":
            continue
        note = ""
        if name == "goodput":
            measured = None if good is None else good["goodput"]
        elif name == "goodput_ratio":
            measured = None if good is None else good["ratio"]
        else:
            measured = stats.metric(summary, name)
        if measured is None:
            note = "; ".join(n for n in (_why_missing(summary, name),
                                         partial_note(summary)) if n)
            out.append(Breach(name, None, required, direction, unit, note))
        elif (direction == "max" and measured > required) or (
                direction == "min" and measured < required):
            out.append(Breach(name, measured, required, direction, unit,
                              _saturated(summary)))
    return out


#: the note of a limit judged on a run whose client was the limit (observe.load.saturation)
SATURATED = "measured while the client itself was the limit"


def _saturated(summary: Mapping[str, Any]) -> str:
    """The note of a limit judged on this run: a saturated client, a partial run."""
    from .headroom import partial_note

    return "; ".join(n for n in (SATURATED if summary.get("client_limited") else "",
                                 partial_note(summary)) if n)


def outcome(summary: Mapping[str, Any], breaches: Sequence[Breach]) -> bool | None:
    """The SLO judgement of a run from its :func:`check` breaches: False when a limit was
    breached (on a partial run too: a breach at a smaller load is a breach), None when it
    is unknown (only limits a buffered stream made unmeasurable, or none breached on a
    partial run or by a client that offered less than the load: met at less than the target
    load is not met), True when every limit held."""
    if unknown(breaches):
        return None
    if breaches:
        return False
    return None if offered_less_than_asked(summary) else True


def offered_less_than_asked(summary: Mapping[str, Any]) -> bool:
    """The run offered less than its load (a lost worker, or a client that fell short:
    :func:`~pytest_k3accept.observe.load.saturation.offered_less`): limits met on it are
    not met at the load."""
    from ..observe.load.saturation import offered_less

    return bool(summary.get("partial")) or offered_less(summary.get("client_limited"))


def unknown(breaches: Sequence[Breach]) -> bool:
    """True when every breach is a limit that could not be measured because the stream was
    buffered (the SLO is then unknown, neither met nor breached)."""
    from ..observe.load import buffering

    return bool(breaches) and all(b.measured is None and b.note.startswith(
        buffering.BUFFERED) for b in breaches)


def judged(summary: Mapping[str, Any], slo: SLO,
           records: Sequence[stats.Record] | None = None) -> list[dict[str, Any]]:
    """Every limit of ``slo`` as judged on a run: ``name``, ``measured`` (None when not
    measured), ``required``, ``direction``, ``unit``, ``ok``: the limits that held are
    recorded too, not only the breaches of :func:`check` (``ok`` None on a partial run:
    held at less than the target load)."""
    from ..observe.load import stats

    breached = {b.name: b for b in check(summary, slo, records)}
    lim, out = slo.limits, []
    good = (stats.goodput(records, float(summary.get("elapsed") or 0.0),
                          ttft=lim.get("goodput_ttft"), tpot=lim.get("goodput_tpot"),
                          e2e=lim.get("goodput_e2e"))
            if records is not None and not breached.keys() & {"goodput", "goodput_ratio"}
            and lim.keys() & {"goodput", "goodput_ratio"} else None)
    for name, required in lim.items():
        direction, unit, _ = SLO_KEYS[name]
        if direction == "limit":
            continue
        if name in breached:
            out.append({**breached[name].as_dict(), "ok": False})
            continue
        measured = (good or {}).get("ratio" if name == "goodput_ratio" else "goodput") if (
            name.startswith("goodput")) else stats.metric(summary, name)
        out.append({"name": name, "measured": measured, "required": required,
                    "direction": direction, "unit": unit, "note": _saturated(summary),
                    "ok": None if offered_less_than_asked(summary) else True})
    return out


def _why_missing(summary: Mapping[str, Any], name: str) -> str:
    buffered = summary.get("latency_unreliable")
    if buffered and (name.split("_")[0] in ("ttft", "itl", "tpot")
                     or name.startswith("goodput")):
        return str(buffered)
    if name.startswith("goodput"):
        return "needs the per-request records"
    if not summary.get("ok"):
        return "no successful request"
    if name.split("_")[0] in ("ttft", "itl"):
        return "needs streaming (stream = true)"
    return "not in the summary"
