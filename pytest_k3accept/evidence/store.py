"""What one acceptance session observed, as plain data.

Fixtures and markers append :class:`Evidence` here (server timeline, failure classification,
load summaries, host facts, cache A/B ...); the checklist, the verdict, the record and the
report read it afterwards. Nothing here talks to a server or imports pytest, so every consumer
is testable with constructed state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..checks.registry import Checklist


@dataclass(frozen=True)
class Evidence:
    """One observation a decision can rest on.

    ``kind`` is a short tag (``"endpoint"``, ``"timeline"``, ``"classification"``,
    ``"load"``, ``"host"``, ``"prefix-cache-ab"``, ``"headroom"`` ...), ``nodeid`` the test
    that produced it (empty for session-level observations), ``summary`` one human line and
    ``data`` a JSON-serializable mapping with the figures.
    """

    kind: str
    summary: str
    data: dict[str, Any] = field(default_factory=dict)
    nodeid: str = ""
    at: float = field(default_factory=time.time)
    #: the typed form (:mod:`.kinds`) when the producer made one; ``data`` is its plain view
    typed: Any = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "summary": self.summary, "data": self.data,
                "nodeid": self.nodeid, "at": self.at}


@dataclass
class RunState:
    """Everything a session observed; one instance per pytest session (``config.stash``)."""

    started_at: float = field(default_factory=time.time)
    evidence: list[Evidence] = field(default_factory=list)
    checklist: Checklist = field(default_factory=Checklist)
    tests: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    #: the comparison with ``--k3-baseline`` (``compare.Comparisons``), set at session end
    comparison: Any = None
    #: prefix of this process's run ids (an xdist worker's id), so merged ids stay unique
    run_prefix: str = ""
    _runs: int = 0

    def __post_init__(self) -> None:
        # the checklist reads this session's evidence: no item passes without its evidence
        self.checklist.evidence_of = lambda: self.evidence

    def add(self, kind: str, summary: str, data: dict[str, Any] | None = None,
            nodeid: str = "") -> Evidence:
        """Append and return a piece of evidence.

        Plain data of a typed kind (:data:`~.kinds.TYPES`) is read into its type here
        (:func:`~.kinds.typed_of`): a wrong shape raises TypeError naming the field, at the
        call site. (A load / headroom / SLO entry without a run id, an older record's, stays
        plain and is read as before; a kind with no type is a team's own.)"""
        from .kinds import typed_of

        plain = dict(data or {})
        typed = typed_of(kind, plain)
        if typed is not None:  # the record is written from the type: its view wins
            merge = getattr(typed, "merged", None)
            plain = merge(plain) if merge is not None else {**plain, **typed.to_data()}
        ev = Evidence(kind=kind, summary=summary, data=plain, nodeid=nodeid, typed=typed)
        self.evidence.append(ev)
        return ev

    def add_typed(self, obj: Any, summary: str, nodeid: str = "",
                  extra: dict[str, Any] | None = None) -> Evidence:
        """Append typed evidence (a :mod:`.kinds` dataclass): its kind and plain view are
        taken from the object (``extra``: more plain figures beside it, for the report; the
        typed view wins on a shared key), the object itself kept for readers by type."""
        ev = Evidence(kind=obj.KIND, summary=summary, data={**(extra or {}), **obj.to_data()},
                      nodeid=nodeid, typed=obj)
        self.evidence.append(ev)
        return ev

    def next_run_id(self) -> str:
        """A new load-run id, unique in this session (``run-1``, ``run-2`` ...; on an xdist
        worker ``gw0-run-1`` ...)."""
        self._runs += 1
        return f"{self.run_prefix}run-{self._runs}"

    def of_kind(self, kind: str) -> list[Evidence]:
        """All evidence of one kind, in the order it was observed."""
        return [e for e in self.evidence if e.kind == kind]

    def latest(self, kind: str) -> Evidence | None:
        """The most recent evidence of a kind, if any."""
        found = self.of_kind(kind)
        return found[-1] if found else None
