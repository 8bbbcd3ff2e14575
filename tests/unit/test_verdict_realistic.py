"""The verdict on evidence shaped like a GPU production run (issue: one typed spine).

Each case that was wrong before is a test named after it. The evidence is typed
(:mod:`pytest_k3accept.evidence.kinds`) as the plugin's fixtures make it: load runs of 8
engines' worth of streams at 128K contexts, errors at 0.1 %, SLO and headroom judgements that
name the run they judged.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_k3accept.checks import headroom as headroom_check
from pytest_k3accept.checks.registry import FAIL, ITEMS, PASS, SKIP, Checklist
from pytest_k3accept.decide.verdict import (ACCEPT_LIMITS, KEEP, MOVE_ENVIRONMENT, SCALE,
                                            UNDECIDED, decide)
from pytest_k3accept.evidence.kinds import (DEFAULT_TARGET, HeadroomJudgement, LoadRun,
                                            SloJudgement)
from pytest_k3accept.evidence.store import Evidence, RunState

NODE = "suites/production/test_production.py::test_target_load"
SOURCE = "k3_headroom marker of " + NODE


def statuses(**given: str) -> dict[str, str]:
    return {**{cid: "not-checked" for cid in ITEMS}, **given}


def run(run_id: str, conc: int = 64, ctx: int = 131072, *, requests: int = 1000,
        errors: int = 0, kind: str = "http-5xx", preempt: float = 0.0,
        peak: float | None = 0.62, target: bool | None = True,
        source: str = SOURCE, **more: Any) -> Evidence:
    """A load run as ``fixtures/load.py`` records it (typed, with a run id; ``more``: any
    other :class:`LoadRun` field)."""
    typed = LoadRun(run_id=run_id, profile_name="agent-128k", concurrency=conc,
                    context_tokens=ctx, requests=requests, ok=requests - errors, errors=errors,
                    errors_by_kind={kind: errors} if errors else {}, preemptions=preempt,
                    peak_kv=peak, peak_kv_from="samples", gauge_samples=240,
                    target_source=source, target=target, **more)
    return Evidence(LoadRun.KIND, f"{run_id}: c{conc} ctx{ctx}", typed.to_data(), NODE,
                    typed=typed)


def judged(run_id: str, ok: bool | None, **limits: Any) -> Evidence:
    typed = HeadroomJudgement(run_id=run_id, ok=ok, **limits)
    return Evidence(HeadroomJudgement.KIND, f"headroom {ok} for {run_id}", typed.to_data(),
                    NODE, typed=typed)


def slo(run_id: str, breaches: list[dict[str, Any]]) -> Evidence:
    typed = SloJudgement(run_id, not breaches, {"ttft_p99": 30.0}, tuple(breaches))
    return Evidence(SloJudgement.KIND, f"slo for {run_id}", typed.to_data(), NODE, typed=typed)


TTFT_BREACH = {"name": "ttft_p99", "measured": 310.0, "required": 30.0, "direction": "max",
               "unit": "s", "note": ""}


def slo_unknown(run_id: str) -> Evidence:
    """The SLO judgement of a run whose TTFT a buffering proxy hid (``ok`` None)."""
    breach = {"name": "ttft_p99", "measured": None, "required": 30.0, "direction": "max",
              "unit": "s", "note": "buffered stream: TTFT not measurable"}
    typed = SloJudgement(run_id, None, {"ttft_p99": 30.0}, (breach,))
    return Evidence(SloJudgement.KIND, f"slo unknown for {run_id}", typed.to_data(), NODE,
                    typed=typed)


#: how the runner words a client that offered less than the load (observe.load.saturation)
SHORT_CLIENT = ("the client itself was the limit: the client used 99% of one core, it kept "
                "20.0 requests in flight of the 64 requested; the load offered may be less")


def classification(category: str, line: str) -> Evidence:
    return Evidence("classification", f"server {category}: {line}",
                    {"category": category, "evidence_lines": [line]}, "t.py::test_start")


# -- SLO breaches ---------------------------------------------------------------------------
def test_slo_breach_at_the_target_is_never_keep() -> None:
    v = decide(statuses(), [run("run-1"), judged("run-1", True), slo("run-1", [TTFT_BREACH])])
    assert v.name == SCALE
    assert any("ttft_p99 = 310" in r and "required <= 30" in r for r in v.reasons)


def test_slo_breach_at_the_target_with_reduced_limits_that_met_the_slos_is_accept_limits(
        ) -> None:
    v = decide(statuses(), [run("run-1"), judged("run-1", True), slo("run-1", [TTFT_BREACH]),
                            run("run-2", 16, 131072, target=False), slo("run-2", [])])
    assert v.name == ACCEPT_LIMITS
    assert v.limits["concurrency"] == 16 and v.limits["target_concurrency"] == 64


def test_slo_breach_at_the_target_with_reduced_limits_that_also_breached_is_scale() -> None:
    v = decide(statuses(), [run("run-1"), slo("run-1", [TTFT_BREACH]),
                            run("run-2", 16, 131072, target=False), slo("run-2", [TTFT_BREACH])])
    assert v.name == SCALE


# -- out of memory while serving, errors against the test's limits -------------------------
def test_serving_oom_with_5xx_and_lost_connections_is_capacity_evidence() -> None:
    oom = classification("serving-oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to "
                         "allocate 2.00 GiB. GPU 3 has a total capacity of 139.81 GiB")
    v = decide(statuses(), [oom, run("run-1", errors=180, kind="http-5xx"),
                            run("run-2", errors=20, kind="connection")])
    assert v.name == SCALE
    assert any("serving-oom" in r for r in v.reasons)
    with_reduced = decide(statuses(), [oom, run("run-1", errors=180),
                                       run("run-3", 16, 32768, target=False)])
    assert with_reduced.name == ACCEPT_LIMITS


def test_serving_oom_where_every_request_failed_is_still_capacity_evidence() -> None:
    oom = classification("serving-oom", "torch.OutOfMemoryError: CUDA out of memory.")
    v = decide(statuses(), [oom, run("run-1", errors=1000, kind="http-5xx")])
    assert v.name == SCALE


def test_one_http_400_in_1000_requests_within_the_tests_limit_is_keep() -> None:
    v = decide(statuses(), [run("run-1", errors=1, kind="http-4xx"),
                            judged("run-1", True, max_error_rate=0.005)])
    assert v.name == KEEP


def test_one_http_400_in_1000_requests_beyond_a_zero_limit_is_not_keep() -> None:
    v = decide(statuses(), [run("run-1", errors=1, kind="http-4xx"), judged("run-1", False)])
    assert v.name == SCALE
    assert any("1 http-4xx" in a and "cause" in a for a in v.advice)


def test_a_run_within_its_own_preemption_limit_is_stable() -> None:
    v = decide(statuses(), [run("run-1", preempt=2), judged("run-1", True, max_preemptions=2)])
    assert v.name == KEEP


def test_a_run_within_its_own_error_limit_is_stable() -> None:
    v = decide(statuses(), [run("run-1", errors=1), judged("run-1", True, max_error_rate=0.005)])
    assert v.name == KEEP


# -- each judgement names its own run -------------------------------------------------------
def test_each_headroom_judgement_names_its_own_run_in_a_sweep() -> None:
    """16 / 8 / 4 streams; the 16-stream run fails: the reason names 16, not the last (4)."""
    ev = [run("run-1", 16, 8192), run("run-2", 8, 8192, target=False),
          run("run-3", 4, 8192, target=False),
          judged("run-1", False, min_free=0.1), judged("run-2", True), judged("run-3", True)]
    v = decide(statuses(), ev)
    assert v.name == ACCEPT_LIMITS
    assert any("target concurrency 16" in r and "did not hold" in r for r in v.reasons)
    assert not any("target concurrency 4 " in r for r in v.reasons)
    assert v.limits["concurrency"] == 8


def test_the_verdict_does_not_depend_on_judgements_arriving_before_their_runs() -> None:
    ev = [judged("run-1", False), slo("run-2", []), run("run-1", 16, 8192),
          run("run-2", 8, 8192, target=False), judged("run-2", True)]
    assert decide(statuses(), ev).name == ACCEPT_LIMITS


# -- unknown is unknown ---------------------------------------------------------------------
class ServerRun:
    """A LoadResult-like run for the headroom check: only what ``checks.headroom`` reads."""

    def __init__(self, **server: Any) -> None:
        self.summary = {"error_rate": 0.0, "errors_by_kind": {}}
        self.server = {"peak_kv_from": "samples", "preemptions": 0.0,
                       "sustained_waiting": None, **server}
        self.server_error: str | None = None
        self.gpu = None
        self.endpoint = "http://k3:8000"


def test_no_gauge_sample_during_the_run_is_peak_unknown_not_headroom_ok() -> None:
    # the only KV figure is the idle snapshot after the run
    h = headroom_check.decide(ServerRun(peak_kv_usage=0.01, gauge_samples=0))
    assert h.ok is None and "not measured" in h.line()
    v = decide(statuses(), [run("run-1", peak=None), judged("run-1", None)])
    assert v.name == UNDECIDED
    assert any("peak KV unknown" in r for r in v.reasons)


def test_samples_that_never_caught_a_request_are_peak_unknown_not_headroom_ok() -> None:
    """Short requests falling between the 0.25 s gauge samples: every sample shows an idle
    server (nothing running or waiting, 0 % KV). That 0 % is not the peak: undecided, and the
    evidence's peak is None; one sample at work is enough to decide; preemptions still prove
    a full cache whatever the samples say."""
    from pytest_k3accept.observe.load.peak import unmeasured_peak

    idle = ServerRun(peak_kv_usage=0.0, gauge_samples=6, gauge_busy_samples=0)
    h = headroom_check.decide(idle)
    assert h.ok is None and "caught a request running" in h.line()
    assert "none of the 6 gauge samples" in (unmeasured_peak(idle.server) or "")
    busy = headroom_check.decide(ServerRun(peak_kv_usage=0.02, gauge_samples=6,
                                           gauge_busy_samples=1))
    assert busy.ok is True and busy.peak_kv_usage == 0.02
    older = headroom_check.decide(ServerRun(peak_kv_usage=0.02, gauge_samples=6))
    assert older.ok is True  # a record without the count (older plugin): decided as before
    full = headroom_check.decide(ServerRun(peak_kv_usage=1.0, peak_kv_from="preemptions",
                                           preemptions=3.0, gauge_samples=6,
                                           gauge_busy_samples=0))
    assert full.ok is False and any("preemptions" in r for r in full.reasons)


def test_an_unknown_queue_is_said_not_skipped_silently() -> None:
    h = headroom_check.decide(ServerRun(peak_kv_usage=0.4, gauge_samples=3))
    assert h.ok is True and any("queue not judged" in n for n in h.notes)


# -- failures that are not about capacity ---------------------------------------------------
def test_sigkill_after_init_is_killed_asks_for_the_kernel_log_and_says_nothing_of_the_network(
        ) -> None:
    v = decide(statuses(), [classification("killed", "the server was killed by SIGKILL "
                                           "(exit 137)"), run("run-1")])
    assert v.name == UNDECIDED
    assert any("dmesg" in a for a in v.advice)
    assert not any("network" in a.lower() for a in v.advice)


def test_a_configuration_error_before_init_is_config_not_loading() -> None:
    v = decide(statuses(), [classification("config", "ValueError: Unknown quantization method: "
                                           "fp3")])
    assert v.name == UNDECIDED and v.name != MOVE_ENVIRONMENT
    assert any("configuration error" in a for a in v.advice)


def test_host_oom_is_the_environment() -> None:
    v = decide(statuses(), [classification("host-oom", "Memory cgroup out of memory: Killed "
                                           "process 4242 (python3)")])
    assert v.name == MOVE_ENVIRONMENT


def test_an_unrecognised_failure_is_undecided_with_its_lines_quoted() -> None:
    v = decide(statuses(), [classification("unknown", "RuntimeError: something new"),
                            run("run-1"), judged("run-1", True)])
    assert v.name == UNDECIDED and any("something new" in r for r in v.reasons)


# -- keep needs a target that someone set --------------------------------------------------
def test_a_bare_k3_headroom_on_the_built_in_default_never_earns_keep() -> None:
    v = decide(statuses(), [run("run-1", 4, 512, source=DEFAULT_TARGET), judged("run-1", True)])
    assert v.name == UNDECIDED
    assert any("no target load was set" in r for r in v.reasons)


def test_keep_says_who_set_the_target() -> None:
    v = decide(statuses(), [run("run-1"), judged("run-1", True)])
    assert v.name == KEEP
    assert any(r.startswith("target set by: ") and SOURCE in r for r in v.reasons)


def test_keep_with_a_session_target_on_a_default_profile_run() -> None:
    v = decide(statuses(), [run("run-1", 16, 4096, source=DEFAULT_TARGET), judged("run-1", True)],
               target={"concurrency": 16, "context_tokens": 4096})
    assert v.name == KEEP


# -- the checklist --------------------------------------------------------------------------
def test_a_checklist_item_with_one_pass_and_one_skip_is_not_pass() -> None:
    c = Checklist()
    c.add(["C9"], "a.py::one", PASS)
    c.add(["C9"], "a.py::two", SKIP)
    c.add(["C4"], "a.py::three", PASS)
    c.add(["C4"], "a.py::four", FAIL)
    c.add(["C3"], "a.py::five", PASS)
    got = c.statuses()
    assert (got["C9"], got["C4"], got["C3"], got["C1"]) == (SKIP, FAIL, PASS, "not-checked")


# -- typed evidence: bad shapes are named at the call site ---------------------------------
def test_typed_evidence_with_a_wrong_shape_names_the_field() -> None:
    with pytest.raises(TypeError, match=r"LoadRun\.concurrency"):
        LoadRun(run_id="r", profile_name="p", concurrency="64",  # type: ignore[arg-type]
                context_tokens=1, requests=1, ok=1, errors=0)
    with pytest.raises(TypeError, match=r"HeadroomJudgement\.ok"):
        HeadroomJudgement(run_id="r", ok="yes")  # type: ignore[arg-type]


def test_typed_evidence_round_trips_through_the_record_form() -> None:
    state = RunState()
    typed = LoadRun(run_id=state.next_run_id(), profile_name="p", concurrency=8,
                    context_tokens=746, requests=10, ok=10, errors=0, target_source=SOURCE)
    ev = state.add_typed(typed, "a run", extra={"summary": {"ok": 10}})
    assert ev.data["summary"] == {"ok": 10} and ev.data["run_id"] == "run-1"
    assert LoadRun.from_data(ev.data) == typed
    plain = Evidence("load", "replayed", dict(ev.data), "")
    assert decide(statuses(), [plain, Evidence("headroom", "h", judged("run-1", True).data)]
                  ).name == KEEP


# -- properties over generated evidence -----------------------------------------------------
ORDER = {KEEP: 0, ACCEPT_LIMITS: 1, SCALE: 2}

runs_st = st.lists(st.tuples(st.sampled_from([1, 2, 4, 8, 16, 64, 256]),
                             st.sampled_from([2048, 32768, 131072]),
                             st.integers(0, 3), st.floats(0.0, 0.95), st.booleans()),
                   min_size=1, max_size=5)


def _evidence(spec: list[tuple[int, int, int, float, bool]]) -> list[Evidence]:
    out: list[Evidence] = []
    top = max(c * x for c, x, *_ in spec)
    for i, (conc, ctx, errors, peak, slo_ok) in enumerate(spec, 1):
        rid = f"run-{i}"
        out.append(run(rid, conc, ctx, requests=100, errors=errors, peak=peak,
                       target=conc * ctx == top))
        out.append(judged(rid, errors == 0 and peak <= 0.9))
        out.append(slo(rid, [] if slo_ok else [TTFT_BREACH]))
    return out


FAILURES = st.sampled_from(["error", "preemption", "slo", "environment", "serving-oom",
                            "slo-unknown", "preemptions-unknown", "client-short",
                            "all-timed-out"])


def _add_failure(ev: list[Evidence], what: str) -> list[Evidence]:
    if what == "environment":
        return [*ev, Evidence("environment", "C4 failed", {"item": "C4", "ok": False})]
    if what == "serving-oom":
        return [*ev, classification("serving-oom", "CUDA out of memory")]
    target = [e for e in ev if e.kind == "load" and e.typed.target]
    rid = target[0].typed.run_id if target else "run-1"
    if what == "slo":
        return [*ev, slo(rid, [TTFT_BREACH])]
    if what == "slo-unknown":  # a buffering proxy: TTFT not measurable
        return [*ev, slo_unknown(rid)]
    base = target[0].typed if target else ev[0].typed
    extra: dict[str, Any] = {
        "error": dict(errors=5, requests=100), "preemption": dict(preempt=3),
        "preemptions-unknown": dict(preempt=None),
        "client-short": dict(client_limited=SHORT_CLIENT),
        "all-timed-out": dict(errors=100, requests=100, kind="timeout"),
    }[what]
    ctx = None if what == "all-timed-out" else base.context_tokens  # measured: successes only
    worse = run(rid, base.concurrency, ctx, target=base.target,
                asked_context_tokens=base.context_tokens, **extra)
    return [worse if e.kind == "load" and e.typed.run_id == rid else e for e in ev]


@settings(max_examples=150, deadline=None)
@given(runs_st, FAILURES)
def test_a_worse_observation_never_gives_a_better_verdict(spec: Any, what: str) -> None:
    ev = _evidence(spec)
    before = decide(statuses(), ev).name
    after = decide(statuses(), _add_failure(ev, what)).name
    if before == MOVE_ENVIRONMENT:
        assert after == MOVE_ENVIRONMENT
    if before in ORDER and after in ORDER:
        assert ORDER[after] >= ORDER[before], (before, after)
    if before != KEEP:
        assert after != KEEP


@settings(max_examples=100, deadline=None)
@given(runs_st, st.randoms(use_true_random=False))
def test_the_verdict_does_not_depend_on_the_order_evidence_arrived_in(spec: Any,
                                                                      rnd: Any) -> None:
    ev = _evidence(spec)
    shuffled = list(ev)
    rnd.shuffle(shuffled)
    a, b = decide(statuses(), ev), decide(statuses(), shuffled)
    assert (a.name, a.limits) == (b.name, b.limits)


@settings(max_examples=100, deadline=None)
@given(runs_st, st.sampled_from(["pass", "fail", "skip", "not-checked"]),
       st.sampled_from(["pass", "fail", "skip", "not-checked"]))
def test_every_verdict_cites_evidence_and_keep_never_beside_a_failed_c9_or_c10(
        spec: Any, c9: str, c10: str) -> None:
    v = decide(statuses(C9=c9, C10=c10), _evidence(spec))
    if v.name != UNDECIDED:
        assert v.evidence
    if FAIL in (c9, c10):
        assert v.name != KEEP


# -- a partial run (a worker lost mid-run) ---------------------------------------------------
LOST = "process 2 of 2 lost: worker 2 of 2 (pid 7) died mid-run, 1.2 s after the start"


class _Judged:
    """What the checks read of a run (headroom.RunLike), made from a spec's figures."""

    def __init__(self, errors: int, peak: float, ttft_p99: float, partial: str | None) -> None:
        self.summary: dict[str, Any] = {
            "requests": 100, "ok": 100 - errors, "errors": errors, "error_rate": errors / 100,
            "errors_by_kind": {"http-5xx": errors}, "ttft": {"p99": ttft_p99}, "elapsed": 10.0,
            "partial": partial}
        self.server: dict[str, Any] | None = {"peak_kv_usage": peak, "preemptions": 0.0,
                                              "sustained_waiting": 0.0, "gauge_samples": 40}
        self.server_error, self.gpu, self.endpoint = None, None, "http://x"


