"""The acceptance verdict: one pure decision from the typed evidence, the checklist and the
layers (no pytest).

One of ``keep``, ``accept-limits``, ``scale``, ``move-environment``, ``functional-only`` or
``undecided`` (:mod:`.outcome`), decided by the ordered rules of :mod:`.rules` (the first
that decides wins): environment first, then failures that are not about memory, then loads
where nothing was served, then POC / functional runs, then capacity (shortage ->
accept-limits or scale; a target nobody set -> undecided; held with headroom -> keep), and
otherwise "not measured". It runs once per session (``fixtures/decide.py``); the terminal,
the record, the report and JUnit show that one result. A rule that raises makes the verdict
``undecided`` with the rule and the error named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..checks.registry import FAIL, ITEMS, NOT_CHECKED, SKIP
from ..evidence.store import Evidence
from . import findings as fnd
from .layers import Layers
from .outcome import (ACCEPT_LIMITS, FUNCTIONAL_ONLY, HEADLINES, KEEP, MOVE_ENVIRONMENT, NAMES,
                      SCALE, UNDECIDED, Builder, Verdict)
from .advice import BLOCKING_ADVICE
from .rules import RULES, Case

if TYPE_CHECKING:  # pragma: no cover
    from ..evidence.store import RunState

__all__ = ["ACCEPT_LIMITS", "BLOCKING_ADVICE", "FUNCTIONAL_ONLY", "HEADLINES", "KEEP",
           "MOVE_ENVIRONMENT", "NAMES", "SCALE", "UNDECIDED", "Verdict", "decide",
           "decide_state", "verdict_lines"]


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
    the target load (default: the loads the tests marked as their target, else the heaviest
    load measured); ``layers`` states which layers may be changed; ``item_tests`` (id -> test
    ids) lets checklist failures cite tests.
    """
    layers = layers or Layers()
    not_checked = [cid for cid, st in statuses.items() if st in (NOT_CHECKED, SKIP)]
    f = fnd.read(evidence)
    _env_from_statuses(statuses, f, item_tests or {})
    aud = (audience or f.audience or "").lower() or None
    case = Case(f, statuses, aud, target, Builder(layers, not_checked))
    for rule in RULES:
        try:
            verdict = rule(case)
        except Exception as exc:  # a bug in one rule: undecided, named, never a guess
            return Verdict(UNDECIDED, reasons=[f"the verdict rule {rule.__name__} failed: "
                                               f"{type(exc).__name__}: {exc}"],
                           not_checked=not_checked, layers=layers.as_dict())
        if verdict is not None:
            return verdict
    raise AssertionError("the last rule always decides")  # pragma: no cover


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
