"""Evidence read into the facts a verdict is decided on (pure: no pytest, no network).

:func:`read` turns a session's :class:`~pytest_k3accept.evidence.store.Evidence` into
:class:`Findings`: environment failures (host facts, lifecycle classification), capacity runs
(load, headroom and re-measurement procedure steps, each with its concurrency, context,
errors, preemptions and peak KV usage), whether engine init was seen completing, whether any
response was seen, and the audience. Every kind it reads is read **by type**
(:data:`~pytest_k3accept.evidence.kinds.TYPES`): :class:`EnvironmentCheck`,
:class:`ServerClassification`, :class:`ServerTimeline`, :class:`LoadRun`, the headroom and
SLO judgements (joined to their run by run id), :class:`Procedure` (its steps),
:class:`PrefixCacheAB` and :class:`Response`; the plain forms are read into those types by
each type's ``from_data``, in one place. Only two plain forms are read here: a load /
headroom / SLO entry without a run id (an older record) and ``audience``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..checks.slo import Breach
from ..evidence.kinds import (EnvironmentCheck, HeadroomJudgement, LoadRun, PrefixCacheAB,
                              Procedure, ProcedureStep, Response, ServerClassification,
                              ServerTimeline, SloJudgement, typed_of)
from ..evidence.store import Evidence
from ..observe.load.saturation import offered_less

#: checklist item of an environment check -> the layer its fix needs
ITEM_LAYER: dict[str, str] = {"C3": "container", "C4": "driver", "C5": "network"}
#: classification categories that mean "fix the environment first" (``host-oom``: host RAM
#: or the container's memory limit, the kernel's OOM killer or Ray's memory monitor)
ENVIRONMENT_CATEGORIES = ("environment", "loading", "connection", "host-oom")
#: classification categories that are a capacity shortage
CAPACITY_CATEGORIES = ("kv-capacity-at-init", "serving-oom")
#: classification categories that block any capacity verdict: an engine failure other than
#: memory, a rejected launch, a kill from outside with no OOM evidence, an unrecognised failure
BLOCKING_CATEGORIES = ("serving", "config", "killed", "unknown")


@dataclass(frozen=True)
class Ref:
    """Where a finding came from: evidence kind, test id and its summary line."""

    kind: str
    nodeid: str
    summary: str

    def cite(self) -> str:
        """``summary [kind, test]`` for a reason line."""
        where = f"{self.kind}, {self.nodeid}" if self.nodeid else self.kind
        return f"{self.summary} [{where}]"


@dataclass(frozen=True)
class Problem:
    """An environment failure or a failure classified from the server's life."""

    ref: Ref
    category: str
    layer: str | None = None
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run:
    """One measured load, with the limits its test set and the judgements of it.

    ``stable``: within the test's own limits (error rate, preemptions) and its SLOs, with at
    least one success. ``has_headroom``: True/False when known, None when any part of it was
    not measured ("unknown", never "headroom OK"): the peak KV usage, the preemptions (a
    ``/metrics`` without ``vllm:num_preemptions``), an SLO the run could not measure (a
    buffered stream's TTFT). A shortage seen in what *was* measured (KV past ``1 -
    min_free``, a queue past ``max_waiting``, errors, preemptions, a breached SLO) is False
    whatever is unknown. ``partial``: a worker of the run was lost mid-run (what it says);
    ``client_limited``: the client itself was the limit, in a way that may have offered less
    than the load (fewer requests in flight, a schedule that fell behind:
    :func:`~pytest_k3accept.observe.load.saturation.offered_less`). A run that offered less
    than its load keeps a shortage measured on it, but never holds "with headroom"
    (docs/load.md, "Past one process", "When the client is the limit").
    """

    ref: Ref
    concurrency: int | None
    context_tokens: int | None
    ok: int
    errors: int
    preemptions: float = 0.0
    peak_kv: float | None = None
    headroom: bool | None = None
    failover: bool = False
    target: bool | None = None
    min_free: float = 0.10
    error_kinds: tuple[tuple[str, int], ...] = ()
    run_id: str = ""
    requests: int | None = None
    max_error_rate: float = 0.0
    max_preemptions: float = 0.0
    target_source: str | None = None
    slo_ok: bool | None = None
    slo_breaches: tuple[str, ...] = ()
    headroom_reasons: tuple[str, ...] = ()
    partial: str | None = None
    #: how the client itself limited the run (None: it did not)
    client_limited: str | None = None
    #: False when the server did not export preemptions (``preemptions`` then reads 0)
    preemptions_known: bool = True
    #: requests queued for at least 1 s (None: not measured) and the test's limit for it
    sustained_waiting: float | None = None
    max_waiting: float | None = 0.0
    #: an SLO limit that could not be measured (a buffered stream's TTFT): why
    slo_unknown: tuple[str, ...] = ()
    #: the context the run was asked for (its profile's), beside the measured one
    asked_context_tokens: int | None = None

    @property
    def error_rate(self) -> float:
        """Failed requests / requests sent."""
        sent = self.requests if self.requests else self.ok + self.errors
        return self.errors / sent if sent else 0.0

    @property
    def failures(self) -> dict[str, int]:
        """Errors that are failures, not load: HTTP 4xx/5xx, connection, protocol (timeouts
        under load are a capacity signal and are not listed)."""
        return {k: n for k, n in self.error_kinds if n and k != "timeout"}

    @property
    def within_limits(self) -> bool:
        """Errors and preemptions within the limits the test set (default: none allowed)."""
        return (self.error_rate <= self.max_error_rate + 1e-12
                and self.preemptions <= self.max_preemptions)

    @property
    def stable(self) -> bool:
        """At least one success, within the test's own limits, and no SLO breached."""
        return self.ok > 0 and self.within_limits and self.slo_ok is not False

    @property
    def has_headroom(self) -> bool | None:
        """True/False when known: a shortage in what was measured is False (the explicit
        judgement, else peak KV above ``1 - min_free`` or a lasting queue above
        ``max_waiting``); True only when nothing was left unmeasured (:meth:`unknowns`
        empty), else None."""
        if not self.stable:
            return False
        if self.headroom is False:
            return False
        if self.headroom is None:
            if self.peak_kv is not None and self.peak_kv > 1.0 - self.min_free:
                return False
            if self.queued_too_long:
                return False
        return None if self.unknowns() else True

    @property
    def queued_too_long(self) -> bool:
        """Requests queued for at least 1 s beyond the test's ``max_waiting``."""
        return (self.max_waiting is not None and self.sustained_waiting is not None
                and self.sustained_waiting > self.max_waiting)

    def unknowns(self) -> list[str]:
        """Why this run's headroom cannot be called held, one phrase each (empty: it can)."""
        out: list[str] = []
        if self.headroom is None:
            if self.headroom_reasons:  # an undecided judgement says why
                out.extend(self.headroom_reasons)
            elif self.peak_kv is None:
                out.append("peak KV usage not measured")
            elif not self.preemptions_known:
                out.append("preemptions not measured (vllm:num_preemptions not exported)")
        out.extend(f"SLO not measured: {why}" for why in self.slo_unknown)
        if self.partial:
            out.append(f"judged on a partial run: {self.partial}")
        if offered_less(self.client_limited):
            out.append(f"the client was the limit, not the server: {self.client_limited}")
        return out

    def label(self) -> str:
        """``concurrency 16, context 6000 tokens``; an unknown part is named as unknown."""
        conc = "unknown" if self.concurrency is None else str(self.concurrency)
        ctx = ("unknown" if self.context_tokens is None
               else f"{self.context_tokens} tokens")
        return f"concurrency {conc}, context {ctx}"

    def figures(self) -> str:
        """The numbers a reason quotes."""
        kv = "unknown" if self.peak_kv is None else f"{self.peak_kv:.0%}"
        out = (f"{self.ok} ok, {self.errors} errors ({self.error_rate:.2%}, allowed "
               f"{self.max_error_rate:.2%}), {self.preemptions:g} preemptions, peak KV {kv}")
        if self.slo_breaches:
            out += "; SLO breached: " + "; ".join(self.slo_breaches)
        if self.partial:
            out += f"; judged on a partial run: {self.partial}"
        return out


