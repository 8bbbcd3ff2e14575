"""One session judged as a re-measurement of a baseline record (pure; no pytest).

:func:`compare` puts two records (:class:`~.read.Record`) side by side: the request sets,
every condition that changed, the measured figures per load run with their marks and
regressions beyond the thresholds, C6/C7 across sessions and both verdicts ("was keep, now
scale"). :class:`Unavailable` is a baseline that could not be used ("no comparison: why");
:class:`Comparisons` holds one of either per ``--k3-baseline``. All three render as text,
Markdown, HTML and plain data (:mod:`.render`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..checks.procedure.sessions import Outcome, across_sessions
from . import render
from .diff import Conditions, RequestSets, conditions, request_sets
from .figures import Row, rows
from .read import Record, RecordError
from .thresholds import Thresholds


@dataclass
class Comparison:
    """The comparison of this session (``new``) with one baseline (``old``)."""

    old: Record
    new: Record
    thresholds: Thresholds
    requests: RequestSets
    conditions: Conditions
    rows: list[Row]
    items: dict[str, Outcome]
    notes: list[str] = field(default_factory=list)
    label: str = "baseline"

    available = True

    @property
    def regressions(self) -> list[str]:
        """One line per figure worse than its threshold allows (measured vs baseline)."""
        return [render.regression_line(r, self.thresholds) for r in self.rows if r.regression]

    @property
    def verdicts(self) -> str:
        """``"was keep, now scale"`` (or ``"keep in both"``)."""
        a, b = self.old.verdict, self.new.verdict
        return f"{a} in both sessions" if a == b else f"was {a}, now {b}"

    def problems(self) -> list[str]:
        """Why a ``k3_baseline`` test fails: regressions, then failed C6/C7 items."""
        return self.regressions + [msg for outcome, msg in self.items.values()
                                   if outcome == "fail"]

    def lines(self) -> list[str]:
        return render.text_lines(self)

    def to_markdown(self) -> str:
        return render.markdown(self)

    def to_html(self) -> str:
        return render.html_fragment(self)

    def to_data(self) -> dict[str, Any]:
        return render.data(self)


@dataclass
class Unavailable:
    """A baseline that could not be used, and why."""

    source: str
    reason: str
    label: str = "baseline"

    available = False
    regressions: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return []

    def lines(self) -> list[str]:
        return [f"no comparison: {self.reason}"]

    def to_markdown(self) -> str:
        head = f"#### {render.md_escape(self.label)}\n\n" if self.label != "baseline" else ""
        return f"{head}**no comparison**: {render.md_escape(self.reason)}\n"

    def to_html(self) -> str:
        return render.unavailable_html(self)

    def to_data(self) -> dict[str, Any]:
        return {"available": False, "source": self.source, "reason": self.reason,
                "regressions": []}


@dataclass
class Comparisons:
    """One comparison per baseline (``--k3-baseline`` is repeatable)."""

    each: list[Comparison | Unavailable]

    @property
    def available(self) -> bool:
        return any(c.available for c in self.each)

    @property
    def regressions(self) -> list[str]:
        many = len(self.each) > 1
        return [f"{c.label}: {r}" if many else r for c in self.each for r in c.regressions]

    def problems(self) -> list[str]:
        many = len(self.each) > 1
        return [f"{c.label}: {p}" if many else p for c in self.each for p in c.problems()]

    def lines(self) -> list[str]:
        return [line for c in self.each for line in c.lines()]

    def to_markdown(self) -> str:
        return "\n".join(c.to_markdown() for c in self.each)

    def to_html(self) -> str:
        return "\n".join(c.to_html() for c in self.each)

    def to_data(self) -> dict[str, Any]:
        return {"available": self.available, "regressions": self.regressions,
                "baselines": [c.to_data() for c in self.each]}


def compare(old: Record, new: Record, thresholds: Thresholds | None = None,
            label: str = "baseline") -> Comparison:
    """Judge ``new`` as a re-measurement of ``old``. Raises :class:`RecordError` when the two
    are not comparable (records of other models)."""
    if old.model and new.model and old.model != new.model:
        raise RecordError(f"{old.source}: the baseline is a record of model {old.model!r}; "
                          f"this one serves {new.model!r}: records of other models are not "
                          "a before/after (pass a baseline of the same model)")
    th = thresholds or Thresholds()
    figures, notes, pairs = rows(old, new, th)
    sets = request_sets(old, new, pairs)
    cond = conditions(old, new)
    launch_known = "launch arguments" not in cond.unknown_both and not any(
        s.startswith("launch arguments") for s in cond.one_sided)
    items = across_sessions(sets.status, sets.line, cond.variables, cond.changed_lines(),
                            launch_known=launch_known)
    notes = [*(f"baseline: {n}" for n in old.notes), *notes]
    if (old.data.get("session") or {}).get("interrupted"):
        notes.append("the baseline session was interrupted (Ctrl-C): its figures may be "
                     "incomplete")
    if not pairs:
        notes.append("no load run matched between the two sessions: no load figures compared")
    return Comparison(old, new, th, sets, cond, figures, items, notes, label)


def unusable(source: str, exc: Exception, label: str = "baseline") -> Unavailable:
    """The :class:`Unavailable` of a baseline that raised ``exc`` (its message is the why)."""
    return Unavailable(source, str(exc), label)


def labels(sources: Sequence[str]) -> list[str]:
    """``baseline`` for one, ``baseline 1`` ... for several."""
    return ["baseline"] if len(sources) == 1 else [f"baseline {i}" for i in
                                                    range(1, len(sources) + 1)]
