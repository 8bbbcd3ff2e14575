"""The recipe's arguments and environment against the live server (issue 19): real recipe
files, real ``non-default args`` lines of vLLM 0.32 (CPU build, this machine), real launch
commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_k3accept.checks.recipe_args import (COMMAND, LOG, VLLM_DEFAULTS, check_args,
                                                check_env, summary)
from pytest_k3accept.config.recipe import load_recipe, select
from pytest_k3accept.output.reproduction import split_command
from pytest_k3accept.suites.support import command_args, server_args

RECIPES = Path(__file__).resolve().parents[1] / "data" / "recipes"
#: a real line: the testbed started with the H200 single_node_tp arguments the CPU build
#: accepts (max-num-seqs changed to 16; the tiny model's 8192 positions allow 8192)
LINE = ("(APIServer pid=4413) INFO 12-01 14:19:45 [api_utils.py:286] non-default args: "
        "{'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', 'host': '127.0.0.1', "
        "'port': 18123, 'model': '/root/.cache/pytest-k3accept/models/tiny-a708a11b1e54', "
        "'trust_remote_code': True, 'max_model_len': 8192, 'enforce_eager': True, "
        "'served_model_name': ['k3-testbed'], 'reasoning_parser': 'kimi_k3', "
        "'disable_custom_all_reduce': True, 'gpu_memory_utilization': 0.97, "
        "'kv_cache_memory_bytes': 1073741824, 'max_num_batched_tokens': 4096, "
        "'max_num_seqs': 16, 'enable_flashinfer_autotune': False, 'moe_backend': 'marlin'}")


def _profile():
    return select(load_recipe(RECIPES / "Kimi-K3.2026-08-15.yaml"), "h200", "single_node_tp")


def _by_key(checks):
    return {c.name: c for c in checks}


def test_a_real_server_line_against_the_h200_profile() -> None:
    p = _profile()
    args = dict(p.args)
    live = server_args([LINE], keys=tuple(args))
    assert live is not None and "api_key" not in live and "host" not in live
    checks = _by_key(check_args(args, live, source=LOG, where="Kimi-K3.yaml (2026-08-15, "
                                                                "h200/single_node_tp)"))
    ok = {k for k, c in checks.items() if c.ok}
    assert {"trust_remote_code", "max_num_batched_tokens", "disable_custom_all_reduce",
            "moe_backend", "gpu_memory_utilization", "reasoning_parser"} <= ok
    assert checks["enable_flashinfer_autotune"].ok is True  # --no-... as the recipe says
    seqs = checks["max_num_seqs"]
    assert seqs.ok is False and "16" in seqs.message and "'5'" in seqs.message
    assert "Kimi-K3.yaml (2026-08-15" in seqs.message
    tp = checks["tensor_parallel_size"]  # absent from the line: vLLM's default 1
    assert tp.ok is False and "vLLM's default" in tp.message and "'8'" in tp.message
    assert checks["tool_call_parser"].ok is False  # hermes vs kimi_k3
    assert checks["attention_backend"].ok is False  # default (None) vs FLASHMLA


def test_an_argument_whose_default_is_unknown_is_unknown_not_a_pass() -> None:
    checks = check_args({"speculative_config": '{"method": "mtp"}'}, {}, source=LOG,
                        where="r")
    assert [c.ok for c in checks] == [None]
    assert "speculative_config" not in VLLM_DEFAULTS
    failed, unknown = summary(checks)
    assert failed == [] and len(unknown) == 1


def test_no_server_arguments_means_every_check_is_unknown() -> None:
    checks = check_args(dict(_profile().args), None, source=LOG, where="r")
    assert checks and all(c.ok is None for c in checks)


def test_values_compare_across_their_spellings() -> None:
    live = {"max_num_seqs": 8, "gpu_memory_utilization": 0.9, "enable_prefix_caching": True,
            "kv_cache_dtype": "fp8", "compilation_config": {"level": 3}}
    want = {"max_num_seqs": "8", "gpu_memory_utilization": "0.90",
            "enable_prefix_caching": True, "kv_cache_dtype": "fp8",
            "compilation_config": '{"level": 3}'}
    assert all(c.ok for c in check_args(want, live, source=LOG, where="r"))


def test_a_launch_command_gives_arguments_and_environment() -> None:
    p = _profile()
    words = split_command(
        "env -u PYTHONPATH VLLM_ENGINE_READY_TIMEOUT_S=3600 VLLM_USE_RUST_FRONTEND=1 vllm serve "
        "moonshotai/Kimi-K3 --tensor-parallel-size 8 --max-num-seqs=5 "
        "--no-enable-flashinfer-autotune --trust-remote-code --api-key s3cret")
    args, env = command_args(words, tuple(dict(p.args)))
    assert args["tensor_parallel_size"] == "8" and args["max_num_seqs"] == "5"
    assert args["enable_flashinfer_autotune"] is False and args["trust_remote_code"] is True
    assert "api_key" not in args
    checks = _by_key(check_args(dict(p.args), args, source=COMMAND, where="r"))
    assert checks["tensor_parallel_size"].ok and checks["max_num_seqs"].ok
    envs = _by_key(check_env(dict(p.env), env, where="r"))
    assert envs["VLLM_ENGINE_READY_TIMEOUT_S"].ok is True
    assert envs["VLLM_USE_V2_MODEL_RUNNER"].ok is False
    assert "not set on the launch command" in envs["VLLM_USE_V2_MODEL_RUNNER"].message
    assert all(c.ok is None for c in check_env(dict(p.env), None, where="r"))


@pytest.mark.parametrize("recipe, hardware, strategy", [
    ("Kimi-K3.2026-07-29.yaml", None, None),
    ("Kimi-K2.6.2026-07-29.yaml", "h200", None),
    ("Kimi-Linear-48B-A3B-Instruct.2026-04-17.yaml", "mi355x", None),
])
def test_other_recipes_check_the_same_way(recipe: str, hardware: str | None,
                                          strategy: str | None) -> None:
    p = select(load_recipe(RECIPES / recipe), hardware, strategy)
    args = dict(p.args)
    assert args
    own = {k: (v if isinstance(v, bool) else str(v)) for k, v in args.items()}
    assert all(c.ok for c in check_args(args, own, source=COMMAND, where=recipe))


# -- tool calls as the recipe advises: parsed and schema-valid over N attempts -------------

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "unit": {"enum": ["c", "f"]}},
        "required": ["city"], "additionalProperties": False}}}]


def _call(arguments: str, name: str = "get_weather") -> list[dict]:
    return [{"id": "call_1", "type": "function",
             "function": {"name": name, "arguments": arguments}}]


def test_a_call_is_checked_against_the_tools_json_schema() -> None:
    from pytest_k3accept.suites.support import tool_call_problems

    assert tool_call_problems(_call('{"city": "Paris"}'), WEATHER) == []
    [wrong] = tool_call_problems(_call('{"city": 75}'), WEATHER)
    assert "JSON schema" in wrong and "city" in wrong and "string" in wrong
    [enum] = tool_call_problems(_call('{"city": "Paris", "unit": "kelvin"}'), WEATHER)
    assert "unit" in enum
    [extra] = tool_call_problems(_call('{"city": "Paris", "when": "now"}'), WEATHER)
    assert "when" in extra


def test_the_rate_over_attempts_decides_against_the_minimum() -> None:
    from pytest_k3accept.suites.support import tool_call_rate

    # K3's occasional unexpected format: one attempt unparsed, one with broken arguments
    attempts = [_call('{"city": "Paris"}'), [], _call('{"city": "Paris"}'),
                _call('<|tool_call_begin|>get_weather'), _call('{"city": "Oslo"}')]
    judged = tool_call_rate(attempts, WEATHER, minimum=0.8)
    assert (judged.attempts, judged.parsed, judged.valid) == (5, 4, 3)
    assert judged.rate == pytest.approx(0.6) and not judged.ok
    assert "3 of 5 attempts" in judged.line() and "80%" in judged.line()
    assert any("attempt 2: no parsed tool call" == p for p in judged.problems)
    assert tool_call_rate(attempts, WEATHER, minimum=0.6).ok
    assert not tool_call_rate([], WEATHER, minimum=0.0).ok  # nothing tried is not a pass


def test_the_kimi_k3_preset_asks_for_several_attempts() -> None:
    from pytest_k3accept.config.presets import load_preset

    sp = load_preset("kimi-k3").suites
    assert sp.poc_tool_call_attempts >= 3 and 0 < sp.poc_min_tool_call_rate < 1


def test_the_record_keeps_the_recipes_identity() -> None:
    from pytest_k3accept.config.settings import Settings
    from pytest_k3accept.evidence.store import RunState
    from pytest_k3accept.output import record
    from pytest_k3accept.output.redact import Redactor

    state = RunState()
    rec = record.finish(record.build(state, Settings(), environ={}), Redactor())
    assert rec["reproduction"]["recipe"]["value"] is None
    assert "no --k3-recipe" in rec["reproduction"]["recipe"]["reason"]
    p = _profile()
    state.add("recipe", f"recipe {p.recipe.where()}", p.as_dict())
    rec = record.finish(record.build(state, Settings(), environ={}), Redactor())
    value = rec["reproduction"]["recipe"]["value"]
    assert value["date_updated"] == "2026-08-15" and value["sha256"].startswith("5c0f86de")
    assert (value["hardware"], value["strategy"]) == ("h200", "single_node_tp")
    assert record.validate(rec) == []


def test_a_changed_recipe_is_a_changed_variable_against_a_baseline() -> None:
    """Recipe drift (issue 19 item 3): the same session judged against another version of
    the recipe is one changed variable, named with both dates."""
    import json

    from pytest_k3accept.compare.diff import conditions
    from pytest_k3accept.compare.read import from_data

    data = json.loads((Path(__file__).resolve().parents[1] / "data" / "records"
                       / "record-1.1-load.json").read_text())
    old = from_data(json.loads(json.dumps(data)))
    assert old.data["reproduction"]["recipe"]["value"] is None  # migrated from 1.1
    a, b = (json.loads(json.dumps(data)) for _ in range(2))
    for rec, date in ((a, "2026-07-29"), (b, "2026-08-15")):
        rec["reproduction"]["recipe"] = {"value": {"file": "Kimi-K3.yaml",
                                                   "date_updated": date, "hardware": "h200",
                                                   "strategy": "single_node_tp"},
                                         "source": "--k3-recipe (evidence recipe)"}
    changed = conditions(from_data(a), from_data(b))
    assert changed.variables == ["recipe"]
    [line] = changed.changed_lines()
    assert "official recipe" in line and "2026-07-29" in line and "2026-08-15" in line
