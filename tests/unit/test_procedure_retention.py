"""Step 5 of the procedure: two cache-retention settings compared (pure parts and the step's
refusals with stand-in relaunches; the real run is tests/live/test_hybrid_live.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_k3accept.checks.prefix_ab.compare import Arm
from pytest_k3accept.checks.procedure import retention
from pytest_k3accept.checks.procedure.plan import (FAILED, NOT_APPLICABLE, DecisionProfile,
                                                   ProcedureError, ProcedureSpec, Step, plan)
from pytest_k3accept.checks.procedure.run import _retention_step
from pytest_k3accept.decide.verdict import KEEP, decide
from pytest_k3accept.evidence.store import Evidence
from pytest_k3accept.observe.endpoint.discover import Endpoint
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.requestset import ChatRequest, RequestSet
from pytest_k3accept.observe.server.command import LaunchPlan
from pytest_k3accept.observe.server.relaunch import Variant

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "triage" / "captures"
ON = {"enable_prefix_caching": "True", "mamba_cache_mode": "align", "block_size": "128"}


def _arm(label: str, hits: float, prefill: float | None, interval: str, *,
         errors: int = 0, cfg: dict[str, str] | None = None, measured: bool = True,
         ) -> retention.RetentionArm:
    args = ("--max-num-batched-tokens", "512", "--prefix-cache-retention-interval", interval)
    arm = Arm(label, "http://x", {**ON, "prefix_cache_retention_interval": interval,
                                  **(cfg or {})},
              requests=2, ok=2 - errors, errors=errors, first_error="HTTP 500" if errors else None,
              queries=3000.0, hits=hits, prefill_mean=prefill, measured=measured)
    return retention.RetentionArm(label, args, arm, 70.0, "/tmp/step5.log")


def test_more_hits_and_faster_prefill() -> None:
    base, changed = _arm("retention 0", 0, 1.081, "0"), _arm("retention 512", 1536, 0.069, "512")
    r = retention.compare(base, changed)
    assert r.outcome == retention.MORE_HITS and r.faster is True
    assert ("retention 512 vs retention 0: prefix-cache hits 1,536 vs 0 of 3,000 queried "
            "tokens; prefill mean 69 ms vs 1,081 ms") in r.line
    d = r.as_dict()
    assert d["base"]["interval"] == "0" and d["changed"]["interval"] == "512"
    assert d["changed"]["max_num_batched_tokens"] == "512"
    assert d["changed"]["args"] == ("--max-num-batched-tokens 512 "
                                    "--prefix-cache-retention-interval 512")
    assert d["base"]["prefix_cache_hits"] == 0 and d["changed"]["prefill_time_mean"] == 0.069
    said = retention.advice(d)
    assert said is not None and "--prefix-cache-retention-interval 512" in said
    assert "prefix-cache hits 0 -> 1,536 tokens, mean prefill 1,081 ms -> 69 ms" in said


def test_prefill_means_within_five_percent_are_not_told_apart() -> None:
    # CI on a fast machine: 119 ms vs 118 ms over two requests each is no finding either way
    base, changed = _arm("retention 0", 0, 0.118, "0"), _arm("retention 512", 1024, 0.119, "512")
    r = retention.compare(base, changed)
    assert r.outcome == retention.MORE_HITS and r.faster is None
    assert "prefill mean 119 ms vs 118 ms (within 5%: not told apart)" in r.line
    said = retention.advice(r.as_dict())
    assert said is not None and "launch with it" in said
    slower = retention.compare(base, _arm("retention 512", 1024, 0.140, "512"))
    assert slower.faster is False and "re-measure" in (retention.advice(slower.as_dict()) or "")


def test_same_hits_is_no_difference_and_advises_the_original_setting() -> None:
    r = retention.compare(_arm("retention 0", 0, 0.5, "0"), _arm("retention 512", 0, 0.5, "512"))
    assert r.outcome == retention.SAME and "does not change what this request set" in r.line
    said = retention.advice(r.as_dict())
    assert said is not None and "keep the retention setting it started from (retention 0)" in said


@pytest.mark.parametrize("base_kw, changed_kw, outcome, words", [
    ({}, {"errors": 1}, retention.FAILED, "retention 512: 1 of 2 requests failed (HTTP 500)"),
    ({}, {"cfg": {"enable_prefix_caching": "False"}}, retention.UNKNOWN,
     "prefix caching is OFF in the relaunched server (retention 512"),
    ({"measured": False}, {}, retention.UNKNOWN, "hits unknown"),
])
def test_what_the_comparison_cannot_decide(base_kw: dict[str, Any], changed_kw: dict[str, Any],
                                           outcome: str, words: str) -> None:
    r = retention.compare(_arm("retention 0", 0, 0.5, "0", **base_kw),
                          _arm("retention 512", 512, 0.4, "512", **changed_kw))
    assert r.outcome == outcome and words.replace("hits unknown", "unknown") in r.line, r.line
    assert retention.advice(r.as_dict()) is None


def test_spec_plans_two_arms_with_the_chunked_prefill_setting() -> None:
    spec = ProcedureSpec(retention_interval=512)
    assert spec.chunk_flags == ("--max-num-batched-tokens", "512")  # default: the interval
    assert spec.retention_arms() == [
        ("retention 512", ("--max-num-batched-tokens", "512",
                           "--prefix-cache-retention-interval", "512")),
        ("retention 0", ("--max-num-batched-tokens", "512",
                         "--prefix-cache-retention-interval", "0"))]
    assert ProcedureSpec(retention_interval=512, retention_batched_tokens=0).chunk_flags == ()
    s5 = plan(DecisionProfile(LoadProfile(), ProcedureSpec(retention_interval=512,
                                                           retention_batched_tokens=256)),
              can_relaunch=True, fixed_set=False)[4]
    assert s5.change == ("cache retention: retention 0 -> retention 512, two relaunches with "
                         "--max-num-batched-tokens 256, the request set one request at a time")
    with pytest.raises(ProcedureError, match="retention_interval 0 equals "
                                             "retention_base_interval"):
        ProcedureSpec.from_mapping({"retention_interval": 0})


class _Relauncher:
    """Stands in for :class:`Relauncher`: every start gives a variant that did not start."""

    def __init__(self, log: Path, code: int) -> None:
        self.log, self.code, self.starts = log, code, []

    def start(self, args: Any, label: str) -> Variant:
        self.starts.append((tuple(args), label))
        proc = SimpleNamespace(returncode=self.code, stop=lambda: None)
        return Variant(label, tuple(args), LaunchPlan("vllm serve ...", "http://127.0.0.1:1"),
                       self.log, proc, error="the server exited")


def _run(relauncher: _Relauncher, base_figures: dict[str, Any]) -> Step:
    dp = DecisionProfile(LoadProfile(), ProcedureSpec(retention_interval=100))
    step = plan(dp, can_relaunch=True, fixed_set=True)[4]
    base = Step(2, figures=base_figures)
    rs = RequestSet([ChatRequest(messages=[{"role": "user", "content": "x"}])])
    asyncio.run(_retention_step(step, base, rs, Endpoint("http://127.0.0.1:1", "m"),
                                relauncher, dp))  # type: ignore[arg-type]
    return step


def test_a_dense_model_is_not_applicable_after_one_relaunch(tmp_path: Path) -> None:
    log = tmp_path / "dense.log"
    log.write_text("(EngineCore pid=1) ERROR 12-01 17:30:01 [core.py:1510] ValueError: "
                   "prefix_cache_retention_interval is set but this model has no sliding-window "
                   "or Mamba KV cache group, so retention has no effect. Set it to 0 (it only "
                   "applies to sliding-window and Mamba attention).\n")
    relauncher = _Relauncher(log, 1)
    step = _run(relauncher, {"prefix_caching": True})
    assert step.status == NOT_APPLICABLE and "retention has no effect" in step.reason
    assert len(relauncher.starts) == 1  # the changed setting first: no second relaunch


def test_an_interval_off_the_block_grid_fails_as_config_with_vllms_line() -> None:
    relauncher = _Relauncher(CAPTURES / "0.32.0" / "retention-not-block-multiple.log", 1)
    step = _run(relauncher, {"prefix_caching": True})
    assert step.status == FAILED, step.reason
    assert "did not start (config)" in step.reason
    assert ("prefix_cache_retention_interval (100) must be non-negative and a multiple of "
            "scheduler_block_size (128)") in step.reason


def test_prefix_caching_off_needs_no_relaunch(tmp_path: Path) -> None:
    relauncher = _Relauncher(tmp_path / "none.log", 1)
    step = _run(relauncher, {"prefix_caching": False})
    assert step.status == NOT_APPLICABLE and not relauncher.starts
    assert "prefix caching is OFF in the server" in step.reason
    assert "--enable-prefix-caching" in step.reason


def _procedure(outcome_data: dict[str, Any]) -> Evidence:
    steps = [{"n": 2, "name": "baseline", "status": "ran", "target": True, "concurrency": 4,
              "context_tokens": 1000, "ok": 8, "errors": 0, "preemptions": 0, "peak_kv": 0.3,
              "headroom_ok": True},
             {"n": 5, "name": "change cache retention policy", "status": "ran",
              "capacity": False, "reason": outcome_data["line"], "retention": outcome_data}]
    return Evidence("procedure", "steps", {"steps": steps}, "t.py::test_proc")


def test_the_verdict_cites_step_5_and_advises_its_result() -> None:
    more = retention.compare(_arm("retention 0", 0, 1.081, "0"),
                             _arm("retention 512", 1536, 0.069, "512")).as_dict()
    v = decide({"C7": "pass"}, [_procedure(more)],
               target={"concurrency": 4, "context_tokens": 1000})
    assert v.name == KEEP, v.reasons
    assert any(r.startswith("retention 512 vs retention 0: prefix-cache hits 1,536 vs 0")
               and "procedure step 5 cache retention" in r for r in v.reasons), v.reasons
    assert any("Cache retention (step 5): --max-num-batched-tokens 512 "
               "--prefix-cache-retention-interval 512 raised" in a for a in v.advice), v.advice
    same = retention.compare(_arm("retention 0", 0, 0.5, "0"),
                             _arm("retention 512", 0, 0.5, "512")).as_dict()
    v = decide({"C7": "pass"}, [_procedure(same)],
               target={"concurrency": 4, "context_tokens": 1000})
    assert any("gave no more hits" in a for a in v.advice), v.advice
