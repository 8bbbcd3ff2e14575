"""Deployment presets (``--k3-preset``) and the pure helpers of the ready suites."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_k3accept.config.presets import PresetError, load_preset, shipped
from pytest_k3accept.suites import support

LOG_LINE = ("(APIServer pid=32384) INFO 11-30 00:19:05 [api_utils.py:286] non-default args: "
            "{'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', 'host': "
            "'127.0.0.1', 'port': 51585, 'model': '/models/tiny', 'max_model_len': 2048, "
            "'enforce_eager': True, 'served_model_name': ['k3-testbed'], "
            "'kv_cache_memory_bytes': 1073741824, 'api_key': ['s3cret']}")


def test_shipped_presets_hold_the_recipe_and_the_testbed() -> None:
    assert {"kimi-k3", "testbed"} <= set(shipped())
    k3 = load_preset("kimi-k3")  # the packaged recipe's default profile: b300/single_node_tp
    env, srv = k3.environment, k3.server
    assert (env.driver_min, env.cuda_major, env.gpus, env.interconnect) == ("580", 13, 8, None)
    assert (srv.enable_expert_parallel, srv.min_tensor_parallel_size,
            srv.min_data_parallel_size) == (False, 8, None)
    assert (srv.tool_call_parser, srv.reasoning_parser) == ("kimi_k3", "kimi_k3")
    assert srv.prefix_caching == "explicit" and srv.min_prefix_cache_hit_rate > 0
    assert srv.require_parsed_tool_call and srv.max_model_len == 1048576
    assert srv.all2all_backends == {"rdma": ("deepep_v2",),
                                    "nvlink": ("flashinfer_nvlink_one_sided",)}
    assert k3.targets.context_tokens > k3.targets.prefix_tokens > 0
    assert Path(k3.suites.agent_request_set or "").is_file()
    tb = load_preset("testbed")
    assert tb.environment.driver_min is None and tb.environment.gpus is None
    assert "no GPU" in tb.absent("host-driver expectation")
    assert tb.server.tool_call_parser == "hermes" and not tb.server.require_parsed_tool_call
    assert tb.suites.prefill_tokens and tb.suites.prefill_tokens < 2048
    json.dumps(tb.as_dict())  # plain data for evidence


def test_unknown_preset_name_suggests_the_shipped_one() -> None:
    with pytest.raises(PresetError) as exc:
        load_preset("kimi-k2")
    assert "did you mean 'kimi-k3'" in str(exc.value)
    assert "shipped presets: " in str(exc.value) and "testbed" in str(exc.value)
    with pytest.raises(PresetError, match="no such preset file"):
        load_preset("/nonexistent/team.toml")


@pytest.mark.parametrize("text, message", [
    ('[environment]\ngpus = "eight"\n', "environment.gpus: expected a whole number >= 1, "
                                        "got 'eight'"),
    ('[environment]\ndriver_min = "R5xx"\n', "environment.driver_min:"),
    ('[server]\nprefix_caching = "maybe"\n', "server.prefix_caching: expected one of "
                                             "'explicit', 'on', 'any'"),
    ('[server]\ntool_parser = "x"\n', "server.tool_parser: unknown field (did you mean "
                                      "'tool_call_parser'?)"),
    ('[targts]\nconcurrency = 2\n', "targts: unknown field or table (did you mean "
                                    "'targets'?)"),
    ('[targets]\ncontext_tokens = 100\nprefix_tokens = 100\n', "targets.prefix_tokens (100) "
                                                               "must be smaller"),
    ('[slo]\nttft_p99 = "fast"\n', "ttft_p99"),
    ('[server.all2all_backends]\ninfiniband = ["pplx"]\n', "infiniband: unknown interconnect"),
    ('[platform]\nprefill_fraction = 1.5\n', "platform.prefill_fraction: expected a number > 0 "
                                             "and <= 1, got 1.5"),
    ('name = "x"\n[poc\n', "invalid TOML"),
])
def test_bad_presets_name_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "team.toml"
    path.write_text(text)
    with pytest.raises(PresetError) as exc:
        load_preset(str(path))
    assert str(path) in str(exc.value)
    assert message in str(exc.value)


def test_team_preset_file_resolves_relative_request_set(tmp_path: Path) -> None:
    (tmp_path / "sets").mkdir()
    path = tmp_path / "team.json"
    path.write_text(json.dumps({"name": "team-llm", "agent": {"request_set": "sets/a.jsonl"},
                                "environment": {"driver_min": "550.54.15", "gpus": 4}}))
    preset = load_preset(path)
    assert preset.name == "team-llm" and preset.environment.gpus == 4
    assert preset.suites.agent_request_set == str(tmp_path / "sets" / "a.jsonl")
    assert preset.environment.cuda_major is None  # absent: not checked


def test_server_args_from_the_startup_line_keep_only_compared_keys() -> None:
    args = support.server_args("INFO other line\n" + LOG_LINE + "\nINFO later\n")
    assert args == {"tool_call_parser": "hermes", "enable_auto_tool_choice": True,
                    "max_model_len": 2048}
    assert "api_key" not in str(args)
    second = LOG_LINE.replace("'hermes'", "'kimi_k3'")
    assert (support.server_args(LOG_LINE + "\n" + second) or {})["tool_call_parser"] == "kimi_k3"
    odd = LOG_LINE.replace("'enforce_eager': True", "'compilation': <Mode.NONE: 0>")
    assert (support.server_args(odd) or {})["tool_call_parser"] == "hermes"  # fallback
    assert support.server_args("no such line") is None


def test_layout_and_all_to_all_against_the_preset() -> None:
    assert support.layout_problems({}, expert_parallel=True, min_dp=8, min_tp=None) == [
        "expert parallelism is off, the preset expects --enable-expert-parallel",
        "data-parallel size 1, the preset expects at least 8"]
    assert not support.layout_problems({"enable_expert_parallel": True,
                                        "data_parallel_size": 8}, expert_parallel=True,
                                       min_dp=8, min_tp=None)
    allowed = load_preset("kimi-k3").server.all2all_backends
    one_nvlink = {"a": {"nvlink": True, "rdma": False}}
    assert support.all2all_problem("flashinfer_nvlink_one_sided", one_nvlink, allowed)[0] is True
    assert support.all2all_problem("deepep_low_latency", one_nvlink, allowed)[0] is False
    two = {"a": {"nvlink": True, "rdma": True}, "b": {"nvlink": True, "rdma": True}}
    ok, words = support.all2all_problem("allgather_reducescatter", two, allowed)
    assert ok is False and "over rdma: does not fit" in words
    assert support.all2all_problem("pplx", {"a": {"nvlink": None}}, allowed)[0] is None
    assert support.all2all_problem("pplx", {"a": {"nvlink": True}, "b": {"rdma": False}},
                                   allowed)[0] is False


def test_tool_calls_prefill_size_and_verdicts() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "required": ["city"]}}}]
    good = [{"function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert support.tool_call_problems(good, tools) == []
    bad = [{"function": {"name": "get_time", "arguments": "{}"}},
           {"function": {"name": "get_weather", "arguments": "{city"}},
           {"function": {"name": "get_weather", "arguments": "{}"}}]
    problems = support.tool_call_problems(bad, tools)
    assert len(problems) == 3 and "not among the defined tools" in problems[0]
    assert "not JSON" in problems[1] and "missing: city" in problems[2]
    assert support.near_target(1900, 2048, 8, 0.9) == (1900, None)
    tokens, why = support.near_target(131072, 32768, 8, 0.9)
    assert tokens == 32768 - 24 and why and "max_model_len 32768" in why
    keep = SimpleNamespace(name="keep", headline="", reasons=[], advice=[])
    scale = SimpleNamespace(name="scale", headline="no headroom", reasons=["r1"],
                            advice=["scale out"])
    assert support.verdict_problem(keep) is None
    assert support.verdict_problem(scale) == ("verdict scale: no headroom\nbecause: r1\n"
                                              "advice: scale out")


def test_non_utf8_preset_is_a_preset_error(tmp_path: Path) -> None:
    f = tmp_path / "latin1.toml"
    f.write_bytes(b'[environment]\nimage = "caf\xe9"\n')
    with pytest.raises(PresetError, match=r"cannot read the preset: not UTF-8 text"):
        load_preset(f)


def test_the_testbed_preset_sizes_its_kv_cache_for_its_own_target() -> None:
    """The testbed's tiny model keeps ~1,042 bytes of KV a token (3,000,000 bytes held 2,816
    tokens, 6,000,000 held 5,760: docs/load.md); the preset's target load must use a real
    share of the cache it launches with, and one max_model_len request must fit."""
    p = load_preset("testbed")
    size = p.server.kv_cache_bytes
    assert size is not None
    tokens = size / 1042
    t = p.targets
    share = t.concurrency * (t.context_tokens + t.output_tokens) / tokens
    assert 0.2 <= share <= 0.6, share
    assert p.server.max_model_len is not None and p.server.max_model_len < tokens / 2
    assert load_preset("kimi-k3").server.kv_cache_bytes is None  # a deployment sizes its own


def test_a_bad_kv_cache_size_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text('name = "x"\n[server]\nkv_cache_bytes = 0\n')
    with pytest.raises(PresetError, match="kv_cache_bytes"):
        load_preset(str(bad))
