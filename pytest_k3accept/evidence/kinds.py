"""Typed evidence: one dataclass per kind the verdict rests on, each made in one place.

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

#: where a run's target came from when nobody set one (``keep`` needs a target that was set)
DEFAULT_TARGET = "default"


def _check(obj: Any) -> None:
    """Raise TypeError naming the first field whose value has the wrong type."""
    name = type(obj).__name__
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        want = _TYPES.get(str(f.type).replace(" ", ""))
        if want is None:
            continue
        if value is None and "None" in str(f.type):
            continue
        if isinstance(value, bool) and bool not in want:
            raise TypeError(f"{name}.{f.name}: expected {f.type}, got {value!r}")
        if not isinstance(value, want):
            raise TypeError(f"{name}.{f.name}: expected {f.type}, got {type(value).__name__} "
                            f"{value!r}")


_NUM = (int, float)
_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": _NUM, "bool": (bool,),
    "int|None": (int,), "float|None": _NUM, "bool|None": (bool,), "str|None": (str,),
    "dict[str,int]": (dict,), "dict[str,Any]": (dict,), "tuple[str,...]": (tuple,),
    "tuple[dict[str,Any],...]": (tuple,),
}


@dataclass(frozen=True)
class LoadRun:
    """One measured load run: what was sent, how it held and what the server showed.

    ``context_tokens`` is what was *measured*: the longest prompt of a successful request in
    the server's ``usage`` (the synthetic target only when no usage was returned);
    ``target_source`` says who set the load (a profile file, a marker, a preset's targets,
    values given to ``k3_load.run``) or :data:`DEFAULT_TARGET` when nobody did; ``target`` is
    True when the run is at least the test's target load (a ``k3_headroom`` test), False for
    a reduced load in such a test, None when the test named no target.
    ``peak_kv`` is the highest KV-cache usage sampled *during* the run (the worst engine), or
    1.0 when preemptions prove the cache was full; None when no sample was taken.
    """

    KIND: ClassVar[str] = "load"

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
    sustained_waiting: float | None = None
    target_source: str = DEFAULT_TARGET
    target: bool | None = None
    failover: bool = False
    load_factor: float = 1.0
    endpoint: str = ""

    def __post_init__(self) -> None:
        _check(self)

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
class HeadroomJudgement:
    """The ``k3_headroom`` judgement of one run, with the limits the test set.

    ``ok`` is None when it could not be decided (peak KV not measured): "unknown", never
    "headroom OK".
    """

    KIND: ClassVar[str] = "headroom"

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

    def __post_init__(self) -> None:
        _check(self)

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
class SloJudgement:
    """The SLO check of one run: the limits and each breach (measured vs required)."""

    KIND: ClassVar[str] = "slo"

    run_id: str
    ok: bool
    limits: dict[str, Any] = field(default_factory=dict)
    breaches: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        _check(self)

    def to_data(self) -> dict[str, Any]:
        """Plain values."""
        return {"run_id": self.run_id, "ok": self.ok, "limits": dict(self.limits),
                "breaches": [dict(b) for b in self.breaches]}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "SloJudgement":
        """Read back :meth:`to_data` (and the older ``{"breaches", "slo"}`` form)."""
        breaches = tuple(dict(b) for b in data.get("breaches") or () if isinstance(b, Mapping))
        limits = data.get("limits") or data.get("slo") or {}
        ok = data.get("ok")
        return cls(run_id=str(data.get("run_id") or ""),
                   ok=bool(ok) if isinstance(ok, bool) else not breaches,
                   limits=dict(limits) if isinstance(limits, Mapping) else {},
                   breaches=breaches)


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


#: evidence kind -> its type, for reading a record back
TYPES: dict[str, type] = {t.KIND: t for t in (LoadRun, HeadroomJudgement, SloJudgement)}
