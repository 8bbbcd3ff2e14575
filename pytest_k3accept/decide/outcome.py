"""The verdict as a value: its six names, headlines, and the builder the rules fill.

A :class:`Verdict` is what the session decided: its name, the reasons (each citing evidence),
the evidence entries it rests on, advice, the limits that held and the checklist items not
checked. :class:`Builder` collects reasons and advice while a rule decides
(:mod:`.rules`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..checks.registry import ITEMS
from . import findings as fnd
from .layers import Layers

KEEP, ACCEPT_LIMITS, SCALE = "keep", "accept-limits", "scale"
MOVE_ENVIRONMENT, FUNCTIONAL_ONLY, UNDECIDED = "move-environment", "functional-only", "undecided"
NAMES: tuple[str, ...] = (KEEP, ACCEPT_LIMITS, SCALE, MOVE_ENVIRONMENT, FUNCTIONAL_ONLY,
                          UNDECIDED)

HEADLINES: dict[str, str] = {
    KEEP: "stable with headroom at the target load: keep the setup, strengthen monitoring",
    ACCEPT_LIMITS: "stable only at reduced limits: take them as the service contract, or "
                   "scale past them",
    SCALE: "no headroom at the target load: scale out (multi-node) or move to a larger "
           "environment",
    MOVE_ENVIRONMENT: "the environment is wrong for this model: fix or move it before any "
                      "tuning",
    FUNCTIONAL_ONLY: "functional verification only: never evidence of production capacity",
    UNDECIDED: "the evidence does not support a decision yet",
}

@dataclass
class Verdict:
    """A decision with what it rests on."""

    name: str
    headline: str = ""
    reasons: list[str] = field(default_factory=list)
    evidence: list[dict[str, str]] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    limits: dict[str, Any] = field(default_factory=dict)
    blocked_layers: list[str] = field(default_factory=list)
    layers: dict[str, Any] = field(default_factory=dict)
    #: the session's checklist items (built-in and custom), for naming unchecked ones
    items: dict[str, tuple[str, str]] = field(default_factory=lambda: dict(ITEMS), repr=False)

    def __post_init__(self) -> None:
        if self.name not in NAMES:
            raise ValueError(f"unknown verdict {self.name!r}; one of {', '.join(NAMES)}")
        self.headline = self.headline or HEADLINES[self.name]

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-serializable values (for the record and the report)."""
        items = self.items
        return {"name": self.name, "headline": self.headline, "reasons": list(self.reasons),
                "evidence": [dict(e) for e in self.evidence],
                "not_checked": [{"id": c, "slug": items.get(c, ("", ""))[0]}
                                for c in self.not_checked],
                "advice": list(self.advice), "limits": dict(self.limits),
                "blocked_layers": list(self.blocked_layers), "layers": dict(self.layers)}


class Builder:
    """Reasons, cited evidence, advice and blocked layers of the verdict being decided."""

    def __init__(self, layers: Layers, not_checked: list[str]) -> None:
        self.layers = layers
        self.not_checked = not_checked
        self.reasons: list[str] = []
        self.refs: list[dict[str, str]] = []
        self.advice: list[str] = []
        self.blocked: list[str] = []

    def cite(self, ref: fnd.Ref, text: str | None = None) -> None:
        self.reasons.append(text or ref.cite())
        entry = {"kind": ref.kind, "nodeid": ref.nodeid, "summary": ref.summary}
        if entry not in self.refs:
            self.refs.append(entry)

    def done(self, name: str, limits: Mapping[str, Any] | None = None) -> Verdict:
        return Verdict(name, reasons=self.reasons, evidence=self.refs,
                       not_checked=self.not_checked, advice=list(dict.fromkeys(self.advice)),
                       limits=dict(limits or {}), blocked_layers=self.blocked,
                       layers=self.layers.as_dict())