def _checked(spec: list[tuple[int, int, int, float, bool]], lost: list[bool]) -> list[Evidence]:
    """The evidence the fixtures record, each judgement made by the checks themselves;
    the runs marked in ``lost`` are partial."""
    from pytest_k3accept.checks import slo as slo_check

    out: list[Evidence] = []
    top = max(c * x for c, x, *_ in spec)
    limits = slo_check.SLO.from_mapping({"ttft_p99": 30.0})
    for i, ((conc, ctx, errors, peak, slo_ok), partial) in enumerate(zip(spec, lost), 1):
        rid, said = f"run-{i}", LOST if partial else None
        typed = LoadRun(run_id=rid, profile_name="p", concurrency=conc, context_tokens=ctx,
                        requests=100, ok=100 - errors, errors=errors,
                        errors_by_kind={"http-5xx": errors} if errors else {}, peak_kv=peak,
                        target_source=SOURCE, target=conc * ctx == top, partial=said,
                        processes=2)
        out.append(Evidence(LoadRun.KIND, rid, typed.to_data(), NODE, typed=typed))
        ran = _Judged(errors, peak, 1.0 if slo_ok else 310.0, said)
        h = headroom_check.decide(ran).judgement(rid)
        out.append(Evidence(HeadroomJudgement.KIND, rid, h.to_data(), NODE, typed=h))
        breaches = slo_check.check(ran.summary, limits)
        j = SloJudgement(rid, slo_check.outcome(ran.summary, breaches), limits.as_dict(),
                         tuple(b.as_dict() for b in breaches))
        out.append(Evidence(SloJudgement.KIND, rid, j.to_data(), NODE, typed=j))
    return out


