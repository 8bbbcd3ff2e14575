"""The acceptance verdict: a pure function of checklist statuses and evidence (no pytest).

One of ``keep``, ``accept-limits``, ``scale``, ``move-environment``, ``functional-only`` or
``undecided``, decided in the seed's order:

1. environment mismatch or weights that fail to load -> ``move-environment`` (before any
   tuning; never ``scale``);
2. the engine crashed for a reason other than memory, or the launch was rejected ->
   ``undecided`` (fix that first; it says nothing about capacity);
3. a POC audience, or only first responses / concurrency-1 runs -> ``functional-only``
   (never evidence of production capacity; a concurrency-1 success without a completed
   init is never counted as capacity);
4. no failover headroom, or the target failed (OOM, preemption, errors, KV cache full) ->
   ``accept-limits`` when a reduced context/concurrency held (the limits are named), else
   ``scale``; no failover headroom is always ``scale``;
5. stable with headroom at the target -> ``keep``.

Each verdict carries the evidence it rests on, the checklist items not checked and advice
that never proposes changing a layer the user marked fixed (:mod:`.layers`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from . import advice
from . import findings as fnd
from ..checks.registry import FAIL, ITEMS, NOT_CHECKED, SKIP
from .layers import Layers
from ..evidence.kinds import DEFAULT_TARGET
from ..evidence.store import Evidence

if TYPE_CHECKING:  # pragma: no cover
    from ..evidence.store import RunState

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

#: what to do about a failure that blocks any capacity verdict, per classification category
BLOCKING_ADVICE: dict[str, str] = {
    "serving": "The engine failed for a reason other than memory: fix that first; it is no "
               "evidence about capacity.",
    "config": "The launch was rejected (a configuration error): fix the arguments first; it "
              "is no evidence about the environment or capacity.",
    "killed": "The server was killed from outside (SIGKILL, exit 137) with no out-of-memory "
              "line in its log: check the kernel log (dmesg) for the OOM killer, and the "
              "orchestrator's events (OOMKilled, eviction), before judging capacity.",
    "unknown": "The server failed for a reason the classifier does not recognise: read the "
               "quoted error lines; no verdict rests on a guess.",
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


class _Builder:
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


def _move_advice(b: _Builder, layer: str | None) -> None:
    text, blocked = advice.move(b.layers, layer)
    b.advice.append(text)
    if blocked:
        b.blocked.append(str(layer))


def _problem(p: fnd.Problem) -> str:
    """``category: summary [kind, test] -- log: 'line'`` for a reason."""
    label = p.category
    if label.startswith("environment-C"):
        cid = label.split("-", 1)[1]
        label = f"environment ({cid} {ITEMS.get(cid, ('', ''))[0]})"
    quote = f" -- log: {p.lines[0]!r}" if p.lines else ""
    return f"{label}: {p.ref.cite()}{quote}"


def _env_from_statuses(statuses: Mapping[str, str], f: fnd.Findings,
                       item_tests: Mapping[str, Sequence[str]]) -> None:
    have = {p.category for p in f.environment}
    for cid, layer in fnd.ITEM_LAYER.items():
        if statuses.get(cid) == FAIL and f"environment-{cid}" not in have:
            tests = ", ".join(item_tests.get(cid, ())) or "checklist"
            f.environment.append(fnd.Problem(
                fnd.Ref("checklist", tests, f"{cid} {ITEMS[cid][0]} failed"),
                f"environment-{cid}", layer))


def decide(statuses: Mapping[str, str], evidence: Sequence[Evidence], *,
           audience: str | None = None, target: Mapping[str, Any] | None = None,
           layers: Layers | None = None,
           item_tests: Mapping[str, Sequence[str]] | None = None) -> Verdict:
    """Decide the verdict from checklist ``statuses`` (id -> pass/fail/skip/not-checked)
    and ``evidence``.

    ``audience`` ("poc", "team", "platform", "production"; else an ``audience`` evidence
    entry) marks a POC run; ``target`` (``{"concurrency": N, "context_tokens": M}``) names
    the target load (default: the heaviest load measured); ``layers`` states which layers
    may be changed; ``item_tests`` (id -> test ids) lets checklist failures cite tests.
    """
    layers = layers or Layers()
    not_checked = [cid for cid, st in statuses.items() if st in (NOT_CHECKED, SKIP)]
    b = _Builder(layers, not_checked)
    f = fnd.read(evidence)
    _env_from_statuses(statuses, f, item_tests or {})
    aud = (audience or f.audience or "").lower() or None

    if f.environment:
        for p in f.environment:
            b.cite(p.ref, _problem(p))
            _move_advice(b, p.layer)
        return b.done(MOVE_ENVIRONMENT)
    if f.blocking:
        for p in f.blocking:
            b.cite(p.ref, _problem(p))
            b.advice.append(BLOCKING_ADVICE.get(p.category, BLOCKING_ADVICE["serving"]))
        return b.done(UNDECIDED)

    dead = [r for r in f.runs if r.failures and r.ok == 0]
    if dead and not f.capacity:
        for r in dead:
            kinds = ", ".join(f"{n} {k}" for k, n in r.failures.items())
            b.cite(r.ref, f"no request of the load at {r.label()} succeeded ({kinds}) "
                          f"{_src(r)}: a failure, not a capacity figure")
        b.advice.append("Every request failed with HTTP errors or lost connections: find the "
                        "cause (server log, --k3-launch / --k3-server-log classification, the "
                        "request set) before judging capacity.")
        return b.done(UNDECIDED)
    counted, excluded = _split_capacity(f, target)
    for r in excluded:
        why = ("engine init was not observed completing" if f.init_completed is None
               else "a single stream says nothing about concurrent load")
        b.reasons.append(f"not counted as capacity: concurrency-1 success ({r.label()}; "
                         f"{why}) {_src(r)}")
    if aud == "poc" or not counted and not f.capacity:
        return _functional(b, f, excluded, poc=aud == "poc")
    return _capacity(b, f, counted, target, statuses)


def _split_capacity(f: fnd.Findings, target: Mapping[str, Any] | None,
                    ) -> tuple[list[fnd.Run], list[fnd.Run]]:
    want_conc = (target or {}).get("concurrency")
    counted, excluded = [], []
    for r in f.runs:
        single = r.concurrency is not None and r.concurrency <= 1
        if single and not (f.init_completed is not None and want_conc == 1):
            excluded.append(r)
        else:
            counted.append(r)
    return counted, excluded


def _functional(b: _Builder, f: fnd.Findings, excluded: list[fnd.Run], poc: bool,
                ) -> Verdict:
    seen = [*f.responses, *(r.ref for r in excluded if r.ok > 0)]
    if not seen:
        b.reasons.append("no load was measured and no successful response was recorded")
        b.advice.append("Run the target load (k3_load / k3_headroom) or at least one request "
                        "before deciding.")
        return b.done(UNDECIDED)
    for ref in seen[:5]:
        b.cite(ref)
    if f.init_completed is not None:
        b.cite(f.init_completed, f"engine init completed: {f.init_completed.cite()}")
    if poc:
        b.reasons.append("audience is POC: results are functional verification only")
    b.advice.append("Functional verification only: run the target load with headroom "
                    "(k3_headroom) before any production claim.")
    return b.done(FUNCTIONAL_ONLY)


def _src(r: fnd.Run) -> str:
    return f"[{r.ref.kind}{', ' + r.ref.nodeid if r.ref.nodeid else ''}]"


def _heaviest(runs: Sequence[fnd.Run]) -> fnd.Run:
    return max(runs, key=lambda r: ((r.concurrency or 0) * (r.context_tokens or 1),
                                    r.context_tokens or 0, r.concurrency or 0))


def _at_target(r: fnd.Run, conc: int | None, ctx: int | None) -> bool:
    if r.target is not None:
        return bool(r.target)
    return ((conc is None or (r.concurrency or 0) >= conc)
            and (ctx is None or (r.context_tokens or 0) >= ctx))


def _capacity(b: _Builder, f: fnd.Findings, runs: list[fnd.Run],
              target: Mapping[str, Any] | None, statuses: Mapping[str, str]) -> Verdict:
    explicit = [r for r in runs if r.target]
    ref_run = explicit[0] if explicit else (_heaviest(runs) if runs else None)
    conc = (target or {}).get("concurrency", ref_run.concurrency if ref_run else None)
    ctx = (target or {}).get("context_tokens", ref_run.context_tokens if ref_run else None)
    at_target = [r for r in runs if _at_target(r, conc, ctx)]
    reduced = [r for r in runs if r not in at_target]
    failover = [r for r in runs if r.failover and r.has_headroom is False]
    failing = [r for r in at_target if r.has_headroom is False and not r.failover]
    for ref in f.failed_unpaired:
        b.cite(ref, f"failed for a run not in the evidence: {ref.cite()}")
    network_fixed = b.layers.is_fixed("network")
    scale_advice = advice.scale(b.layers)
    c9_failed = statuses.get("C9") == FAIL
    if (failover or failing or f.capacity or f.failed_unpaired or c9_failed
            or statuses.get("C10") == FAIL):
        if c9_failed and not failing:
            b.cite(fnd.Ref("checklist", "", "C9 metrics-saved failed (a headroom test "
                                            "failed)"))
        for r in failover:
            b.cite(r.ref, f"no failover headroom at {r.label()}: {r.figures()} "
                          f"{_src(r)}")
        if statuses.get("C10") == FAIL and not failover:
            b.cite(fnd.Ref("checklist", "", "C10 failover-headroom failed"))
        for r in failing:
            b.cite(r.ref, f"target {r.label()} did not hold with headroom: {r.figures()} "
                          f"{_src(r)}")
            if r.failures and not f.capacity:
                kinds = ", ".join(f"{n} {k}" for k, n in r.failures.items())
                b.advice.append(f"Requests failed beyond the test's limit ({kinds}): check "
                                "their cause in the server log before taking them as a "
                                "capacity limit.")
        for p in f.capacity:
            b.cite(p.ref, _problem(p))
        held = [r for r in reduced if r.stable and r.has_headroom is not False]
        if held and not failover and statuses.get("C10") != FAIL and not c9_failed:
            best = _heaviest(held)
            b.cite(best.ref, f"held at reduced {best.label()}: {best.figures()} "
                             f"{_src(best)}")
            limits = {"concurrency": best.concurrency, "context_tokens": best.context_tokens,
                      "target_concurrency": conc, "target_context_tokens": ctx}
            b.advice.append(f"Take {best.label()} as the service contract, or scale past it "
                            f"to reach the target ({conc} concurrent, {ctx} tokens).")
            if not network_fixed:
                b.advice.append("Scaling past it: multi-node or another environment.")
            return b.done(ACCEPT_LIMITS, limits)
        b.advice.append(scale_advice)
        return b.done(SCALE)
    good = [r for r in at_target if r.has_headroom is True]
    unset = [r for r in good if r.target_source == DEFAULT_TARGET]
    if good and all(r.stable for r in at_target) and unset and target is None:
        for r in unset:
            b.cite(r.ref, f"held at {r.label()}: {r.figures()} {_src(r)}")
        b.reasons.append("no target load was set (no profile, preset targets or marker "
                         "values): the built-in default load is no target, so no keep")
        b.advice.append("Set the target load (--k3-profile, a preset's [targets], or "
                        "k3_headroom(concurrency=..., context_tokens=...)) and run it again.")
        return b.done(UNDECIDED)
    if good and all(r.stable for r in at_target):
        for r in good:
            b.cite(r.ref, f"held with headroom at {r.label()}: {r.figures()} "
                          f"{_src(r)}")
        sources = sorted({r.target_source for r in good if r.target_source} or
                         ({"the session's profile"} if target is not None else set()))
        if sources:
            b.reasons.append("target set by: " + ", ".join(sources))
        _cache_notes(b, f)
        b.advice.append("Keep the setup; strengthen monitoring of KV-cache usage, "
                        "preemptions, prefix-cache hit rate and error rate.")
        return b.done(KEEP, {"concurrency": conc, "context_tokens": ctx})
    for r in at_target or reduced:
        b.cite(r.ref, f"{r.label()}: {r.figures()} {_src(r)}")
    b.reasons.append("the target load was not measured with its headroom (peak KV unknown)"
                     if at_target else "the target load was not measured")
    b.advice.append("Run the target load with k3_headroom (peak KV usage, preemptions, "
                    "errors) to decide between keep, accept-limits and scale.")
    return b.done(UNDECIDED)


def _cache_notes(b: _Builder, f: fnd.Findings) -> None:
    for ref, ok in f.cache_ab:
        if not ok:
            b.cite(ref)
            b.advice.append("Prefix caching did not deliver hits on a repeating request set: "
                            "do not count on cache savings until it does.")


def decide_state(state: "RunState", layers: Layers | None = None, *,
                 audience: str | None = None, target: Mapping[str, Any] | None = None,
                 ) -> Verdict:
    """:func:`decide` over a session's :class:`~pytest_k3accept.evidence.store.RunState`."""
    results = state.checklist.results()
    tests = {cid: [t["nodeid"] for t in r.tests if t["outcome"] == FAIL]
             for cid, r in results.items()}
    verdict = decide({cid: r.status for cid, r in results.items()}, state.evidence,
                     audience=audience, target=target, layers=layers, item_tests=tests)
    verdict.items = state.checklist.items()
    return verdict


def verdict_lines(state_or_verdict: "RunState | Verdict", layers: Layers | None = None,
                  ) -> list[str]:
    """The verdict as terminal lines: name and headline, evidence, advice, not checked."""
    v = (state_or_verdict if isinstance(state_or_verdict, Verdict)
         else decide_state(state_or_verdict, layers))
    lines = [f"verdict: {v.name.upper()} - {v.headline}"]
    if v.limits and v.name == ACCEPT_LIMITS:
        lines.append("  limits that held: " + ", ".join(
            f"{k} {val}" for k, val in v.limits.items() if val is not None))
    lines += [f"  because: {r}" for r in v.reasons]
    lines += [f"  advice: {a}" for a in v.advice]
    if v.blocked_layers:
        lines.append("  fixed layers the fix would need: " + ", ".join(v.blocked_layers))
    if v.not_checked:
        items = v.items
        lines.append("  not checked: " + ", ".join(
            f"{c} {items.get(c, ('', ''))[0]}" for c in v.not_checked))
    return lines