@dataclass
class Findings:
    """What the evidence says, sorted for the decision."""

    environment: list[Problem] = field(default_factory=list)
    capacity: list[Problem] = field(default_factory=list)
    blocking: list[Problem] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    init_completed: Ref | None = None
    responses: list[Ref] = field(default_factory=list)
    audience: str | None = None
    cache_ab: list[tuple[Ref, bool]] = field(default_factory=list)
    #: the procedure's step 5 (two cache-retention settings compared): its ref and figures
    retention: list[tuple[Ref, dict[str, Any]]] = field(default_factory=list)
    unknown_env: list[Ref] = field(default_factory=list)
    #: failed SLO / headroom judgements no load run could be paired with (they still count
    #: against keep; an unpaired passing judgement is never a pass)
    failed_unpaired: list[Ref] = field(default_factory=list)
    #: a usage error that stopped the run; an endpoint that could not be reached
    usage_errors: list[Ref] = field(default_factory=list)
    unreachable: list[Ref] = field(default_factory=list)


def find(data: Any, *paths: str, default: Any = None) -> Any:
    """The first present value among dotted ``paths`` (``"profile.concurrency"``)."""
    for path in paths:
        cur = data
        for part in path.split("."):
            if isinstance(cur, Mapping) and part in cur:
                cur = cur[part]
            else:
                break
        else:
            if cur is not None:
                return cur
    return default


