"""Typed evidence: one dataclass per kind the verdict rests on, each made in one place.

This module holds the load-run kinds and the registry :data:`TYPES` of every kind; the
server's life (:mod:`.server`), the environment (:mod:`.environment`) and what tests saw
(:mod:`.outcomes`) have modules of their own.

A load run (:class:`LoadRun`, made by ``fixtures/load.py`` from a finished
:class:`~pytest_k3accept.observe.load.result.LoadResult`), the headroom judgement of one run
(:class:`HeadroomJudgement`) and the SLO judgement of one run (:class:`SloJudgement`). A
judgement carries the ``run_id`` of the run it judged, so a sweep of 16 / 8 / 4 streams pairs
each judgement with its own run, never with the test's last load.

Each kind has ``KIND`` (the evidence kind in the record), :meth:`to_data` (JSON-serializable,
what the record keeps) and :meth:`from_data` (the record read back: a team's or an older
record). A wrong type on construction raises :class:`TypeError` naming the field, at the call
site, not a wrong verdict later. Figures not measured are ``None`` ("unknown"), never 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from ._base import Kind, _known
from .environment import EnvironmentCheck, HostObservation
from .outcomes import PrefixCacheAB, Procedure, ProcedureStep, Response
from .server import ServerClassification, ServerTimeline

__all__ = ["DEFAULT_TARGET", "LoadRun", "HeadroomJudgement", "SloJudgement", "ServerTimeline",
           "ServerClassification", "EnvironmentCheck", "HostObservation", "Response",
           "PrefixCacheAB", "Procedure", "ProcedureStep", "TYPES", "typed_of"]

#: where a run's target came from when nobody set one (``keep`` needs a target that was set)
DEFAULT_TARGET = "default"


@dataclass(frozen=True)
class LoadRun(Kind):
    """One measured load run: what was sent, how it held and what the server showed.

    ``context_tokens`` is what was *measured*: the longest prompt of a successful request in
    the server's ``usage`` (the synthetic target only when no usage was returned);
    ``target_source`` says who set the load (a profile file, a marker, a preset's targets,
    values given to ``k3_load.run``) or :data:`DEFAULT_TARGET` when nobody did; ``target`` is
    True when the run is at least the test's target load (a ``k3_headroom`` test), False for
    a reduced load in such a test, None when the test named no target.
    ``peak_kv`` is the highest KV-cache usage sampled *during* the run (the worst engine), or
    1.0 when preemptions prove the cache was full; None when no sample was taken or none
    caught a request running or KV in use (``gauge_busy_samples == 0``: an idle server's 0 %).
    ``shared`` is True when the server's own counters show more work than the run sent
    (``other_requests`` other requests finished: another client's traffic is in the
    figures), False when they match, None when the server exports no such counters.
    """

    KIND: ClassVar[str] = "load"
    #: plain data is read as this kind only when it has these keys (older records lack them)
    NEEDS: ClassVar[tuple[str, ...]] = ("run_id",)

    run_id: str
    profile_name: str
    concurrency: int | None
    context_tokens: int | None
    requests: int
    ok: int
    errors: int
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    prompt_tokens_p50: float | None = None
    prompt_tokens_max: int | None = None
    preemptions: float | None = None
    peak_kv: float | None = None
    peak_kv_from: str | None = None
    gauge_samples: int | None = None
    #: samples that caught a request running or KV in use (None: no such gauge to tell)
    gauge_busy_samples: int | None = None
    sustained_waiting: float | None = None
    target_source: str = DEFAULT_TARGET
    target: bool | None = None
    failover: bool = False
    load_factor: float = 1.0
    endpoint: str = ""
    #: why TTFT/ITL were not measurable (a buffering proxy); None when they were
    latency_unreliable: str | None = None
    #: how the client itself limited the run (observe.load.saturation); None: it did not
    client_limited: str | None = None
    #: the worst lateness of the client's event loop in seconds (observe.load.looplag; a
    #: split run: its worst worker's); None: not measured
    client_loop_lag: float | None = None
    #: the server served other clients during the run (figures include them); None: unknown
    shared: bool | None = None
    other_requests: int | None = None
    #: worker processes the run was split over (observe.load.split); 1: one process
    processes: int = 1
    #: which worker was lost mid-run and how (its records with it); None: none was
    partial: str | None = None
    #: the context the run was asked for (a synthetic set's target); None: a team's request
    #: set, whose longest prompt is what it asked. Picks the heaviest run as the target even
    #: when failures shrank ``context_tokens`` (measured from successful requests only)
    asked_context_tokens: int | None = None

    @property
    def error_rate(self) -> float:
        """Failed requests / requests sent (0 when nothing was sent)."""
        return self.errors / self.requests if self.requests else 0.0

    def to_data(self) -> dict[str, Any]:
        """Plain values (the record's ``data`` of a ``load`` evidence entry)."""
        out = dataclasses.asdict(self)
        out["error_rate"] = self.error_rate
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "LoadRun":
        """Read back :meth:`to_data` (unknown keys ignored; missing ones default)."""
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class HeadroomJudgement(Kind):
    """The ``k3_headroom`` judgement of one run, with the limits the test set.

    ``ok`` is None when it could not be decided (peak KV not measured): "unknown", never
    "headroom OK".
    """

    KIND: ClassVar[str] = "headroom"
    #: plain data is read as this kind only when it has these keys (older records lack them)
    NEEDS: ClassVar[tuple[str, ...]] = ("run_id",)

    run_id: str
    ok: bool | None
    reasons: tuple[str, ...] = ()
    min_free: float = 0.10
    max_error_rate: float = 0.0
    max_preemptions: float = 0.0
    max_waiting: float | None = 0.0
    free_kv: float | None = None
    failover: bool = False
    replicas: int | None = None

    def to_data(self) -> dict[str, Any]:
        """Plain values."""
        out = dataclasses.asdict(self)
        out["reasons"] = list(self.reasons)
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "HeadroomJudgement":
        """Read back :meth:`to_data`."""
        known = _known(cls, data)
        known["reasons"] = tuple(str(r) for r in known.get("reasons") or ())
        return cls(**known)


@dataclass(frozen=True)
class SloJudgement(Kind):
    """The SLO check of one run: the limits, each breach (measured vs required) and every
    limit checked (``checked``: required vs measured with ``ok``, the passing ones too)."""

    KIND: ClassVar[str] = "slo"
    #: plain data is read as this kind only when it has these keys (older records lack them)
    NEEDS: ClassVar[tuple[str, ...]] = ("run_id",)

    run_id: str
    ok: bool | None  # None: a limit could not be measured (a buffered stream's TTFT)
    limits: dict[str, Any] = field(default_factory=dict)
    breaches: tuple[dict[str, Any], ...] = ()
    checked: tuple[dict[str, Any], ...] = ()

    def to_data(self) -> dict[str, Any]:
        """Plain values."""
        return {"run_id": self.run_id, "ok": self.ok, "limits": dict(self.limits),
                "breaches": [dict(b) for b in self.breaches],
                "checked": [dict(c) for c in self.checked]}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "SloJudgement":
        """Read back :meth:`to_data` (and the older ``{"breaches", "slo"}`` form)."""
        breaches = tuple(dict(b) for b in data.get("breaches") or () if isinstance(b, Mapping))
        limits = data.get("limits") or data.get("slo") or {}
        ok = data.get("ok")
        return cls(run_id=str(data.get("run_id") or ""),
                   ok=(bool(ok) if isinstance(ok, bool) else None if "ok" in data
                       else not breaches),
                   limits=dict(limits) if isinstance(limits, Mapping) else {},
                   breaches=breaches,
                   checked=tuple(dict(c) for c in data.get("checked") or ()
                                 if isinstance(c, Mapping)))


#: evidence kind -> its type, for reading a record back (every kind the verdict, the record
#: or the report reads; a kind not listed here is a team's own and stays plain)
TYPES: dict[str, type] = {t.KIND: t for t in (
    LoadRun, HeadroomJudgement, SloJudgement, ServerTimeline, ServerClassification,
    EnvironmentCheck, HostObservation, Response, PrefixCacheAB, Procedure)}


def typed_of(kind: str, data: Mapping[str, Any]) -> Any:
    """The typed form of plain evidence data, or None when ``kind`` has no type or the data
    lacks the keys its type needs (an older record's load entry without a run id). A wrong
    shape raises :class:`TypeError` naming the field."""
    cls = TYPES.get(kind)
    if cls is None or not all(k in data for k in getattr(cls, "NEEDS", ())):
        return None
    return cls.from_data(data)  # type: ignore[attr-defined]