def test_a_partial_run_that_held_is_undecided_never_keep() -> None:
    whole = decide(statuses(), _checked([(64, 131072, 0, 0.5, True)], [False]))
    part = decide(statuses(), _checked([(64, 131072, 0, 0.5, True)], [True]))
    assert whole.name == KEEP and part.name == UNDECIDED


def test_a_partial_run_that_failed_still_fails_and_a_partial_lighter_run_is_not_held() -> None:
    failing = (64, 131072, 5, 0.5, True)  # 5 % errors at the target
    part = decide(statuses(), _checked([failing], [True]))
    assert part.name == SCALE
    assert any("judged on a partial run: " + LOST in r for r in part.reasons)
    lighter = (16, 131072, 0, 0.4, True)
    assert decide(statuses(), _checked([failing, lighter], [False, False])).name == ACCEPT_LIMITS
    assert decide(statuses(), _checked([failing, lighter], [False, True])).name == SCALE


@settings(max_examples=150, deadline=None)
@given(runs_st, st.data())
def test_a_partial_run_never_gives_a_better_verdict_than_the_same_run_complete(
        spec: Any, data: st.DataObject) -> None:
    lost = data.draw(st.lists(st.booleans(), min_size=len(spec), max_size=len(spec)))
    before = decide(statuses(), _checked(spec, [False] * len(spec))).name
    after = decide(statuses(), _checked(spec, lost)).name
    if before in ORDER and after in ORDER:
        assert ORDER[after] >= ORDER[before], (before, after)
    if before != KEEP:
        assert after != KEEP
    if before in (SCALE, ACCEPT_LIMITS):  # a failure measured on it stays a failure
        assert after in (SCALE, ACCEPT_LIMITS), (before, after)
    if any(lost) and all(lost[i] for i, (c, x, *_) in enumerate(spec)
                         if c * x == max(a * b for a, b, *_ in spec)):
        assert after != KEEP  # every run at the target partial: never kept