def _num(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value)


def _int_or_none(value: Any) -> int | None:
    return None if value is None or isinstance(value, bool) else int(_num(value))


def run_from(data: Mapping[str, Any], ref: Ref, target: bool | None = None) -> Run:
    """A :class:`Run` from a plain load / procedure-step mapping (an older record, a team's
    evidence); typed :class:`~pytest_k3accept.evidence.kinds.LoadRun` evidence is read by
    :func:`run_of` instead."""
    peak = find(data, "peak_kv", "server.peak_kv_usage", "peak_kv_usage")
    judged = find(data, "headroom_ok", "passed", *(("ok",) if ref.kind == "headroom" else ()))
    count = find(data, "summary.ok", "requests_ok", "ok")
    return Run(
        ref=ref,
        concurrency=_int_or_none(find(data, "concurrency", "profile.concurrency")),
        context_tokens=_int_or_none(find(data, "context_tokens", "profile.context_tokens")),
        ok=int(_num(count)),
        errors=int(_num(find(data, "summary.errors", "errors"))),
        preemptions=_num(find(data, "preemptions", "server.preemptions")),
        peak_kv=None if peak is None else _num(peak),
        headroom=judged if isinstance(judged, bool) else None,
        failover=bool(find(data, "failover", "replicas", default=False))
        or _num(find(data, "load_factor"), 1.0) > 1.0,
        target=target if target is not None else find(data, "target"),
        min_free=_num(find(data, "min_free", "limits.min_free", "profile.headroom.min_free"),
                      0.10),
        error_kinds=tuple((str(k), int(_num(n))) for k, n in (
            find(data, "summary.errors_by_kind", "errors_by_kind", default={}) or {}).items()),
        requests=_int_or_none(find(data, "summary.requests", "requests")),
        max_error_rate=_num(find(data, "max_error_rate", "limits.max_error_rate",
                                 "profile.headroom.max_error_rate"), 0.0),
        max_preemptions=_num(find(data, "max_preemptions", "limits.max_preemptions",
                                  "profile.headroom.max_preemptions"), 0.0),
        partial=_str_or_none(find(data, "partial", "summary.partial")),
    )


def _str_or_none(value: Any) -> str | None:
    return str(value) if value else None


