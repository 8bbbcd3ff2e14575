"""The verdict, branch by branch, from constructed evidence (no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_k3accept.checks.registry import ITEMS
from pytest_k3accept.decide.layers import Layers
from pytest_k3accept.evidence.store import Evidence, RunState
from pytest_k3accept.decide.verdict import (ACCEPT_LIMITS, FUNCTIONAL_ONLY, KEEP, MOVE_ENVIRONMENT,
                                            NAMES, SCALE, UNDECIDED, Verdict, decide, decide_state,
                                            verdict_lines)

ALL_NOT_CHECKED = {cid: "not-checked" for cid in ITEMS}


def statuses(**given: str) -> dict[str, str]:
    return {**ALL_NOT_CHECKED, **given}


def load(conc: int, ctx: int, *, ok: int = 16, errors: int = 0, preempt: float = 0,
         peak: float | None = 0.3, nodeid: str = "t.py::test_load",
         kind: str = "timeout") -> Evidence:
    """A "load" evidence entry shaped like LoadResult.as_dict() (errors of one kind)."""
    by_kind = {k: 0 for k in ("http-4xx", "http-5xx", "timeout", "connection", "protocol")}
    by_kind[kind] = errors
    data: dict[str, Any] = {
        "profile": {"concurrency": conc, "context_tokens": ctx, "headroom": {"min_free": 0.1}},
        "summary": {"ok": ok, "errors": errors, "requests": ok + errors,
                    "errors_by_kind": by_kind},
        "server": {"preemptions": preempt, "peak_kv_usage": peak}}
    return Evidence("load", f"load c{conc} ctx{ctx}", data, nodeid)


def headroom(conc: int, ctx: int, ok: bool, *, replicas: int | None = None,
             peak: float = 0.5, nodeid: str = "t.py::test_head") -> list[Evidence]:
    """What the k3_headroom marker records: the load run, then its headroom judgement."""
    run = load(conc, ctx, peak=peak, preempt=0 if ok else 3, nodeid=nodeid)
    data = {"ok": ok, "reasons": [] if ok else ["3 preemptions > allowed 0"],
            "peak_kv_usage": peak, "preemptions": 0 if ok else 3, "replicas": replicas,
            "load_factor": 2.0 if replicas else 1.0, "limits": {"min_free": 0.1},
            "profile": "agent", "failover": bool(replicas)}
    return [run, Evidence("headroom", f"headroom {'OK' if ok else 'NO'}", data, nodeid)]


def classification(category: str, line: str, **extra: Any) -> Evidence:
    """Shaped like server.classify.Classification.as_dict()."""
    data = {"category": category, "phase": "while loading weights",
            "evidence": [{"text": line, "lineno": 42, "at": None}],
            "evidence_lines": [line], **extra}
    return Evidence("classification", f"server {category}: {line}", data, "t.py::test_start")


TIMELINE_DONE = Evidence("timeline", "server timeline (launch); missing: none", {
    "events": [{"key": "process_start", "at": 100.0}, {"key": "engine_init_done", "at": 112.3},
               {"key": "first_response", "at": 113.0}], "missing": []})


def test_every_verdict_name_is_known_and_bad_names_are_rejected() -> None:
    assert set(NAMES) == {"keep", "accept-limits", "scale", "move-environment",
                          "functional-only", "undecided"}
    with pytest.raises(ValueError, match="unknown verdict"):
        Verdict("tuned")


# -- move-environment ---------------------------------------------------------------------
def test_driver_below_r580_moves_environment_and_respects_a_fixed_driver() -> None:
    env = Evidence("environment", "ENVIRONMENT FAILURE (C4 driver-r580)",
                   {"item": "C4", "ok": False, "expected": ">= 580", "actual": "535.104"},
                   "t.py::test_driver")
    v = decide(statuses(C4="fail"), [env, load(16, 6000, preempt=5)],
               layers=Layers(driver="fixed", container="changeable"))
    assert v.name == MOVE_ENVIRONMENT
    assert v.blocked_layers == ["driver"]
    assert any("marked fixed" in a for a in v.advice)
    assert not any("upgrade the host driver" in a.lower() for a in v.advice)
    assert any("t.py::test_driver" in r for r in v.reasons)


def test_changeable_driver_is_advised_to_be_upgraded() -> None:
    env = Evidence("environment", "C4 failed", {"item": "C4", "ok": False})
    v = decide(statuses(), [env], layers=Layers(driver="changeable"))
    assert v.name == MOVE_ENVIRONMENT and not v.blocked_layers
    assert any("upgrade the host driver to R580" in a for a in v.advice)


def test_loading_oom_is_move_environment_never_scale() -> None:
    line = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 32768000000 bytes"
    v = decide(statuses(), [classification("loading", line), load(16, 6000, preempt=9)])
    assert v.name == MOVE_ENVIRONMENT
    assert any(line in r for r in v.reasons)
    assert any("lowering context or concurrency will not help" in a for a in v.advice)


def test_failed_checklist_item_without_evidence_still_moves() -> None:
    v = decide(statuses(C3="fail"), [], item_tests={"C3": ["t.py::test_image"]},
               layers=Layers(container="fixed"))
    assert v.name == MOVE_ENVIRONMENT and v.blocked_layers == ["container"]
    assert "t.py::test_image" in v.reasons[0]


def test_interconnect_errors_need_the_network_layer() -> None:
    v = decide(statuses(), [classification("connection", "NCCL error: unhandled system error")],
               layers=Layers(network="fixed"))
    assert v.name == MOVE_ENVIRONMENT and v.blocked_layers == ["network"]


def test_environment_category_with_driver_text_points_at_the_driver() -> None:
    ev = classification("environment", "CUDA driver version is insufficient for CUDA runtime")
    v = decide(statuses(), [ev], layers=Layers(driver="fixed"))
    assert v.blocked_layers == ["driver"]


# -- undecided on non-memory crashes --------------------------------------------------------
@pytest.mark.parametrize("category", ["serving", "config"])
def test_crash_or_rejected_launch_is_undecided(category: str) -> None:
    v = decide(statuses(), [classification(category, "EngineCore encountered a fatal error."),
                            load(16, 6000)])
    assert v.name == UNDECIDED
    want = {"serving": "other than memory", "config": "configuration error"}[category]
    assert any(want in a for a in v.advice)


# -- functional-only -----------------------------------------------------------------------
def test_poc_audience_is_functional_only_even_with_a_good_load() -> None:
    v = decide(statuses(), [load(16, 6000), TIMELINE_DONE], audience="poc")
    assert v.name == FUNCTIONAL_ONLY
    assert any("POC" in r for r in v.reasons)


def test_audience_can_come_from_evidence() -> None:
    ev = Evidence("audience", "POC suite", {"audience": "poc"})
    assert decide(statuses(), [ev, load(1, 128)]).name == FUNCTIONAL_ONLY


def test_concurrency_one_without_init_is_not_capacity() -> None:
    v = decide(statuses(), [load(1, 128, ok=3)], target={"concurrency": 1,
                                                          "context_tokens": 128})
    assert v.name == FUNCTIONAL_ONLY
    assert any("not counted as capacity" in r and "init was not observed" in r
               for r in v.reasons)


def test_concurrency_one_counts_only_with_init_and_a_concurrency_one_target() -> None:
    v = decide(statuses(), [load(1, 128, ok=3), TIMELINE_DONE],
               target={"concurrency": 1, "context_tokens": 128})
    assert v.name == KEEP
    v = decide(statuses(), [load(1, 128, ok=3), TIMELINE_DONE])
    assert v.name == FUNCTIONAL_ONLY
    assert any("single stream" in r for r in v.reasons)


def test_a_first_response_alone_is_functional_only() -> None:
    assert decide(statuses(), [TIMELINE_DONE]).name == FUNCTIONAL_ONLY
    resp = Evidence("response", "chat ok", {"ok": True}, "t.py::test_chat")
    assert decide(statuses(), [resp]).name == FUNCTIONAL_ONLY


# -- keep / accept-limits / scale -------------------------------------------------------------
def test_headroom_at_target_keeps() -> None:
    v = decide(statuses(C10="pass"), headroom(16, 6000, True))
    assert v.name == KEEP
    assert v.limits == {"concurrency": 16, "context_tokens": 6000}
    assert any("strengthen monitoring" in a for a in v.advice)


def test_stable_load_with_low_peak_kv_keeps() -> None:
    assert decide(statuses(), [load(8, 1024, peak=0.4)]).name == KEEP


def test_target_failing_but_reduced_concurrency_holding_accepts_limits() -> None:
    ev = [load(16, 1641, preempt=8, peak=1.0, nodeid="t.py::test_target"),
          load(4, 1641, peak=0.5, nodeid="t.py::test_reduced")]
    v = decide(statuses(), ev, target={"concurrency": 16, "context_tokens": 1641})
    assert v.name == ACCEPT_LIMITS
    assert v.limits["concurrency"] == 4 and v.limits["context_tokens"] == 1641
    assert v.limits["target_concurrency"] == 16
    assert any("8 preemptions" in r and "t.py::test_target" in r for r in v.reasons)
    assert any("held at reduced concurrency 4" in r for r in v.reasons)


def test_target_failing_with_nothing_below_holding_scales() -> None:
    v = decide(statuses(), [load(16, 1641, preempt=8, peak=1.0),
                            load(8, 1641, preempt=2, peak=1.0)])
    assert v.name == SCALE
    assert any("multi-node" in a for a in v.advice)


def test_scale_advice_respects_a_fixed_network() -> None:
    v = decide(statuses(), [load(16, 1641, errors=3)], layers=Layers(network="fixed"))
    assert v.name == SCALE
    assert not any("Scale out (multi-node" in a for a in v.advice)
    assert any("marked fixed" in a for a in v.advice)


def test_no_failover_headroom_scales_even_if_the_target_held() -> None:
    v = decide(statuses(), [*headroom(16, 6000, True),
                            *headroom(32, 6000, False, replicas=2, nodeid="t.py::test_fo"),
                            load(4, 6000)])
    assert v.name == SCALE
    assert any("no failover headroom" in r for r in v.reasons)
    assert decide(statuses(C10="fail"), headroom(16, 6000, True)).name == SCALE


def test_kv_cache_too_small_at_init_is_a_capacity_shortage() -> None:
    line = ("ValueError: To serve at least one request with the model's max seq len (4096), "
            "(0.06 GiB KV cache is needed, which is larger than the available KV cache memory")
    v = decide(statuses(), [classification("kv-capacity-at-init", line)])
    assert v.name == SCALE and any("max seq len" in r for r in v.reasons)
    v = decide(statuses(), [classification("kv-capacity-at-init", line), load(4, 1024)],
               target={"concurrency": 16, "context_tokens": 4096})
    assert v.name == ACCEPT_LIMITS


def test_stable_target_without_a_headroom_figure_is_undecided() -> None:
    v = decide(statuses(), [load(16, 6000, peak=None)])
    assert v.name == UNDECIDED and any("k3_headroom" in a for a in v.advice)


def test_target_not_measured_is_undecided() -> None:
    v = decide(statuses(), [load(4, 512)], target={"concurrency": 16, "context_tokens": 6000})
    assert v.name == UNDECIDED and "target load was not measured" in v.reasons[-1]


def test_nothing_at_all_is_undecided() -> None:
    v = decide(statuses(), [])
    assert v.name == UNDECIDED and len(v.not_checked) == len(ITEMS)


def test_procedure_steps_are_read_with_their_target_flags() -> None:
    steps = [
        {"n": 2, "name": "baseline", "status": "ran", "target": True, "concurrency": 16,
         "context_tokens": 1641, "ok": 16, "errors": 0, "preemptions": 8, "peak_kv": 1.0},
        {"n": 3, "name": "lower concurrency", "status": "ran", "target": False,
         "concurrency": 4, "context_tokens": 1641, "ok": 16, "errors": 0, "preemptions": 0,
         "peak_kv": 0.6},
        {"n": 5, "name": "retention", "status": "ran", "capacity": False, "target": False,
         "concurrency": 16, "context_tokens": 1641, "ok": 16, "errors": 0, "preemptions": 0,
         "peak_kv": 0.2},
        {"n": 6, "name": "restore", "status": "not-run", "reason": "x"},
    ]
    v = decide(statuses(C7="pass"), [Evidence("procedure", "steps", {"steps": steps},
                                              "t.py::test_proc")])
    assert v.name == ACCEPT_LIMITS and v.limits["concurrency"] == 4
    assert any("step 3 lower concurrency" in r for r in v.reasons)


def test_a_failing_cache_ab_is_cited_on_keep() -> None:
    ab = Evidence("prefix-cache-ab", "A/B FAILED: 0 hits", {"ok": False})
    v = decide(statuses(C8="fail"), [*headroom(16, 6000, True), ab])
    assert v.name == KEEP and any("cache savings" in a for a in v.advice)


# -- output --------------------------------------------------------------------------------
def test_as_dict_and_lines_from_a_run_state() -> None:
    state = RunState()
    state.checklist.add(["C4"], "t.py::test_driver", "fail", "driver 535")
    state.checklist.add(["C6"], "t.py::test_set", "pass")
    state.add("environment", "C4 failed", {"item": "C4", "ok": False}, "t.py::test_driver")
    v = decide_state(state, Layers(driver="fixed", source="p.toml: [layers]"))
    data = json.loads(json.dumps(v.as_dict()))
    assert data["name"] == MOVE_ENVIRONMENT
    assert {"id": "C6", "slug": "request-set"} not in data["not_checked"]
    assert {"id": "C1", "slug": "oom-phase"} in data["not_checked"]
    assert data["layers"]["driver"] == "fixed"
    lines = verdict_lines(v)
    assert lines[0].startswith("verdict: MOVE-ENVIRONMENT")
    assert any(line.startswith("  fixed layers the fix would need: driver") for line in lines)
    assert any("C1 oom-phase" in line for line in lines if "not checked" in line)
    assert verdict_lines(state, Layers(driver="fixed"))[0] == lines[0]


def test_timeline_without_init_does_not_count_as_init() -> None:
    started = Evidence("timeline", "missing: engine_init_done", {
        "events": [{"key": "process_start", "at": 1.0}, {"key": "first_response", "at": 9.0}]})
    v = decide(statuses(), [started, load(1, 128, ok=2)], target={"concurrency": 1})
    assert v.name == FUNCTIONAL_ONLY
    assert any("init was not observed" in r for r in v.reasons)


def test_classification_quotes_come_from_evidence_dicts_too() -> None:
    ev = Evidence("classification", "loading", {
        "category": "loading", "evidence": [{"text": "CUDA out of memory. Tried to allocate"}]})
    v = decide(statuses(), [ev])
    assert v.name == MOVE_ENVIRONMENT and "CUDA out of memory" in v.reasons[0]


def test_failing_headroom_at_target_with_a_lighter_run_holding_accepts_limits() -> None:
    ev = [load(4, 2048, peak=0.4, nodeid="t.py::test_light"), *headroom(16, 2048, False)]
    v = decide(statuses(), ev)
    assert v.name == ACCEPT_LIMITS and v.limits["concurrency"] == 4
    assert v.limits["target_concurrency"] == 16


@pytest.mark.parametrize("kind", ["http-5xx", "connection", "http-4xx"])
def test_failed_requests_beyond_the_tests_limits_mean_the_target_did_not_hold(kind: str) -> None:
    """Errors are judged against the test's own limits (default: none allowed): beyond them
    the load did not hold; the advice asks for the errors' cause."""
    v = decide(statuses(), [load(16, 2048, errors=4, kind=kind), load(4, 2048)])
    assert v.name == ACCEPT_LIMITS
    assert any("did not hold" in r and "4 errors" in r for r in v.reasons)
    assert any(f"4 {kind}" in a and "cause" in a for a in v.advice)


@pytest.mark.parametrize("kind", ["http-5xx", "connection", "http-4xx"])
def test_a_load_where_every_request_failed_is_not_a_capacity_figure(kind: str) -> None:
    v = decide(statuses(), [load(16, 2048, ok=0, errors=16, kind=kind), load(4, 2048)])
    assert v.name == UNDECIDED
    assert any(f"16 {kind}" in r and "not a capacity figure" in r for r in v.reasons)


def test_timeouts_under_load_are_a_capacity_signal() -> None:
    v = decide(statuses(), [load(16, 2048, errors=4, kind="timeout"), load(4, 2048)])
    assert v.name == ACCEPT_LIMITS


def test_an_unknown_load_size_is_named_unknown_not_guessed() -> None:
    run = load(16, 6000)
    del run.data["profile"]["context_tokens"]
    v = decide(statuses(), [run])
    assert any("concurrency 16, context unknown" in r for r in v.reasons), v.reasons
    assert not any("?" in r for r in v.reasons)
