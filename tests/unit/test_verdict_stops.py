"""A run that could not measure: a usage error, an unreachable endpoint (the verdict names
them, never "run the target load"); and passing SLOs recorded beside the breaches."""

from __future__ import annotations

from typing import Any

from pytest_k3accept.checks.registry import ITEMS
from pytest_k3accept.checks.slo import SLO, judged
from pytest_k3accept.decide.verdict import UNDECIDED, decide
from pytest_k3accept.evidence.kinds import SloJudgement
from pytest_k3accept.evidence.store import Evidence

NONE = {cid: "not-checked" for cid in ITEMS}
UNREACHABLE = Evidence("endpoint-error", "cannot reach http://gpu:8000/v1/models: connection "
                       "refused", {"kind": "unreachable", "url": "http://gpu:8000"})


def test_a_usage_error_is_the_verdict_s_reason_and_advice() -> None:
    ev = [Evidence("usage-error", "usage error: --k3-profile: p.toml: concurrency: bad",
                   {"message": "--k3-profile: p.toml: concurrency: bad"}), UNREACHABLE]
    v = decide(NONE, ev)
    assert v.name == UNDECIDED
    assert v.reasons == ["the run stopped on a usage error: --k3-profile: p.toml: "
                         "concurrency: bad"]
    assert len(v.advice) == 1 and v.advice[0].startswith("Fix the usage error")


def test_an_unreachable_endpoint_is_named_by_the_advice() -> None:
    v = decide(NONE, [UNREACHABLE, UNREACHABLE])
    assert v.name == UNDECIDED
    assert v.reasons == [f"the endpoint was unreachable: {UNREACHABLE.summary}"]  # once
    assert v.advice[0].startswith("The endpoint was unreachable")
    assert not any("Run the target load" in a for a in v.advice)


def test_an_unreachable_second_endpoint_does_not_hide_what_the_first_measured() -> None:
    seen = Evidence("response", "a successful response", {"ok": True, "status": 200})
    v = decide(NONE, [UNREACHABLE, seen])
    assert not any("unreachable" in r for r in v.reasons)


def test_other_discovery_errors_are_not_called_unreachable() -> None:
    auth = Evidence("endpoint-error", "401 from /v1/models", {"kind": "auth"})
    v = decide(NONE, [auth])
    assert not any("unreachable" in a for a in v.advice)


def _summary(**over: Any) -> dict[str, Any]:
    base = {"requests": 10, "ok": 10, "errors": 0, "error_rate": 0.0, "elapsed": 5.0,
            "request_throughput": 2.0, "output_throughput": 40.0,
            "ttft": {"p50": 0.1, "p90": 0.2, "p99": 0.4, "mean": 0.15, "max": 0.5},
            "e2e": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "mean": 1.2, "max": 3.5}}
    return {**base, **over}


def test_every_limit_is_judged_the_passing_ones_with_their_measured_value() -> None:
    slo = SLO.from_mapping({"ttft_p99": 0.5, "e2e_p90": 1.5, "error_rate": 0.01,
                            "itl_p50": 0.05})
    rows = {r["name"]: r for r in judged(_summary(), slo)}
    assert rows["ttft_p99"] == {"name": "ttft_p99", "measured": 0.4, "required": 0.5,
                                "direction": "max", "unit": "s", "note": "", "ok": True}
    assert rows["error_rate"]["ok"] is True and rows["error_rate"]["measured"] == 0.0
    assert rows["e2e_p90"]["ok"] is False and rows["e2e_p90"]["measured"] == 2.0
    # not measured is a breach with the reason, never a pass
    assert rows["itl_p50"]["ok"] is False and rows["itl_p50"]["measured"] is None
    assert rows["itl_p50"]["note"]


def test_the_slo_judgement_keeps_what_was_checked() -> None:
    rows = judged(_summary(), SLO.from_mapping({"ttft_p99": 0.5}))
    j = SloJudgement("run-1", True, {"ttft_p99": 0.5}, (), checked=tuple(rows))
    back = SloJudgement.from_data(j.to_data())
    assert back == j and back.checked[0]["measured"] == 0.4
    old = SloJudgement.from_data({"run_id": "run-1", "ok": True, "limits": {}, "breaches": []})
    assert old.checked == ()