def test_the_rule_table_in_the_docs_is_the_code() -> None:
    from pathlib import Path

    from pytest_k3accept.decide import rules

    doc = (Path(__file__).parents[2] / "docs" / "decisions.md").read_text()
    assert rules.rule_table() in doc
    assert all(rule.__doc__ for rule in rules.RULES)


def test_a_rule_that_raises_gives_undecided_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_k3accept.decide import rules, verdict

    def broken(case: Any) -> None:
        raise KeyError("peak")

    broken.__name__ = "shortage"
    monkeypatch.setattr(verdict, "RULES", (rules.environment_first, broken, rules.keep))
    v = decide(statuses(), [run("run-1"), judged("run-1", True)])
    assert v.name == UNDECIDED and "rule shortage failed: KeyError" in v.reasons[0]


def test_the_public_face_gives_the_types_a_suite_annotates_with() -> None:
    import subprocess
    import sys

    import pytest_k3accept as pk

    for name in pk.__all__:
        assert getattr(pk, name) is not None, name
    assert pk.Verdict is __import__("pytest_k3accept.decide.outcome", fromlist=["x"]).Verdict
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        pk.Nope  # noqa: B018
    # importing the package stays inert: no HTTP library, no NVML
    out = subprocess.run([sys.executable, "-c", "import sys, pytest_k3accept; print(sorted("
                          "m for m in ('httpx', 'aiohttp', 'pynvml') if m in sys.modules))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# -- what was not measured is unknown, never a pass (review of 2026-12-07) ------------------
def test_an_slo_a_buffering_proxy_made_unmeasurable_is_undecided_never_keep() -> None:
    v = decide(statuses(), [run("run-1"), judged("run-1", True), slo_unknown("run-1")])
    assert v.name == UNDECIDED
    assert any("SLO not measured" in r and "ttft_p99" in r for r in v.reasons), v.reasons


def test_one_run_at_the_target_with_headroom_unknown_is_undecided_never_keep() -> None:
    # replica B's /metrics could not be scraped: its run at the target has no peak
    unknown = headroom_check.decide(_Srv(None))
    ev = [run("run-1"), judged("run-1", True), run("run-2", peak=None),
          judged("run-2", unknown.ok, reasons=unknown.reasons)]
    v = decide(statuses(), ev)
    assert unknown.ok is None and v.name == UNDECIDED
    assert any("unknown: KV-cache usage not measured: metrics unavailable" in r
               for r in v.reasons), v.reasons


def test_a_failover_run_whose_survivor_was_not_scraped_is_undecided_never_keep() -> None:
    h = headroom_check.decide(_Srv(None), load_factor=2.0, replicas=2)
    ev = [run("run-1"), judged("run-1", True),
          run("run-2", 128, peak=None, failover=True, load_factor=2.0),
          judged("run-2", h.ok, failover=True, replicas=2)]
    assert decide(statuses(C10="skip"), ev, audience="production").name == UNDECIDED


def test_a_client_that_offered_less_than_the_load_is_no_headroom_pass() -> None:
    h = headroom_check.decide(_Srv({"peak_kv_usage": 0.55}, client_limited=SHORT_CLIENT))
    assert h.ok is None and any("saturated client" in r for r in h.reasons)
    v = decide(statuses(), [run("run-1", peak=0.55, client_limited=SHORT_CLIENT),
                            judged("run-1", h.ok, reasons=h.reasons)])
    assert v.name == UNDECIDED
    # a shortage measured even at the smaller load stays a shortage
    full = headroom_check.decide(_Srv({"peak_kv_usage": 0.97}, client_limited=SHORT_CLIENT))
    assert full.ok is False


def test_a_client_at_a_full_core_that_offered_the_whole_load_keeps_its_pass() -> None:
    hot = ("the client itself was the limit: the client used 97% of one core; the load "
           "offered may be less than the profile asked for")
    h = headroom_check.decide(_Srv({"peak_kv_usage": 0.55}, client_limited=hot))
    assert h.ok is True and any("saturated client" in n for n in h.notes)


def test_an_slo_met_by_a_client_that_offered_less_is_unknown() -> None:
    from pytest_k3accept.checks import slo as slo_check

    summary = {"client_limited": SHORT_CLIENT, "ttft": {"p99": 12.0}}
    limits = slo_check.SLO.from_mapping({"ttft_p99": 30.0})
    assert slo_check.outcome(summary, slo_check.check(summary, limits)) is None
    breached = {"client_limited": SHORT_CLIENT, "ttft": {"p99": 45.0}}
    assert slo_check.outcome(breached, slo_check.check(breached, limits)) is False


def test_preemptions_not_exported_leave_headroom_unknown() -> None:
    # the proof of a cache that filled between two samples is missing (a /metrics without
    # vllm:num_preemptions): 85 % at the samples is no pass
    h = headroom_check.decide(_Srv({"peak_kv_usage": 0.85, "preemptions": None}))
    assert h.ok is None and any("preemptions not measured" in r for r in h.reasons)
    v = decide(statuses(), [run("run-1", peak=0.85, preempt=None)],
               target={"concurrency": 64, "context_tokens": 131072})
    assert v.name == UNDECIDED
    assert any("preemptions not measured" in r for r in v.reasons), v.reasons


def test_most_metrics_samples_failed_is_peak_unknown() -> None:
    h = headroom_check.decide(_Srv({"peak_kv_usage": 0.30, "gauge_samples": 1,
                                    "gauge_busy_samples": 1, "gauge_sample_errors": 199,
                                    "gauge_sample_error": "ReadTimeout"}))
    assert h.ok is None
    assert any("199 of 200 /metrics samples" in r and "ReadTimeout" in r for r in h.reasons)


def test_a_plain_load_run_with_a_lasting_queue_has_no_headroom_as_k3_headroom_says() -> None:
    srv = {"peak_kv_usage": 0.85, "sustained_waiting": 12.0, "peak_waiting": 20.0}
    assert headroom_check.decide(_Srv(srv)).ok is False
    v = decide(statuses(), [run("run-1", peak=0.85, target=None, sustained_waiting=12.0,
                                source="profile file prod.toml")],
               target={"concurrency": 64, "context_tokens": 131072})
    assert v.name == SCALE


@pytest.mark.parametrize("worse", ["every request timed out", "its long prompts got 400"])
def test_a_heavier_run_that_failed_harder_never_makes_the_lighter_one_the_target(
        worse: str) -> None:
    # a k3_load sweep with no target set: the heaviest run is the target, by what it asked
    # for, not by what its successful requests measured (failures shrink that)
    src = "k3_load.run() values"
    held = run("run-1", 64, 131072, target=None, source=src, asked_context_tokens=131072)
    some = run("run-2", 128, 131072, errors=400, kind="timeout", peak=1.0, preempt=37,
               target=None, source=src, asked_context_tokens=131072)
    all_failed = (run("run-2", 128, None, errors=1000, kind="timeout", peak=1.0, preempt=80,
                      target=None, source=src, asked_context_tokens=131072)
                  if worse == "every request timed out" else
                  run("run-2", 128, 32768, errors=500, kind="http-4xx", peak=0.97,
                      preempt=12, target=None, source=src, asked_context_tokens=131072))
    assert decide(statuses(), [held, some]).name == ACCEPT_LIMITS
    v = decide(statuses(), [held, all_failed])
    assert v.name == ACCEPT_LIMITS and v.limits["target_concurrency"] == 128


def test_serving_oom_at_the_target_gives_the_tuning_order_before_scale() -> None:
    v = decide(statuses(), [classification("serving-oom", "torch.OutOfMemoryError: CUDA out "
                                           "of memory. Tried to allocate 2.00 GiB"),
                            run("run-1", errors=180, peak=1.0)])
    assert v.name == SCALE
    first = v.advice[0]
    assert first.index("context length") < first.index("concurrency") < first.index(
        "prefix caching")
    assert "No load below the target was measured" in first


def test_kv_too_small_at_init_advises_max_model_len_before_scale() -> None:
    v = decide(statuses(), [classification(
        "kv-capacity-at-init", "ValueError: To serve at least one request with the models's "
        "max seq len (131072), (16.0 GiB KV cache is needed, which is larger than the "
        "available KV cache memory (9.2 GiB)")])
    assert "--max-model-len" in v.advice[0] and v.advice[-1].startswith("Scale out")


def test_an_slo_breach_with_headroom_left_points_at_prefill_not_only_at_scale() -> None:
    v = decide(statuses(), [run("run-1", peak=0.55), judged("run-1", True),
                            slo("run-1", [TTFT_BREACH])])
    assert v.name == SCALE
    assert any("breached its SLO with KV headroom left" in r for r in v.reasons)
    assert any("prefill side" in a for a in v.advice)


class _Srv:
    """A finished run as ``checks.headroom.decide`` reads it (``LoadResult``'s fields)."""

    def __init__(self, server: dict[str, Any] | None, **summary: Any) -> None:
        base = {"peak_kv_usage": 0.62, "peak_kv_from": "samples", "preemptions": 0.0,
                "gauge_samples": 240, "gauge_busy_samples": 240, "sustained_waiting": 0.0,
                "peak_waiting": 0.0}
        self.summary: dict[str, Any] = {"requests": 1000, "ok": 1000, "errors": 0,
                                        "error_rate": 0.0, "errors_by_kind": {}, **summary}
        self.server = None if server is None else {**base, **server}
        self.server_error = None if server is not None else "metrics unavailable"
        self.gpu: dict[str, Any] | None = None
        self.endpoint = "http://k3:8000"


def test_a_soak_cut_at_its_time_bound_is_not_failed_by_the_requests_the_harness_cut() -> None:
    # an hour at 16 x 128K: 2000 answered, the 16 in flight at 3600 s cut by the runner (no
    # older than the longest that completed): no error, headroom from the server's figures
    from pytest_k3accept.observe.load import stats
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.result import LoadResult, RunRecord
    from pytest_k3accept.observe.load.runner import cut_record

    prof = LoadProfile(name="soak", concurrency=16, context_tokens=131072, requests=10**6,
                       max_seconds=3600)
    recs = [RunRecord(True, status=200, ttft=3.0, e2e=60.0, prompt_tokens=131072,
                      completion_tokens=1024, itl=[0.05] * 10, stream=True)
            for _ in range(2000)] + [cut_record(30.0, 60.0, prof) for _ in range(16)]
    server = {**_Srv({}).server, "peak_kv_usage": 0.60}  # type: ignore[dict-item]
    res = LoadResult(profile=prof, records=recs, elapsed=3600.0, started_at=0.0,
                     stopped_by="time", not_sent=10**6 - 2016,
                     summary=stats.summarize(recs, 3600.0),
                     achieved_concurrency={"mean": 16.0, "max": 16.0},
                     endpoint="http://k3:8000", mode="closed",
                     request_set={"synthetic": True}, server=server)
    assert res.summary["cut"] == 16 and res.summary["errors"] == 0
    h = headroom_check.decide(res)
    assert h.ok is True, h.reasons
    typed = res.evidence("run-1", SOURCE, target=True)
    ev = [Evidence(LoadRun.KIND, res.line(), typed.to_data(), NODE, typed=typed),
          judged("run-1", h.ok)]
    assert decide(statuses(), ev).name == KEEP


def test_a_production_keep_without_failover_headroom_says_it_does_not_cover_a_replica_loss(
        ) -> None:
    v = decide(statuses(C9="pass", C10="skip"), [run("run-1"), judged("run-1", True)],
               audience="production")
    assert v.name == KEEP
    assert any("failover headroom (C10) was not measured" in r for r in v.reasons)
    measured = decide(statuses(C9="pass", C10="pass"), [run("run-1"), judged("run-1", True)],
                      audience="production")
    assert not any("C10" in r for r in measured.reasons)
