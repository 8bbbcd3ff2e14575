"""Typed evidence of what a session's tests saw: a response, the prefix-cache A/B and the
re-measurement procedure (its steps).

Each is made in one place: :class:`Response` by ``fixtures/suites.record_response`` (a suite's
successful request: figures, no texts), :class:`PrefixCacheAB` by ``fixtures/decide.py`` from
:class:`~pytest_k3accept.checks.prefix_ab.compare.ABResult`, :class:`Procedure` by
``fixtures/decide.py`` from :class:`~pytest_k3accept.checks.procedure.run.ProcedureResult`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ._base import Kind, _read


@dataclass(frozen=True)
class Response(Kind):
    """One response a test saw: status, latency and token counts (no prompt or answer)."""

    KIND: ClassVar[str] = "response"

    ok: bool = True
    status: int | None = None
    what: str = ""
    ttft: float | None = None
    e2e: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    stream: bool | None = None
    chunks: int | None = None
    tool_calls: int = 0


@dataclass(frozen=True)
class PrefixCacheAB(Kind):
    """The prefix-cache A/B (C8): ``status`` pass / fail / incomplete; ``ok`` False only when
    it found a fault (incomplete, e.g. no prefix-cache counters, is not a fault)."""

    KIND: ClassVar[str] = "prefix-cache-ab"

    status: str
    ok: bool
    message: str = ""
    compared: bool = False
    shape: dict[str, Any] | None = None
    on: dict[str, Any] | None = None
    off: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "PrefixCacheAB":
        """Read back :meth:`to_data` (an older entry with only ``ok``: status from it)."""
        known = _read(cls, data, strs=("notes", "problems"))
        ok = known.get("ok")
        if "status" not in known:
            known["status"] = "pass" if ok is True else "fail" if ok is False else "incomplete"
        if ok is None:
            known["ok"] = known["status"] != "fail"
        return cls(**known)


@dataclass(frozen=True)
class ProcedureStep(Kind):
    """One step of the re-measurement procedure (C7) with its measured figures.

    ``capacity``: the step measured a load the verdict can rest on; ``target``: at the
    target load. Figures not measured are None.
    """

    n: int
    name: str = ""
    status: str = ""
    capacity: bool = True
    target: bool = False
    summary: str = ""
    reason: str = ""
    variable: str | None = None
    change: str = ""
    concurrency: int | None = None
    context_tokens: int | None = None
    requests: int | None = None
    ok: int | None = None
    errors: int | None = None
    preemptions: float | None = None
    peak_kv: float | None = None
    headroom_ok: bool | None = None
    #: the step's run lost a worker mid-run (what it says); None: it did not
    partial: str | None = None

    @property
    def ran(self) -> bool:
        """The step ran and measured a capacity figure."""
        return self.status == "ran" and self.capacity

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "ProcedureStep":
        """Read a step of the procedure's step log."""
        known = _read(cls, data)
        known["capacity"] = bool(known.get("capacity", True))
        known["target"] = bool(known.get("target", False))
        for name in ("summary", "reason", "change", "name", "status"):
            if known.get(name) is None:
                known[name] = ""
        return cls(**known)


@dataclass(frozen=True)
class Procedure(Kind):
    """The re-measurement procedure: its steps (each typed) and whether one variable changed
    at a time."""

    KIND: ClassVar[str] = "procedure"

    steps: tuple[ProcedureStep, ...] = ()
    one_variable: bool | None = None
    problems: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        for step in self.steps:
            if not isinstance(step, ProcedureStep):
                raise TypeError(f"Procedure.steps: expected ProcedureStep, got {step!r}")

    def to_data(self) -> dict[str, Any]:
        """Plain values."""
        return {"steps": [s.to_data() for s in self.steps], "one_variable": self.one_variable,
                "problems": list(self.problems)}

    def merged(self, plain: Mapping[str, Any]) -> dict[str, Any]:
        """``plain`` (the procedure's own step log) with each step's typed view laid over
        it: the figures the types hold win, the step log's other keys stay."""
        out = {**plain, **self.to_data()}
        raw = [s for s in plain.get("steps") or () if isinstance(s, Mapping)]
        if len(raw) == len(self.steps):
            out["steps"] = [{**r, **s.to_data()} for r, s in zip(raw, self.steps)]
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "Procedure":
        """Read back :meth:`to_data` or the procedure's ``as_dict`` (steps with extra keys)."""
        raw = data.get("steps") or ()
        if not isinstance(raw, (list, tuple)):
            raise TypeError(f"Procedure.steps: expected a list of steps, got {raw!r}")
        steps = tuple(ProcedureStep.from_data(s) for s in raw if isinstance(s, Mapping))
        known = _read(cls, data, strs=("problems",))
        known["steps"] = steps
        return cls(**known)