def run_of(run: LoadRun, ref: Ref) -> Run:
    """A :class:`Run` from typed load evidence (limits and judgements joined later)."""
    return Run(ref=ref, concurrency=run.concurrency, context_tokens=run.context_tokens,
               ok=run.ok, errors=run.errors, preemptions=run.preemptions or 0.0,
               preemptions_known=run.preemptions is not None,
               peak_kv=run.peak_kv, failover=run.failover or run.load_factor > 1.0,
               target=run.target, error_kinds=tuple(sorted(run.errors_by_kind.items())),
               run_id=run.run_id, requests=run.requests, target_source=run.target_source,
               partial=run.partial, client_limited=run.client_limited,
               sustained_waiting=run.sustained_waiting,
               asked_context_tokens=run.asked_context_tokens)


def _judged(run: Run, h: HeadroomJudgement) -> Run:
    return replace(run, headroom=h.ok, min_free=h.min_free, max_error_rate=h.max_error_rate,
                   max_preemptions=h.max_preemptions, max_waiting=h.max_waiting,
                   failover=run.failover or h.failover,
                   target=True if run.target is None else run.target,
                   headroom_reasons=h.reasons)


def _slo_judged(run: Run, j: SloJudgement) -> Run:
    """Join an SLO judgement to its run: a breach stays a breach; an undecided judgement
    (``ok`` None: a limit the run could not measure, or met only on a partial run) leaves the
    SLO unknown, never met."""
    if j.ok is None:
        why = tuple(_breach_line(b) for b in j.breaches) or (
            "the SLO judgement of this run was undecided",)
        ok = False if run.slo_ok is False else None
        return replace(run, slo_ok=ok, slo_unknown=run.slo_unknown + why)
    lines = tuple(_breach_line(b) for b in j.breaches)
    ok = j.ok if run.slo_ok is not False else False
    return replace(run, slo_ok=ok, slo_breaches=run.slo_breaches + lines)


def _breach_line(b: Mapping[str, Any]) -> str:
    """A breach as :class:`~pytest_k3accept.checks.slo.Breach` words it (measured vs
    required); a mapping not in that shape (a team's own) is named only."""
    try:
        return str(Breach(b["name"], b["measured"], b["required"], b["direction"],
                          b.get("unit", ""), b.get("note", "")))
    except (KeyError, TypeError, ValueError):
        return f"{b.get('name', 'limit')} breached"


def _typed(ev: Evidence) -> Any:
    """The typed form of a piece of evidence: the producer's object, or the plain data read
    back into its kind's type (a record replayed, a team's evidence); None when the data
    does not fit its type (it is then named nowhere as a pass)."""
    if ev.typed is not None:
        return ev.typed
    try:
        return typed_of(ev.kind, ev.data)
    except (TypeError, ValueError):
        return None


def step_run(step: ProcedureStep, ref: Ref) -> Run:
    """A :class:`Run` from a typed procedure step."""
    return Run(ref=ref, concurrency=step.concurrency, context_tokens=step.context_tokens,
               ok=step.ok or 0, errors=step.errors or 0, preemptions=step.preemptions or 0.0,
               peak_kv=step.peak_kv, headroom=step.headroom_ok, target=step.target,
               requests=step.requests, partial=step.partial)


