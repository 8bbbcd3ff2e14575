"""Typed evidence of the server's life: its startup timeline and the classification of it.

Both are made in one place, ``fixtures/server.py``, from the observed server
(:class:`~pytest_k3accept.observe.server.observe.ServerWatch`); :mod:`~pytest_k3accept.decide.findings`
reads them by type. :meth:`from_data` is the one reader of the plain forms: the producer's
``as_dict()``, a record read back, and the shapes older records and team suites used (events
as a list or a mapping, ``init_completed`` / ``init_done`` flags, evidence lines under
``evidence_lines`` / ``lines`` / ``evidence[].text``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ._base import Kind, _read, _tuple_of_dicts


def _events(value: Any) -> Any:
    """Timeline events as a tuple of ``{"key", ...}`` dicts: from the list form, or from the
    mapping form ``{key: seconds or event}`` (an unobserved event, None/False, is dropped)."""
    if isinstance(value, Mapping):
        out = []
        for key, ev in value.items():
            if ev in (None, False):
                continue
            out.append({**ev, "key": str(key)} if isinstance(ev, Mapping)
                       else {"key": str(key), "at": ev if isinstance(ev, (int, float))
                             and not isinstance(ev, bool) else None})
        return tuple(out)
    if isinstance(value, (list, tuple)):
        return tuple({**ev, "key": str(ev.get("key") or ev.get("name"))}
                     for ev in value if isinstance(ev, Mapping))
    return value


@dataclass(frozen=True)
class ServerTimeline(Kind):
    """The startup events seen in the server's log (latest start), with its figures.

    ``init_done`` is an explicit flag (an older record's ``init_completed``); otherwise engine
    init counts as completed when the ``engine_init_done`` event was seen.
    """

    KIND: ClassVar[str] = "timeline"

    events: tuple[dict[str, Any], ...] = ()
    missing: tuple[str, ...] = ()
    init_seconds: float | None = None
    init_before_first_response: bool | None = None
    kv_cache_tokens: int | None = None
    kv_max_concurrency: float | None = None
    vllm_version: str | None = None
    earlier_starts: int = 0
    mode: str = ""
    when: str = ""
    init_done: bool | None = None

    @property
    def keys(self) -> set[str]:
        """Keys of the events observed."""
        return {str(ev.get("key")) for ev in self.events}

    @property
    def init_completed(self) -> bool:
        """Engine init was seen completing."""
        return self.init_done if self.init_done is not None else "engine_init_done" in self.keys

    @property
    def first_response(self) -> bool:
        """A first successful response was seen."""
        return "first_response" in self.keys

    def to_data(self) -> dict[str, Any]:
        """Plain values (events as a list)."""
        return {**super().to_data(), "init_completed": self.init_completed}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "ServerTimeline":
        """Read any plain form (see the module docstring)."""
        known = _read(cls, data, strs=("missing",))
        if "events" in known:
            known["events"] = _events(known["events"])
        if "init_done" in data:  # this type's own form (to_data)
            flag = data["init_done"]
        else:  # an older record's or a team's flag
            flag = next((data[k] for k in ("init_completed", "init_complete")
                         if isinstance(data.get(k), bool)), None)
        known["init_done"] = flag
        return cls(**known)


@dataclass(frozen=True)
class ServerClassification(Kind):
    """The classification of the server's life: category, phase, quoted lines, advice.

    ``lines`` are the quoted deciding lines (texts); ``evidence`` the same with line numbers.
    ``layer`` is the producer's own statement of the layer to change (None: the decision
    derives it from the category). ``init_completed`` True when the classifier saw init end.
    """

    KIND: ClassVar[str] = "classification"

    category: str = "none"
    phase: str = ""
    stage: str = ""
    lines: tuple[str, ...] = ()
    evidence: tuple[dict[str, Any], ...] = ()
    advice: str = ""
    rule: str = ""
    confidence: str = ""
    exit_code: int | None = None
    layer: str | None = None
    init_completed: bool | None = None
    root_cause: dict[str, Any] | None = None
    consequences: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    mode: str = ""
    when: str = ""

    @property
    def failed(self) -> bool:
        """A failure was classified (any category but ``none``)."""
        return self.category != "none"

    def to_data(self) -> dict[str, Any]:
        """Plain values, in the classifier's ``as_dict`` layout (``evidence_lines`` too)."""
        return {**super().to_data(), "evidence_lines": list(self.lines)}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "ServerClassification":
        """Read any plain form (see the module docstring)."""
        known = _read(cls, data, strs=("notes",), dicts=("consequences",))
        raw = data.get("evidence_lines", data.get("lines"))
        quotes = data.get("evidence")
        if isinstance(quotes, (list, tuple)):
            known["evidence"] = tuple(dict(q) if isinstance(q, Mapping) else {"text": str(q)}
                                      for q in quotes)
            if raw is None:
                raw = [q.get("text", "") for q in known["evidence"]]
        if isinstance(raw, str):
            raw = [raw]
        known["lines"] = tuple(str(x) for x in raw) if isinstance(raw, (list, tuple)) else ()
        if "category" in known and known["category"] is None:
            known["category"] = "none"
        if isinstance(known.get("consequences"), tuple):
            known["consequences"] = _tuple_of_dicts(known["consequences"])
        return cls(**known)
