"""SLO breaches (measured vs required) and the headroom decision, on constructed runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_k3accept.checks import headroom
from pytest_k3accept.checks.slo import SLO, SLOError, check


@dataclass
class Rec:
    ok: bool = True
    error_kind: str | None = None
    ttft: float | None = 0.2
    itl: list[float] = field(default_factory=list)
    e2e: float | None = 1.0
    prompt_tokens: int | None = 10
    completion_tokens: int | None = 2
    cached_tokens: int | None = None

    @property
    def tpot(self) -> float | None:
        return None


def summary(**kw: Any) -> dict[str, Any]:
    base = {"requests": 10, "ok": 10, "errors": 0, "error_rate": 0.0, "elapsed": 5.0,
            "ttft": {"p50": 0.1, "p90": 0.2, "p99": 0.9, "mean": 0.15, "max": 1.0},
            "e2e": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "mean": 1.2, "max": 3.5},
            "itl": None, "tpot": None, "request_throughput": 2.0, "output_throughput": 40.0}
    base.update(kw)
    return base


def test_breaches_report_measured_and_required() -> None:
    slo = SLO.from_mapping({"ttft_p99": 0.5, "e2e_p90": 5.0, "error_rate": 0.0,
                            "request_throughput": 3.0})
    out = check(summary(), slo)
    assert [b.name for b in out] == ["ttft_p99", "request_throughput"]
    assert str(out[0]) == "ttft_p99 = 0.9 s, required <= 0.5 s"
    assert str(out[1]) == "request_throughput = 2 req/s, required >= 3 req/s"
    assert out[0].as_dict()["measured"] == 0.9


def test_unmeasurable_latency_is_a_breach_with_the_reason() -> None:
    slo = SLO.from_mapping({"itl_p99": 0.1})
    (b,) = check(summary(), slo)
    assert b.measured is None and "needs streaming" in str(b)
    (b,) = check(summary(ok=0, ttft=None, e2e=None, error_rate=1.0),
                 SLO.from_mapping({"ttft_p99": 1}))
    assert "no successful request" in str(b)


def test_goodput_uses_per_request_limits() -> None:
    recs = [Rec(ttft=0.1), Rec(ttft=0.1), Rec(ttft=3.0), Rec(ok=False, error_kind="timeout")]
    slo = SLO.from_mapping({"goodput": 0.5, "goodput_ratio": 0.75, "goodput_ttft": 1.0})
    out = {b.name: b for b in check(summary(elapsed=2.0), slo, recs)}
    assert "goodput" not in out  # 2 good / 2 s = 1 req/s >= 0.5
    assert out["goodput_ratio"].measured == 0.5


@pytest.mark.parametrize("data, what", [
    ({"ttft_p98": 1}, "unknown SLO (did you mean"),
    ({"error_rate": 2}, "fraction within [0, 1]"),
    ({"e2e_p99": -1}, "finite number >= 0"),
    ({"e2e_p99": "1s"}, "expected a number"),
])
def test_bad_slos(data: dict[str, Any], what: str) -> None:
    with pytest.raises(SLOError, match="k3_slo"):
        try:
            SLO.from_mapping(data, "k3_slo")
        except SLOError as exc:
            assert what in str(exc)
            raise


@dataclass
class Run:
    summary: dict[str, Any]
    server: dict[str, Any] | None
    server_error: str | None = None
    gpu: dict[str, Any] | None = None
    endpoint: str = "http://x"


def srv(**kw: Any) -> dict[str, Any]:
    return {"peak_kv_usage": 0.5, "preemptions": 0.0, "peak_waiting": 0.0,
            "sustained_waiting": 0.0, "queue_time_mean": 0.001, **kw}


def test_headroom_ok_with_free_kv_and_no_trouble() -> None:
    v = headroom.decide(Run(summary(), srv()))
    assert v.ok is True and v.free_kv == pytest.approx(0.5)
    assert "headroom OK" in v.line() and "free KV at peak 50.0%" in v.line()
    assert v.as_dict()["ok"] is True and v.notes  # GPU not measured is noted


@pytest.mark.parametrize("server, summ, reason", [
    (srv(peak_kv_usage=0.95), {}, "free KV cache at peak 5.0% < required 10.0%"),
    (srv(preemptions=8.0), {}, "8 preemptions > allowed 0"),
    (srv(sustained_waiting=15.0, peak_waiting=15.0, queue_time_mean=4.7), {},
     "15 requests queued for at least 1 s > allowed 0"),
    (srv(), {"error_rate": 0.25, "errors_by_kind": {"timeout": 2, "http-5xx": 0}},
     "error rate 25.0% > allowed 0.0% (2 timeout)"),
])
def test_no_headroom_says_why_with_numbers(server: dict[str, Any], summ: dict[str, Any],
                                           reason: str) -> None:
    v = headroom.decide(Run(summary(**summ), server))
    assert v.ok is False
    assert any(reason in r for r in v.reasons), v.reasons
    assert v.line().startswith("NO headroom at http://x")


def test_limits_are_adjustable() -> None:
    run = Run(summary(), srv(peak_kv_usage=0.85, preemptions=2.0, sustained_waiting=3.0))
    assert headroom.decide(run).ok is False
    assert headroom.decide(run, min_free=0.1, max_preemptions=2, max_waiting=None).ok is True


def test_without_metrics_undecided_unless_already_failed() -> None:
    v = headroom.decide(Run(summary(), None, server_error="metrics disabled"))
    assert v.ok is None and "KV-cache usage not measured: metrics disabled" in v.line()
    v = headroom.decide(Run(summary(error_rate=0.5, errors_by_kind={"timeout": 5}), None))
    assert v.ok is False


def test_gpu_memory_judged_only_when_asked() -> None:
    gpu = {"memory_used_bytes": 95, "memory_total_bytes": 100}
    run = Run(summary(), srv(), gpu=gpu)
    assert headroom.decide(run).ok is True
    v = headroom.decide(run, min_free_gpu=0.1)
    assert v.ok is False and v.free_gpu == pytest.approx(0.05)
    assert headroom.gpu_free_fraction({"free_fraction": 0.3}) == 0.3
    assert headroom.gpu_free_fraction({"fb_used_mib": 3, "fb_free_mib": 1}) == 0.25
    assert headroom.gpu_free_fraction({"kind": "kv-cache-usage"}) is None


def test_failover_factor_and_combine() -> None:
    assert headroom.failover_factor(2) == 2.0
    assert headroom.failover_factor(4) == pytest.approx(4 / 3)
    with pytest.raises(ValueError):
        headroom.failover_factor(1)
    ok = headroom.decide(Run(summary(), srv()), load_factor=2.0, replicas=2)
    bad = headroom.decide(Run(summary(), srv(preemptions=1.0)))
    und = headroom.decide(Run(summary(), None))
    assert "failover: load x2.00 for 2 replicas" in ok.line()
    assert headroom.combine([ok, ok]) is True
    assert headroom.combine([ok, und]) is None
    assert headroom.combine([und, bad]) is False
    assert headroom.combine([]) is None


# -- a partial run (a worker lost mid-run): a pass is unknown, a breach stays a failure -----
PARTIAL = "process 2 of 2 lost: worker 2 of 2 (pid 7) died mid-run, 1.2 s after the start"


def test_headroom_that_held_on_a_partial_run_is_undecided_with_the_note() -> None:
    whole = headroom.decide(Run(summary(), srv()))
    v = headroom.decide(Run(summary(partial=PARTIAL), srv()))
    assert whole.ok is True and v.ok is None  # less than the target load: no pass at it
    assert v.free_kv == whole.free_kv  # the figures are still the measured ones
    note = f"judged on a partial run: {PARTIAL}"
    assert note in v.notes and any(note in r for r in v.reasons)
    assert v.line().startswith("headroom undecided at http://x")
    assert v.judgement("r1").ok is None


@pytest.mark.parametrize("server, summ", [
    (srv(peak_kv_usage=0.95), {}),
    (srv(preemptions=8.0), {}),
    (srv(), {"error_rate": 0.25, "errors_by_kind": {"timeout": 2}}),
    (None, {"error_rate": 0.25, "errors_by_kind": {"timeout": 2}}),  # KV not measured
])
def test_a_shortage_on_a_partial_run_stays_a_failure_with_the_note(
        server: dict[str, Any] | None, summ: dict[str, Any]) -> None:
    v = headroom.decide(Run(summary(partial=PARTIAL, **summ), server))
    assert v.ok is False
    assert f"judged on a partial run: {PARTIAL}" in v.notes
    assert not any("judged on a partial run" in r for r in v.reasons)  # the shortage is why


def test_slos_met_on_a_partial_run_are_unknown_and_a_breach_stays_a_breach() -> None:
    from pytest_k3accept.checks.slo import judged, outcome

    limits = SLO.from_mapping({"ttft_p99": 2.0, "e2e_p90": 5.0})
    whole, part = summary(), summary(partial=PARTIAL)
    assert check(part, limits) == [] and outcome(whole, []) is True
    assert outcome(part, []) is None  # met at less than the target load: not met
    assert [c["ok"] for c in judged(part, limits)] == [None, None]
    assert all(PARTIAL in c["note"] for c in judged(part, limits))
    breached = check(part, SLO.from_mapping({"ttft_p99": 0.5}))
    assert outcome(part, breached) is False  # breached even at the smaller load
    assert str(breached[0]).endswith(f"(judged on a partial run: {PARTIAL})")
    (missing,) = check(summary(partial=PARTIAL), SLO.from_mapping({"itl_p99": 0.1}))
    assert outcome(part, [missing]) is False and PARTIAL in missing.note