def read(evidence: Sequence[Evidence]) -> Findings:
    """Sort every piece of evidence into :class:`Findings`.

    Load runs, headroom and SLO judgements are joined by run id: each judgement names the
    run it judged. Evidence without a run id (an older record) is joined with the test's
    latest run, as before.
    """
    out = Findings()
    by_id: dict[str, int] = {}
    last_of_test: dict[str, int] = {}
    judgements: list[tuple[Any, Ref]] = []

    for ev in evidence:
        ref = Ref(ev.kind, ev.nodeid, ev.summary)
        data = ev.data
        if ev.kind in ("usage-error", "endpoint-error"):
            if ev.kind == "usage-error":
                out.usage_errors.append(ref)
            elif data.get("kind") == "unreachable":
                out.unreachable.append(ref)
            continue
        typed = _typed(ev)
        if isinstance(typed, EnvironmentCheck):
            if typed.ok is False:
                out.environment.append(Problem(ref, f"environment-{typed.item}",
                                               ITEM_LAYER.get(typed.item)))
            elif typed.ok is None:
                out.unknown_env.append(ref)
        elif isinstance(typed, ServerClassification):
            _classification(out, ref, typed)
        elif isinstance(typed, ServerTimeline):
            if typed.init_completed:
                out.init_completed = out.init_completed or ref
            if typed.first_response:
                out.responses.append(ref)
        elif ev.kind == "load":
            run = run_of(typed, ref) if isinstance(typed, LoadRun) else run_from(data, ref)
            last_of_test[ev.nodeid] = by_id[run.run_id or f"#{len(out.runs)}"] = len(out.runs)
            out.runs.append(run)
        elif isinstance(typed, (HeadroomJudgement, SloJudgement)) and typed.run_id:
            judgements.append((typed, ref))  # joined by run id once every run is known
        elif ev.kind == "headroom":  # an older record: plain data on the test's last run
            i = last_of_test.get(ev.nodeid)
            old = run_from(data, ref, target=True)
            if i is None:
                out.runs.append(old)
            else:
                out.runs[i] = replace(out.runs[i], headroom=old.headroom, target=True,
                                      min_free=old.min_free,
                                      failover=out.runs[i].failover or old.failover)
        elif ev.kind == "slo":
            _join_slo(out, SloJudgement.from_data(data), last_of_test.get(ev.nodeid), ref)
        elif isinstance(typed, Procedure):
            for step in typed.steps:
                if step.ran:
                    sref = Ref(f"procedure step {step.n} {step.name}", ev.nodeid,
                               f"step {step.n} {step.name}: {step.summary}".strip())
                    out.runs.append(step_run(step, sref))
            for raw in data.get("steps") or ():
                if isinstance(raw, Mapping) and raw.get("n") == 5 and isinstance(
                        raw.get("retention"), Mapping):
                    figures = dict(raw["retention"])
                    out.retention.append((Ref("procedure step 5 cache retention", ev.nodeid,
                                              str(figures.get("line") or raw.get("reason"))),
                                          figures))
        elif isinstance(typed, PrefixCacheAB):
            out.cache_ab.append((ref, typed.ok))
        elif isinstance(typed, Response) and typed.ok:
            out.responses.append(ref)
        elif ev.kind == "audience" and data.get("audience"):
            out.audience = str(data["audience"]).lower()
    for judged, ref in judgements:
        i = by_id.get(judged.run_id)
        if isinstance(judged, HeadroomJudgement):
            if i is None:
                if judged.ok is False:
                    out.failed_unpaired.append(ref)
            else:
                out.runs[i] = _judged(out.runs[i], judged)
        else:
            _join_slo(out, judged, i, ref)
    return out


def _join_slo(out: Findings, judged: SloJudgement, i: int | None, ref: Ref) -> None:
    if i is not None:
        out.runs[i] = _slo_judged(out.runs[i], judged)
    elif not judged.ok:
        out.failed_unpaired.append(ref)


def _classification(out: Findings, ref: Ref, c: ServerClassification) -> None:
    lines = c.lines
    if c.category in ENVIRONMENT_CATEGORIES:
        layer = c.layer
        if layer is None:
            layer = {"connection": "network", "loading": None,
                     "host-oom": "container"}.get(c.category, "container")
            if c.category == "environment" and any("driver" in x.lower() for x in lines):
                layer = "driver"
        out.environment.append(Problem(ref, c.category, layer, lines))
    elif c.category in CAPACITY_CATEGORIES:
        out.capacity.append(Problem(ref, c.category, None, lines))
    elif c.category in BLOCKING_CATEGORIES:
        out.blocking.append(Problem(ref, c.category, None, lines))
    if c.init_completed is True:
        out.init_completed = out.init_completed or ref
