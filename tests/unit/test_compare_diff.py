"""What changed between two sessions (compare/diff.py) and C6/C7 across sessions
(checks/procedure/sessions.py), on the real records in tests/data/records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept.checks.procedure.sessions import across_sessions
from pytest_k3accept.compare import RecordError, compare
from pytest_k3accept.compare.read import from_data

RECORDS = Path(__file__).resolve().parents[1] / "data" / "records"


def record(name: str = "record-1.1-load.json") -> dict[str, Any]:
    return json.loads((RECORDS / name).read_text())  # type: ignore[no-any-return]


def rep(data: dict[str, Any]) -> dict[str, Any]:
    return data["reproduction"]  # type: ignore[no-any-return]


def set_arg(data: dict[str, Any], flag: str, value: str) -> None:
    words = rep(data)["launch_args"]["value"]
    if flag in words:
        words[words.index(flag) + 1] = value
    else:
        words += [flag, value]


def judged(old: dict[str, Any], new: dict[str, Any]) -> Any:
    return compare(from_data(old, "base.json"), from_data(new, "new.json"))


def test_one_changed_variable_passes_c7_and_is_listed_as_a_to_b() -> None:
    new = record()
    rep(new)["vllm_version"]["value"] = "0.33.0"
    c = judged(record(), new)
    assert c.conditions.variables == ["vllm_version"]
    assert c.conditions.changed_lines() == ["changed: vLLM version: 0.32.0 -> 0.33.0"]
    assert c.items["C7"][0] == "pass" and "0.32.0 -> 0.33.0" in c.items["C7"][1]
    assert c.items["C6"][0] == "pass"


def test_two_changed_variables_fail_c7_with_the_list() -> None:
    old, new = record(), record()
    rep(old)["image"] = {"value": "vllm/vllm-openai:v0.32.0-cu130", "source": "--k3-image"}
    rep(new)["image"] = {"value": "vllm/vllm-openai:v0.33.0-cu130", "source": "--k3-image"}
    set_arg(new, "--gpu-memory-utilization", "0.85")
    c = judged(old, new)
    assert c.conditions.variables == ["image", "--gpu-memory-utilization"]
    outcome, message = c.items["C7"]
    assert outcome == "fail" and "2 variables changed at once" in message
    assert "image: vllm/vllm-openai:v0.32.0-cu130 -> vllm/vllm-openai:v0.33.0-cu130" in message
    assert "launch argument --gpu-memory-utilization: (absent) -> 0.85" in message
    assert c.problems() == [message]


def test_launch_arguments_one_by_one_and_a_field_flag_counts_once() -> None:
    new = record()
    set_arg(new, "--max-model-len", "4096")
    rep(new)["max_context"]["value"] = 4096
    set_arg(new, "--port", "1")
    c = judged(record(), new)
    assert c.conditions.variables == ["max_context"]
    lines = [ch.line() for ch in c.conditions.changes]
    assert "changed: max context: 2048 -> 4096" in lines
    assert ("changed: launch argument --port: 34261 -> 1 (not counted: a launched server gets "
            "a free port each time)") in lines


def test_environment_variables_one_by_one_the_plugins_own_do_not_count() -> None:
    new = record()
    env = rep(new)["environment"]["value"]
    env["VLLM_ATTENTION_BACKEND"] = "FLASHINFER"
    env["K3ACCEPT_CACHE"] = "/elsewhere"
    c = judged(record(), new)
    assert c.conditions.variables == ["env VLLM_ATTENTION_BACKEND"]
    assert "changed: environment VLLM_ATTENTION_BACKEND: (absent) -> FLASHINFER" in [
        ch.line() for ch in c.conditions.changes]


def test_a_field_known_on_one_side_is_not_compared_not_a_change() -> None:
    new = record()
    rep(new)["host_driver"] = {"value": "580.65.06", "source": "facts"}
    c = judged(record(), new)
    assert c.conditions.variables == []
    assert c.conditions.one_sided == ["host driver: unknown in the baseline (unknown -> "
                                      "580.65.06)"]
    assert "image" in c.conditions.unknown_both


def test_a_different_request_set_says_so_and_c6_c7_cannot_pass() -> None:
    new = record()
    load = next(e for e in new["evidence"] if e["kind"] == "load")["data"]
    load["request_set"]["fingerprint"] = "ab" * 32
    rep(new)["vllm_version"]["value"] = "0.33.0"
    c = judged(record(), new)
    assert c.requests.status == "different"
    assert c.requests.line.startswith("DIFFERENT request set (load 'default'")
    assert c.items["C6"][0] == "fail" and c.items["C7"][0] == "fail"
    assert "also changed: vLLM version" in c.items["C7"][1]
    assert c.to_markdown().startswith("> **DIFFERENT request set")


def test_no_change_and_unknown_launch_arguments_leave_c7_undecided() -> None:
    c = judged(record(), record())
    assert c.items["C7"][0] is None and "same-condition" in c.items["C7"][1]
    old, new = record(), record()
    for d in (old, new):
        rep(d)["launch_args"] = {"value": None, "reason": "endpoint mode"}
    rep(new)["vllm_version"]["value"] = "0.33.0"
    outcome, message = judged(old, new).items["C7"]
    assert outcome is None and "other server flags may have changed too" in message


def test_an_unknown_request_set_decides_neither_way() -> None:
    c = judged(record("record-1.1-poc.json"), record("record-1.1-poc.json"))
    assert c.requests.status == "unknown" and c.items["C6"][0] is None


def test_records_of_other_models_are_not_a_before_after() -> None:
    new = record()
    rep(new)["model"]["value"] = "kimi-k3"
    with pytest.raises(RecordError, match="baseline is a record of model 'k3-testbed'; this "
                                          "one serves 'kimi-k3'"):
        judged(record(), new)


def test_across_sessions_table() -> None:
    assert across_sessions("same", "same", ["a"], ["changed: a"], launch_known=True)[
        "C7"][0] == "pass"
    assert across_sessions("same", "same", ["a", "b"], ["x", "y"], launch_known=True)[
        "C7"][0] == "fail"
    out = across_sessions("unknown", "unknown", ["a"], ["x"], launch_known=True)
    assert out["C6"][0] is None and out["C7"][0] == "pass"
    assert across_sessions("different", "d", [], [], launch_known=True)["C7"][0] == "fail"
