"""Runs the re-measurement procedure (:mod:`.procedure`) on the load runner.

Load steps go through :func:`~pytest_k3accept.observe.load.runner.run_load` on the same request set
(step 4 on its lower-context twin); each is judged with the load package's headroom rule
(free KV at peak, preemptions, errors). Step 5 runs the request set on two relaunched
variants of the server (:mod:`~pytest_k3accept.observe.server.relaunch`), one per retention
setting (:mod:`.retention`), and is reported ``not-run`` on a fixed endpoint,
``not-applicable`` when the server rejects the retention flags for this model (quoting its log
line) or serves with prefix caching off, ``failed`` when a relaunch does not start for another
reason (its classified cause and line). Step 7 is the
verdict (:func:`~pytest_k3accept.decide.verdict.decide`) over the steps.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .plan import (FAILED, NOT_APPLICABLE, NOT_RUN, RAN, DecisionProfile, Step, one_variable,
                   plan)
from ...evidence.store import Evidence
from ...decide.verdict import Verdict, decide

if TYPE_CHECKING:  # pragma: no cover
    from ...observe.endpoint.discover import Endpoint
    from ...observe.load.requestset import RequestSet
    from ...observe.load.result import LoadResult
    from ...observe.server.relaunch import Relauncher

#: what vLLM 0.32 says when the retention interval does not apply to the model
_NO_EFFECT = ("retention has no effect", "prefix_cache_retention_interval")
_ERROR_LINE = re.compile(r"\w*Error: .*")


@dataclass
class ProcedureResult:
    """The step log, the verdict it ends in, and whether one variable changed per step."""

    steps: list[Step]
    verdict: Verdict
    one_variable: bool
    problems: list[str] = field(default_factory=list)
    request_set: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    mode: str = "endpoint"

    def summary(self) -> str:
        """One line: verdict and which steps ran."""
        ran = [str(s.n) for s in self.steps if s.status == RAN]
        other = [f"{s.n} {s.status}" for s in self.steps if s.status != RAN]
        rest = f"; {', '.join(other)}" if other else ""
        return f"re-measurement procedure -> {self.verdict.name}: steps {','.join(ran)} ran{rest}"

    def lines(self) -> list[str]:
        """The step log, one line per step."""
        return [s.line() for s in self.steps]

    def as_dict(self) -> dict[str, Any]:
        """Evidence data (kind ``procedure``)."""
        return {"steps": [s.as_dict() for s in self.steps], "verdict": self.verdict.as_dict(),
                "one_variable": self.one_variable, "problems": list(self.problems),
                "request_set": dict(self.request_set), "target": dict(self.target),
                "mode": self.mode, "log": self.lines()}


def absorb(step: Step, result: "LoadResult", dp: DecisionProfile) -> None:
    """Fold a load run into a step: figures, headroom judgement, status."""
    from .. import headroom

    spec = dp.load.headroom
    judged = headroom.decide(result, min_free=spec.min_free, max_error_rate=spec.max_error_rate,
                             max_preemptions=spec.max_preemptions, max_waiting=spec.max_waiting)
    s, srv = result.summary, result.server or {}
    step.figures = {
        "requests": s["requests"], "ok": s["ok"], "errors": s["errors"],
        "preemptions": srv.get("preemptions"), "peak_kv": srv.get("peak_kv_usage"),
        "peak_waiting": srv.get("peak_waiting"), "queue_time_mean": srv.get("queue_time_mean"),
        "prefill_time_mean": srv.get("prefill_time_mean"),
        "prefix_cache_hit_rate": srv.get("prefix_cache_hit_rate"),
        "prefix_caching": srv.get("prefix_caching"),
        "ttft_p99": (s.get("ttft") or {}).get("p99"), "e2e_p99": (s.get("e2e") or {}).get("p99"),
        "headroom_ok": judged.ok, "headroom": judged.line(), "summary": result.line(),
        "partial": s.get("partial"),
        "request_set": result.request_set.get("fingerprint"), "endpoint": result.endpoint}
    step.status = RAN
    step.reason = judged.line()


def _refused(step: Step, var: Any) -> None:
    """A relaunch that did not start: "not applicable" when vLLM refuses retention for this
    model (its own line quoted), else failed with the classified cause and its line."""
    fail = var.failure() or {}
    quotes = list(fail.get("evidence_lines") or [])
    quote = quotes[0] if quotes else (var.error or "").split("\n")[0]
    rejected = next((m.group(0) for m in map(_ERROR_LINE.search, var.log_text().splitlines())
                     if m and all(k in m.group(0) for k in _NO_EFFECT)), None)
    if rejected:
        step.status = NOT_APPLICABLE
        step.reason = f"the server rejects these flags for this model: {rejected!r}"
    else:
        step.status = FAILED
        step.reason = (f"the relaunched server ({' '.join(var.args)}) did not start "
                       f"({fail.get('category')}): {quote!r} (log: {var.log_path})")


async def _retention_step(step: Step, base: Step, rs: "RequestSet", endpoint: "Endpoint",
                          relauncher: "Relauncher", dp: DecisionProfile) -> None:
    """Step 5: the two retention settings, each on its own relaunch, compared (:mod:`.retention`)."""
    from ..prefix_ab.compare import ABError
    from ..prefix_ab.run import Side, live_config, run_side
    from . import retention

    if base.figures.get("prefix_caching") is False:
        step.status = NOT_APPLICABLE
        step.reason = ("prefix caching is OFF in the server (step 2's live config, "
                       "vllm:cache_config_info enable_prefix_caching=False): retention keeps "
                       "prefix-cache states, so there is nothing to compare; launch with "
                       "--enable-prefix-caching")
        return
    key = getattr(endpoint, "_api_key", None)
    timeout = dp.load.timeout or endpoint.timeout
    arms: list[retention.RetentionArm] = []
    step.figures["variants"] = []
    for label, args in dp.procedure.retention_arms():
        var = await asyncio.to_thread(relauncher.start, args,
                                      f"step{step.n}-" + re.sub(r"\W+", "-", label).strip("-"))
        try:
            step.figures["variants"].append(var.as_dict())
            if not var.ready:
                _refused(step, var)
                return
            try:
                cfg = await live_config(var.base_url, key, timeout)
                arm = await run_side(Side(label, var.base_url, endpoint.model), rs,
                                     api_key=key, timeout=timeout, config=cfg)
            except ABError as exc:
                step.status, step.reason = NOT_RUN, f"{label}: {exc}; the retention figures " \
                                                    "are unknown"
                return
            arms.append(retention.RetentionArm(label, tuple(args), arm, var.startup_s,
                                               str(var.log_path)))
        finally:
            await asyncio.to_thread(var.process.stop)
    changed, original = arms
    result = retention.compare(original, changed)
    step.figures["retention"] = result.as_dict()
    step.status = FAILED if result.outcome == retention.FAILED else RAN
    step.reason = result.line


async def run_procedure(endpoint: "Endpoint", dp: DecisionProfile, *,
                        relauncher: "Relauncher | None" = None,
                        requests: "RequestSet | None" = None,
                        progress: Callable[[Any], Any] | None = None) -> ProcedureResult:
    """Run steps 1-7 against ``endpoint`` (a discovered :class:`~pytest_k3accept.observe.endpoint.discover.
    Endpoint`); ``relauncher`` enables step 5; ``requests`` fixes the request set (default:
    the profile's ``request_set`` file, else synthetic requests built for the profile)."""
    from ...observe.load import requestset, synthetic
    from ...observe.load.runner import run_load

    fixed = requests is not None or bool(dp.load.request_set)
    steps = plan(dp, can_relaunch=relauncher is not None, fixed_set=fixed)
    by_n = {s.n: s for s in steps}
    async with endpoint.client(timeout=dp.load.timeout) as client:
        rs = requests or (requestset.load(dp.load.request_set) if dp.load.request_set
                          else await synthetic.generate(client, dp.load))
        by_n[1].status, by_n[1].figures = RAN, {"request_set": rs.describe()}
        by_n[1].reason = f"{len(rs)} requests, fingerprint {rs.fingerprint()[:12]}"
        for n in (2, 3, 4, 5, 6):
            step = by_n[n]
            if step.status != "planned" or step.profile is None:
                continue
            if n == 5:
                assert relauncher is not None
                await _retention_step(step, by_n[2], rs, endpoint, relauncher, dp)
                continue
            run_set = rs
            if n == 4:
                run_set = (requestset.load(step.profile.request_set)
                           if dp.procedure.reduced_request_set and step.profile.request_set
                           else await synthetic.generate(client, step.profile))
            absorb(step, await run_load(client, run_set, step.profile, progress=progress), dp)
            if n == 2 and step.figures.get("prefix_caching") is False:
                step.reason += ("; the server has prefix caching OFF, so this baseline is "
                                "cache-off (launch it with --enable-prefix-caching)")
    ok, problems = one_variable(steps)
    evidence = [Evidence("procedure", "steps", {"steps": [s.as_dict() for s in steps]})]
    verdict = decide({}, evidence, audience=dp.audience, target=dp.target(), layers=dp.layers)
    by_n[7].status, by_n[7].reason = RAN, f"verdict {verdict.name}: {verdict.headline}"
    return ProcedureResult(steps, verdict, ok, problems, rs.describe(), dp.target(),
                           "launch" if relauncher is not None else "endpoint")
