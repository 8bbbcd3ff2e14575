"""The re-measurement procedure's plan: profile tables, one variable per step, skipped steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.checks.procedure.plan import (NOT_APPLICABLE, NOT_RUN, RAN, DecisionProfile,
                                                   ProcedureError, ProcedureSpec, changed,
                                                   one_variable, plan, read_profile)

PROFILE = """
name = "agent"
context_tokens = 6000
output_tokens = 64
concurrency = 16
prefix_tokens = 3000
request_set = "set.jsonl"
audience = "team"

[procedure]
reduced_concurrency = 4
reduced_context_tokens = 2000
retention_interval = 512

[layers]
driver = "fixed"
"""


def test_read_profile_splits_load_layers_procedure_audience(tmp_path: Path) -> None:
    p = tmp_path / "agent.toml"
    p.write_text(PROFILE)
    dp = read_profile(p)
    assert dp.load.concurrency == 16 and dp.load.name == "agent"
    assert dp.load.request_set == str((tmp_path / "set.jsonl").resolve())
    assert dp.procedure.reduced_concurrency == 4
    assert dp.procedure.retention_flags == ("--prefix-cache-retention-interval", "512")
    assert dp.layers.driver == "fixed" and dp.audience == "team"
    assert dp.target() == {"concurrency": 16, "context_tokens": 6000}


@pytest.mark.parametrize("text, match", [
    ('[procedure]\nreduced_concurency = 4\n', r"\[procedure\]: reduced_concurency: unknown"),
    ('[procedure]\nreduced_concurrency = 0\n', r"reduced_concurrency: expected an integer >= 1"),
    ('[procedure]\nretention_args = "--x"\n', r"retention_args: expected a list of strings"),
    ('audience = "boss"\n', r"audience: expected one of poc, team"),
    ('concurency = 4\n', r"concurency: unknown profile field"),
    ('[layers]\ndriver = "maybe"\n', r"\[layers\] line 2: driver = 'maybe'"),
])
def test_bad_decision_profiles_name_file_and_field(tmp_path: Path, text: str,
                                                   match: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ProcedureError, match=match) as err:
        read_profile(p)
    assert str(p) in str(err.value)


def _dp(**load: object) -> DecisionProfile:
    base = dict(context_tokens=1200, concurrency=8, prefix_tokens=200, requests=8)
    return DecisionProfile(LoadProfile().replace("t", **{**base, **load}),
                           ProcedureSpec(reduced_concurrency=2, reduced_context_tokens=600))


def test_plan_on_a_fixed_endpoint_reports_the_relaunch_step_not_run() -> None:
    steps = plan(_dp(), can_relaunch=False, fixed_set=False)
    assert [s.n for s in steps] == [1, 2, 3, 4, 5, 6, 7]
    s5 = steps[4]
    assert s5.status == NOT_RUN and "endpoint is fixed" in s5.reason
    assert "--k3-launch" in s5.reason
    assert steps[2].change == "concurrency 8 -> 2" and steps[2].base == 2
    assert steps[3].base == 3 and steps[3].variable == "context_tokens"
    assert steps[3].profile is not None and steps[3].profile.concurrency == 2
    assert steps[3].profile.context_tokens == 600
    assert steps[1].target and steps[5].target and not steps[2].target


def test_each_step_changes_one_variable_against_its_base() -> None:
    steps = plan(_dp(), can_relaunch=True, fixed_set=False)
    by_n = {s.n: s for s in steps}
    assert changed(by_n[3], by_n[2]) == ["concurrency"]
    assert changed(by_n[4], by_n[3]) == ["context_tokens"]
    assert changed(by_n[5], by_n[2]) == ["server flags"]
    assert changed(by_n[6], by_n[2]) == []
    for s in steps:
        s.status = RAN
    assert one_variable(steps) == (True, [])
    # a step that changed two things at once is caught
    by_n[4].profile = by_n[2].profile.replace("t", context_tokens=600, concurrency=2)  # type: ignore[union-attr]
    by_n[4].base = 2
    ok, problems = one_variable(steps)
    assert not ok and "step 4 changed concurrency, context_tokens at once" in problems[0]


def test_prefix_is_shrunk_to_fit_a_lower_context() -> None:
    dp = _dp(prefix_tokens=800)
    s4 = plan(dp, can_relaunch=False, fixed_set=False)[3]
    assert s4.profile is not None and s4.profile.prefix_tokens == 300
    assert "shared prefix 800 -> 300" in s4.change


def test_fixed_request_set_needs_a_reduced_set_for_step_4() -> None:
    s4 = plan(_dp(), can_relaunch=False, fixed_set=True)[3]
    assert s4.status == NOT_APPLICABLE and "reduced_request_set" in s4.reason


def test_concurrency_one_target_has_no_lower_step() -> None:
    dp = DecisionProfile(LoadProfile().replace("t", concurrency=1, context_tokens=512))
    steps = plan(dp, can_relaunch=False, fixed_set=False)
    assert steps[2].status == NOT_APPLICABLE and steps[3].base == 2


def test_open_loop_lowers_the_rate() -> None:
    dp = DecisionProfile(LoadProfile().replace("t", rate=4.0, context_tokens=512),
                         ProcedureSpec())
    s3 = plan(dp, can_relaunch=False, fixed_set=False)[2]
    assert s3.variable == "rate" and s3.profile is not None and s3.profile.rate == 2.0


def test_step_log_line_and_dict() -> None:
    steps = plan(_dp(), can_relaunch=False, fixed_set=False)
    assert steps[2].line() == "step 3 lower concurrency (vs step 2: concurrency 8 -> 2): PLANNED"
    d = steps[4].as_dict()
    assert d["status"] == "not-run" and d["capacity"] is False
    assert d["server_args"] == ["--max-num-batched-tokens", "1024",
                                "--prefix-cache-retention-interval", "1024"]
    assert "retention 0 -> retention 1024, two relaunches with --max-num-batched-tokens 1024" \
        in d["change"]
