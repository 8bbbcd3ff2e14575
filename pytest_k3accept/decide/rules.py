"""The verdict's rules, in the seed's order: the first rule that decides, wins.

Each rule is one small function ``rule(case) -> Verdict | None`` whose docstring's first line
is its reason in the seed (docs/decisions.md's rule table is checked against
:data:`RULES` by a test). A rule reads the :class:`Case` (findings sorted from the typed
evidence, the checklist statuses, the target and the layers) and either returns the verdict
or None to let the next rule decide. To add a rule, write the function here and put it in
:data:`RULES` where the seed's order puts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..checks.registry import FAIL, ITEMS, PASS
from ..evidence.kinds import DEFAULT_TARGET
from . import advice
from . import findings as fnd
from .advice import BLOCKING_ADVICE, UNREACHABLE, USAGE_ERROR
from .outcome import (ACCEPT_LIMITS, FUNCTIONAL_ONLY, KEEP, MOVE_ENVIRONMENT, SCALE, UNDECIDED,
                      Builder, Verdict)


@dataclass
class Case:
    """What the rules decide on: findings, checklist statuses, audience, target, builder."""

    f: fnd.Findings
    statuses: Mapping[str, str]
    audience: str | None
    target: Mapping[str, Any] | None
    b: Builder
    counted: list[fnd.Run] = field(default_factory=list)
    excluded: list[fnd.Run] = field(default_factory=list)
    at_target: list[fnd.Run] = field(default_factory=list)
    reduced: list[fnd.Run] = field(default_factory=list)
    conc: int | None = None
    ctx: int | None = None

    def __post_init__(self) -> None:
        want_conc = (self.target or {}).get("concurrency")
        for r in self.f.runs:
            single = r.concurrency is not None and r.concurrency <= 1
            if single and not (self.f.init_completed is not None and want_conc == 1):
                self.excluded.append(r)
            else:
                self.counted.append(r)
        runs = self.counted
        explicit = [r for r in runs if r.target]
        ref_run = _heaviest(explicit or runs) if runs else None
        self.conc = (self.target or {}).get("concurrency",
                                            ref_run.concurrency if ref_run else None)
        self.ctx = (self.target or {}).get("context_tokens",
                                           _ctx(ref_run) if ref_run else None)
        self.at_target = [r for r in runs if _at_target(r, self.conc, self.ctx)]
        self.reduced = [r for r in runs if r not in self.at_target]

    @property
    def failover_failed(self) -> list[fnd.Run]:
        return [r for r in self.counted if r.failover and r.has_headroom is False]

    @property
    def failing(self) -> list[fnd.Run]:
        return [r for r in self.at_target if r.has_headroom is False and not r.failover]

    @property
    def c9_failed(self) -> bool:
        return self.statuses.get("C9") == FAIL

    @property
    def c10_failed(self) -> bool:
        return self.statuses.get("C10") == FAIL


Rule = Callable[[Case], "Verdict | None"]


def usage_error(c: Case) -> Verdict | None:
    """The run stopped on a usage error (a bad option, profile field, SLO name or marker
    keyword): fix it and run again; it says nothing about the deployment."""
    if not c.f.usage_errors:
        return None
    for ref in c.f.usage_errors:
        c.b.cite(ref, f"the run stopped on a {ref.summary}")
    c.b.advice.append(USAGE_ERROR)
    return c.b.done(UNDECIDED)


def endpoint_unreachable(c: Case) -> Verdict | None:
    """The endpoint was unreachable and nothing was measured: start the server or fix the
    URL before any verdict."""
    if not c.f.unreachable or c.f.runs or c.f.responses or c.f.capacity:
        return None
    for ref in c.f.unreachable[:1]:
        c.b.cite(ref, f"the endpoint was unreachable: {ref.summary}")
    c.b.advice.append(UNREACHABLE)
    return c.b.done(UNDECIDED)


def environment_first(c: Case) -> Verdict | None:
    """An environment mismatch or weights that fail to load: move the environment before
    any tuning (never scale)."""
    if not c.f.environment:
        return None
    for p in c.f.environment:
        c.b.cite(p.ref, problem_line(p))
        text, blocked = advice.move(c.b.layers, p.layer)
        c.b.advice.append(text)
        if blocked:
            c.b.blocked.append(str(p.layer))
    return c.b.done(MOVE_ENVIRONMENT)


def non_memory_failure(c: Case) -> Verdict | None:
    """The engine failed for a reason other than memory, the launch was rejected, the server
    was killed from outside, or the failure is not recognised: fix that first; it says
    nothing about capacity."""
    if not c.f.blocking:
        return None
    for p in c.f.blocking:
        c.b.cite(p.ref, problem_line(p))
        c.b.advice.append(BLOCKING_ADVICE.get(p.category, BLOCKING_ADVICE["serving"]))
    return c.b.done(UNDECIDED)


def nothing_served(c: Case) -> Verdict | None:
    """A load where no request succeeded, with no out-of-memory behind it, is a failure,
    not a capacity figure."""
    dead = [r for r in c.f.runs if r.failures and r.ok == 0]
    if not dead or c.f.capacity:
        return None
    for r in dead:
        kinds = ", ".join(f"{n} {k}" for k, n in r.failures.items())
        c.b.cite(r.ref, f"no request of the load at {r.label()} succeeded ({kinds}) "
                        f"{src(r)}: a failure, not a capacity figure")
    c.b.advice.append("Every request failed with HTTP errors or lost connections: find the "
                      "cause (server log, --k3-launch / --k3-server-log classification, the "
                      "request set) before judging capacity.")
    return c.b.done(UNDECIDED)


def functional_only(c: Case) -> Verdict | None:
    """A POC audience, or only first responses and concurrency-1 runs: functional
    verification, never evidence of production capacity."""
    for r in c.excluded:
        why = ("engine init was not observed completing" if c.f.init_completed is None
               else "a single stream says nothing about concurrent load")
        c.b.reasons.append(f"not counted as capacity: concurrency-1 success ({r.label()}; "
                           f"{why}) {src(r)}")
    poc = c.audience == "poc"
    if not poc and (c.counted or c.f.capacity):
        return None
    seen = [*c.f.responses, *(r.ref for r in c.excluded if r.ok > 0)]
    if not seen:
        c.b.reasons.append("no load was measured and no successful response was recorded")
        c.b.advice.append("Run the target load (k3_load / k3_headroom) or at least one "
                          "request before deciding.")
        return c.b.done(UNDECIDED)
    for ref in seen[:5]:
        c.b.cite(ref)
    if c.f.init_completed is not None:
        c.b.cite(c.f.init_completed, f"engine init completed: {c.f.init_completed.cite()}")
    if poc:
        c.b.reasons.append("audience is POC: results are functional verification only")
    c.b.advice.append("Functional verification only: run the target load with headroom "
                      "(k3_headroom) before any production claim.")
    return c.b.done(FUNCTIONAL_ONLY)


def shortage(c: Case) -> Verdict | None:
    """The target failed (errors or preemptions beyond the test's limits, an SLO breach, KV
    cache full, OOM while serving, KV cache too small at init) or there is no failover
    headroom: accept the reduced limits that held, else scale."""
    failover, failing = c.failover_failed, c.failing
    if not (failover or failing or c.f.capacity or c.f.failed_unpaired or c.c9_failed
            or c.c10_failed):
        return None
    b = c.b
    for r in failover:
        b.cite(r.ref, f"no failover headroom at {r.label()}: {r.figures()} {src(r)}")
    if c.c10_failed and not failover:
        b.cite(fnd.Ref("checklist", "", "C10 failover-headroom failed"))
    if c.c9_failed and not failing:
        b.cite(fnd.Ref("checklist", "", "C9 metrics-saved failed (a headroom test failed)"))
    for ref in c.f.failed_unpaired:
        b.cite(ref, f"failed for a run not in the evidence: {ref.cite()}")
    for r in failing:
        if _only_slo(r):  # headroom held: what failed is a latency limit
            b.cite(r.ref, f"target {r.label()} breached its SLO with KV headroom left: "
                          f"{r.figures()} {src(r)}")
            b.advice.append("The SLO breached while the KV cache had headroom: look at the "
                            "prefill side first (prefix caching on the shared prefix, chunked "
                            "prefill, --max-num-batched-tokens) and re-measure before scaling.")
            continue
        b.cite(r.ref, f"target {r.label()} did not hold with headroom: {r.figures()} {src(r)}")
        if r.failures and not c.f.capacity:
            kinds = ", ".join(f"{n} {k}" for k, n in r.failures.items())
            b.advice.append(f"Requests failed beyond the test's limit ({kinds}): check their "
                            "cause in the server log before taking them as a capacity limit.")
    for p in c.f.capacity:
        b.cite(p.ref, problem_line(p))
    held = [r for r in c.reduced  # a partial run offered less than its load: not "held"
            if r.stable and r.has_headroom is not False and not r.partial]
    if held and not failover and not c.c10_failed and not c.c9_failed:
        best = _heaviest(held)
        b.cite(best.ref, f"held at reduced {best.label()}: {best.figures()} {src(best)}")
        limits = {"concurrency": best.concurrency, "context_tokens": best.context_tokens,
                  "target_concurrency": c.conc, "target_context_tokens": c.ctx}
        b.advice.append(f"Take {best.label()} as the service contract, or scale past it to "
                        f"reach the target ({c.conc} concurrent, {c.ctx} tokens).")
        if not b.layers.is_fixed("network"):
            b.advice.append("Scaling past it: multi-node or another environment.")
        _retention(c)
        return b.done(ACCEPT_LIMITS, limits)
    tried = [r for r in c.reduced if r.ok > 0]
    for cat in dict.fromkeys(p.category for p in c.f.capacity):
        b.advice.append(advice.tune_first(cat, measured_below=bool(tried)))
    b.advice.append(advice.scale(b.layers))
    _retention(c)
    return b.done(SCALE)


def target_not_set(c: Case) -> Verdict | None:
    """A load that held on the built-in default profile is no target: keep needs a target
    that someone set (a profile, a preset's targets, marker values)."""
    good = [r for r in c.at_target if r.has_headroom is True]
    unset = [r for r in good if r.target_source == DEFAULT_TARGET]
    if not (good and unset and c.target is None and len(good) == len(c.at_target)):
        return None
    for r in unset:
        c.b.cite(r.ref, f"held at {r.label()}: {r.figures()} {src(r)}")
    c.b.reasons.append("no target load was set (no profile, preset targets or marker "
                       "values): the built-in default load is no target, so no keep")
    c.b.advice.append("Set the target load (--k3-profile, a preset's [targets], or "
                      "k3_headroom(concurrency=..., context_tokens=...)) and run it again.")
    return c.b.done(UNDECIDED)


def keep(c: Case) -> Verdict | None:
    """Stable with headroom at the target load, every run at it measured whole (its peak
    KV, preemptions, SLOs, a client that was not the limit): keep the setup and strengthen
    monitoring."""
    good = [r for r in c.at_target if r.has_headroom is True]
    if not good or len(good) != len(c.at_target):  # one run unknown: no keep
        return None
    for r in good:
        c.b.cite(r.ref, f"held with headroom at {r.label()}: {r.figures()} {src(r)}")
    sources = sorted({r.target_source for r in good if r.target_source} or
                     ({"the session's profile"} if c.target is not None else set()))
    if sources:
        c.b.reasons.append("target set by: " + ", ".join(sources))
    if c.audience == "production" and c.statuses.get("C10") != PASS:
        c.b.reasons.append("failover headroom (C10) was not measured: this keep covers the "
                           "target load, not the loss of a replica")
        c.b.advice.append("Measure failover headroom (k3_headroom(failover=True) with every "
                          "replica's --k3-endpoint, or replicas=N) before relying on this "
                          "setup through a replica's loss.")
    for ref, ok in c.f.cache_ab:
        if not ok:
            c.b.cite(ref)
            c.b.advice.append("Prefix caching did not deliver hits on a repeating request "
                              "set: do not count on cache savings until it does.")
    _retention(c)
    c.b.advice.append("Keep the setup; strengthen monitoring of KV-cache usage, "
                      "preemptions, prefix-cache hit rate and error rate.")
    return c.b.done(KEEP, {"concurrency": c.conc, "context_tokens": c.ctx})


def not_measured(c: Case) -> Verdict | None:
    """The target load was not measured, or measured without a headroom figure: run it with
    k3_headroom before deciding."""
    for r in c.at_target or c.reduced:
        unknown = "; ".join(r.unknowns()) if r.has_headroom is None else ""
        c.b.cite(r.ref, f"{r.label()}: {r.figures()}"
                        f"{f'; unknown: {unknown}' if unknown else ''} {src(r)}")
    c.b.reasons.append("the target load was not measured whole with its headroom (peak KV, "
                       "preemptions, SLOs, a client that was not the limit)"
                       if c.at_target else "the target load was not measured")
    c.b.advice.append("Run the target load with k3_headroom (peak KV usage, preemptions, "
                      "errors) to decide between keep, accept-limits and scale.")
    return c.b.done(UNDECIDED)


#: the rules in the seed's order; the first that returns a verdict decides
RULES: tuple[Rule, ...] = (usage_error, environment_first, non_memory_failure, nothing_served,
                           endpoint_unreachable, functional_only, shortage, target_not_set,
                           keep, not_measured)


def _retention(c: Case) -> None:
    """Step 5's cache-retention comparison, cited with both settings' figures, and its advice."""
    from ..checks.procedure.retention import advice as retention_advice

    for ref, data in c.f.retention:
        c.b.cite(ref)
        said = retention_advice(data)
        if said:
            c.b.advice.append(said)


def problem_line(p: fnd.Problem) -> str:
    """``category: summary [kind, test] -- log: 'line'`` for a reason."""
    label = p.category
    if label.startswith("environment-C"):
        cid = label.split("-", 1)[1]
        label = f"environment ({cid} {ITEMS.get(cid, ('', ''))[0]})"
    quote = f" -- log: {p.lines[0]!r}" if p.lines else ""
    return f"{label}: {p.ref.cite()}{quote}"


def src(r: fnd.Run) -> str:
    """``[kind, test]`` of a run, for a reason."""
    return f"[{r.ref.kind}{', ' + r.ref.nodeid if r.ref.nodeid else ''}]"


def _only_slo(r: fnd.Run) -> bool:
    """The run failed on its SLO alone: within its error and preemption limits, its
    headroom judged held (or peak KV below the limit and no lasting queue)."""
    if r.slo_ok is not False or r.ok == 0 or not r.within_limits:
        return False
    if r.headroom is not None:
        return r.headroom is True
    return (r.peak_kv is not None and r.peak_kv <= 1.0 - r.min_free
            and not r.queued_too_long)


def _ctx(r: fnd.Run) -> int | None:
    """The context a run stands for: the larger of what it asked (a synthetic set's target)
    and what its successful requests measured. A run whose long prompts all failed (timed
    out, rejected with 400) asked for that context and failed at it; ranking it by what
    survived would make the lighter run that held look like the target (a worse run, a
    better verdict)."""
    known = [c for c in (r.asked_context_tokens, r.context_tokens) if c is not None]
    return max(known) if known else None


def _heaviest(runs: Sequence[fnd.Run]) -> fnd.Run:
    return max(runs, key=lambda r: ((r.concurrency or 0) * (_ctx(r) or 1),
                                    _ctx(r) or 0, r.concurrency or 0))


def _at_target(r: fnd.Run, conc: int | None, ctx: int | None) -> bool:
    if r.target is not None:
        return bool(r.target)
    return ((conc is None or (r.concurrency or 0) >= conc)
            and (ctx is None or (_ctx(r) or 0) >= ctx))


def rule_table() -> str:
    """The rules as the Markdown table of docs/decisions.md (a test keeps the two equal)."""
    rows = ["| # | rule | decides when (the seed's reason) |", "|---|---|---|"]
    for n, rule in enumerate(RULES, 1):
        doc = " ".join((rule.__doc__ or "").split())
        rows.append(f"| {n} | `{rule.__name__}` | {doc} |")
    return "\n".join(rows)
