"""The official vLLM recipe (``--k3-recipe``): real recipe files of vllm-project/recipes read
into profiles per hardware and strategy, and the preset derived from one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_k3accept.config.presets import load_preset, preset_from_recipe, read_preset
from pytest_k3accept.config.recipe import RecipeError, load_recipe, select

DATA = Path(__file__).resolve().parents[1] / "data" / "recipes"
K3_NEW = DATA / "Kimi-K3.2026-08-15.yaml"   # commit 6f19519, date_updated 2026-08-15
K3_OLD = DATA / "Kimi-K3.2026-07-29.yaml"   # commit 9db1430, date_updated 2026-07-29
K26 = DATA / "Kimi-K2.6.2026-07-29.yaml"
RECIPES = [K3_NEW, K3_OLD, K26]


def _combinations(path: Path) -> list[tuple[Path, str, str]]:
    recipe = load_recipe(path)
    return [(path, hw, st) for hw in recipe.hardware for st in recipe.strategies]


@pytest.mark.parametrize("path, hw, st", [c for p in RECIPES for c in _combinations(p)],
                         ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_every_listed_combination_selects_or_says_why_not(path: Path, hw: str,
                                                          st: str) -> None:
    recipe = load_recipe(path)
    if not recipe.supported(hw, st):
        with pytest.raises(RecipeError, match=f"not supported on {hw}") as exc:
            select(recipe, hw, st)
        assert str(path) in str(exc.value)
        return
    try:
        profile = select(recipe, hw, st)
    except RecipeError as exc:  # a single-node layout over the GPUs of one node
        assert "more than one" in str(exc) and str(path) in str(exc)
        return
    assert (profile.hardware, profile.strategy) == (hw, st)
    assert profile.tool_call_parser and profile.reasoning_parser
    assert profile.image and profile.image.startswith("vllm/")
    json.dumps(profile.as_dict())
    json.dumps(preset_from_recipe(read_preset("kimi-k3"), profile).as_dict())


def test_defaults_are_the_recipes_own() -> None:
    new = load_recipe(K3_NEW)
    assert (new.default_hardware, new.default_strategy, new.date_updated) == (
        "b300", "single_node_tp", "2026-08-15")
    assert new.model_id == "moonshotai/Kimi-K3" and len(new.sha256) == 64
    assert new.unknown_keys == ()
    default = select(new)
    assert default.label() == "b300/single_node_tp"
    assert default.max_model_len == 1048576 and default.prefix_caching is True
    assert default.arg("--kv-cache-dtype") == "fp8" and default.tensor_parallel_size == 8
    assert default.engine_ready_timeout == 3600.0
    assert default.env["VLLM_USE_RUST_FRONTEND"] == "1"


def test_h200_single_node_tp_as_the_recipe_says() -> None:
    for path in (K3_NEW, K3_OLD):
        p = select(load_recipe(path), "h200", "single_node_tp")
        assert (p.image, p.cuda_major, p.driver_min) == ("vllm/vllm-openai:kimi-k3", 13, "580")
        assert (p.min_gpus, p.nodes, p.tensor_parallel_size, p.expert_parallel) == (8, 1, 8,
                                                                                   False)
        assert p.max_model_len == 32768 and p.prefix_caching is None
        assert (p.arg("--moe-backend"), p.arg("--max-num-seqs")) == ("marlin", "5")
        assert p.env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600" and p.engine_ready_timeout == 3600
        assert dict(p.all2all) == {"rdma": "deepep_v2", "nvlink": "flashinfer_nvlink_one_sided"}
        assert any("schema validation and retry" in n for n in p.notes)
    # the image: a structured docker_image in July, only the guide's words in August
    assert select(load_recipe(K3_OLD), "h200").image_source == "model.docker_image"
    assert select(load_recipe(K3_NEW), "h200").image_source == "guide"


def test_strategies_layouts_and_floors() -> None:
    recipe = load_recipe(K3_NEW)
    dep = select(recipe, "b300", "multi_node_dep")
    assert (dep.min_gpus, dep.nodes, dep.expert_parallel, dep.data_parallel_size) == (
        16, 2, True, 16)
    tep = select(recipe, "b300", "multi_node_tep")
    assert (tep.min_gpus, tep.expert_parallel, tep.tensor_parallel_size) == (8, True, 8)
    tp_dp = select(recipe, "h200", "multi_node_tp_dp")  # granted by strategy_hardware
    assert (tp_dp.nodes, tp_dp.tensor_parallel_size, tp_dp.data_parallel_size) == (2, 8, 2)
    mega = select(recipe, "gb300", "multi_node_dep")
    assert mega.arg("--moe-backend") == "deep_gemm_mega_moe" and mega.nodes == 4
    pd = select(recipe, "b300", "pd_cluster")
    roles = {r.name: r for r in pd.roles}
    assert (roles["prefill"].parallelism, roles["prefill"].tensor_parallel_size) == ("tep", 8)
    assert roles["decode"].parallelism == "dep" and roles["decode"].prefix_caching is False
    assert pd.prefix_caching is None  # the pools differ
    amd = select(recipe, "mi355x")
    assert amd.image == "vllm/vllm-openai-rocm:kimi-k3" and amd.driver_min is None
    assert amd.cuda_major is None and amd.env["VLLM_ROCM_USE_AITER"] == "1"


def test_another_models_recipe_states_less() -> None:
    recipe = load_recipe(K26)
    with pytest.raises(RecipeError, match="names no default_hardware; choose one with "
                                          "--k3-hardware: h200, b300"):
        select(recipe)
    p = select(recipe, "h200")
    assert p.strategy == "single_node_tp"  # the recipes site's rule without default_strategy
    assert (p.tool_call_parser, p.image) == ("kimi_k2", "vllm/vllm-openai:latest")
    assert (p.driver_min, p.cuda_major, p.min_gpus, p.max_model_len, p.engine_ready_timeout,
            p.prefix_caching) == (None, None, None, None, None, None)
    preset = preset_from_recipe(read_preset("kimi-k3"), p)
    assert preset.environment.driver_min is None and preset.environment.gpus is None
    assert "states no host driver floor, CUDA runtime, minimum GPU count" in (
        preset.absent("host-driver expectation"))


@pytest.mark.parametrize("hw, st, message", [
    ("a100", None, "--k3-hardware 'a100': the recipe has no such hardware; it has: h200, "
                   "b200, b300, gb200, gb300, mi355x"),
    ("h200", "single_node_ep", "--k3-strategy 'single_node_ep': the recipe has no such "
                               "strategy; it has: single_node_tp, multi_node_tp"),
    ("h200", "multi_node_dep", "--k3-strategy 'multi_node_dep' is not supported on h200 "
                               "(strategy_hardware); on h200 the recipe offers: single_node_tp"),
    ("gb200", "single_node_tp", "needs 8 GPUs, more than one gb200 node has (4)"),
])
def test_unknown_names_list_the_valid_ones(hw: str, st: str | None, message: str) -> None:
    with pytest.raises(RecipeError) as exc:
        select(load_recipe(K3_NEW), hw, st)
    assert str(K3_NEW) in str(exc.value) and "date_updated 2026-08-15" in str(exc.value)
    assert message in str(exc.value)


@pytest.mark.parametrize("text, message", [
    ("meta:\n  title: [unclosed\n", "not valid YAML (line"),
    ("- just\n- a list\n", "not a vLLM recipe"),
    ("meta: {title: x}\nmodel: {}\nhardware_overrides: [1]\n", "hardware_overrides: expected "
                                                               "a mapping"),
])
def test_bad_files_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "Bad.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError) as exc:
        load_recipe(path)
    assert str(path) in str(exc.value) and message in str(exc.value)
    with pytest.raises(RecipeError, match="cannot read the recipe"):
        load_recipe(tmp_path / "missing.yaml")


def test_newer_keys_are_reported_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "Newer.yaml"
    path.write_text(K3_NEW.read_text() + "\nfuture_table:\n  x: 1\n")
    recipe = load_recipe(path)
    assert recipe.unknown_keys == ("future_table",)
    assert select(recipe, "h200").max_model_len == 32768


def test_preset_from_the_h200_profile_accepts_the_recipe_default() -> None:
    base = read_preset("kimi-k3")
    profile = select(load_recipe(K3_NEW), "h200", "single_node_tp")
    preset = preset_from_recipe(base, profile)
    env, srv = preset.environment, preset.server
    assert (env.driver_min, env.cuda_major, env.gpus, env.nodes) == ("580", 13, 8, None)
    assert env.interconnect is None  # the recipe names no interconnect for a profile
    assert srv.max_model_len == 32768 and srv.prefix_caching == "any"
    assert (srv.enable_expert_parallel, srv.min_tensor_parallel_size,
            srv.min_data_parallel_size) == (False, 8, None)
    assert srv.all2all_backends == {"rdma": ("deepep_v2",),
                                    "nvlink": ("flashinfer_nvlink_one_sided",)}
    assert (srv.tool_call_parser, srv.reasoning_parser) == ("kimi_k3", "kimi_k3")
    # what a recipe never says stays the base preset's
    assert srv.min_prefix_cache_hit_rate == base.server.min_prefix_cache_hit_rate
    assert preset.slo == base.slo and preset.suites.restart_timeout == 3600
    # the target context fits the recipe's 32K window
    assert preset.targets.context_tokens + preset.targets.output_tokens <= 32768
    assert preset.targets.prefix_tokens < preset.targets.context_tokens
    assert "capped" in preset.description and preset.source == str(K3_NEW)
    # the shipped preset's own file writes none of the deployment expectations
    assert (base.server.max_model_len, base.server.min_data_parallel_size,
            base.server.enable_expert_parallel, base.server.tool_call_parser) == (None,) * 4
    assert base.environment == type(base.environment)()


def test_preset_from_a_blackwell_dep_profile() -> None:
    preset = preset_from_recipe(read_preset("kimi-k3"),
                                select(load_recipe(K3_NEW), "b300", "multi_node_dep"))
    srv = preset.server
    assert srv.prefix_caching == "explicit" and srv.max_model_len == 1048576
    assert (srv.enable_expert_parallel, srv.min_data_parallel_size) == (True, 16)
    assert (preset.environment.gpus, preset.environment.nodes) == (16, 2)
    assert preset.targets == read_preset("kimi-k3").targets


# -- the shipped kimi-k3 preset: derived from the recipe copy kept in the package ----------


def test_the_shipped_preset_is_derived_from_the_packaged_recipe() -> None:
    """``kimi-k3`` = its own file (what a recipe never says) + the profile of the recipe copy
    in the package, the newest of the test copies, byte for byte."""
    from pytest_k3accept.config.presets import load_with_recipe
    from pytest_k3accept.config.recipe import PACKAGED

    raw = read_preset("kimi-k3")
    assert raw.recipe is not None and raw.recipe.file == str(PACKAGED / "Kimi-K3.yaml")
    assert (raw.recipe.hardware, raw.recipe.strategy) == (None, None)  # the recipe's defaults
    newest = max(DATA.glob("Kimi-K3.*.yaml"), key=lambda p: load_recipe(p).date_updated or "")
    assert (PACKAGED / "Kimi-K3.yaml").read_bytes() == newest.read_bytes() == K3_NEW.read_bytes()
    preset, profile = load_with_recipe("kimi-k3")
    assert profile is not None and profile.recipe.packaged
    ident = profile.recipe.identity()
    assert (ident["date_updated"], ident["sha256"][:8], profile.label()) == (
        "2026-08-15", "5c0f86de", "b300/single_node_tp")
    assert preset.server == preset_from_recipe(raw, select(load_recipe(K3_NEW))).server
    assert preset.environment == preset_from_recipe(raw, select(load_recipe(K3_NEW))).environment
    assert load_preset("kimi-k3") == preset
    # the recipe's default hardware (b300): 1M context, fp8 KV, explicit prefix caching
    srv = preset.server
    assert (srv.max_model_len, srv.kv_cache_dtype, srv.prefix_caching) == (1048576, "fp8",
                                                                           "explicit")
    # --k3-hardware / --k3-strategy choose another profile of the same packaged recipe
    h200, p = load_with_recipe("kimi-k3", hardware="h200")
    assert p is not None and p.label() == "h200/single_node_tp" and p.recipe.packaged
    assert (h200.server.max_model_len, h200.server.prefix_caching,
            h200.server.kv_cache_dtype) == (32768, "any", None)
    # another recipe file replaces the packaged one (the preset's own [recipe] names are
    # not carried over to it)
    old, p = load_with_recipe("kimi-k3", recipe=K3_OLD, hardware="h200")
    assert p is not None and p.recipe.date_updated == "2026-07-29" and not p.recipe.packaged
    # the testbed presets name no recipe: nothing derived, and no profile to choose from
    assert load_with_recipe("testbed")[1] is None and read_preset("testbed").recipe is None
    with pytest.raises(Exception, match="no recipe was given: pass --k3-recipe FILE"):
        load_with_recipe("testbed", hardware="h200")


def _h200_node(**changes: object):
    from pytest_k3accept.observe.host.facts import GpuFacts, HostFacts, NodeFacts

    node = NodeFacts(node="gpu-1", source="k3accept collect", gpu_available=True,
                     driver_version="580.65.06", cuda_driver_version="13.0",
                     gpus=tuple(GpuFacts(i, "NVIDIA H200", nvlink_active=18) for i in range(8)),
                     image="vllm/vllm-openai:kimi-k3", cuda_runtime="13.0.1",
                     rdma_devices=())
    return HostFacts.merge([dataclasses_replace(node, **changes)])


def dataclasses_replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


#: the recipe's H200 single_node_tp command, as a team runs it
H200_COMMAND = (
    "env VLLM_ENGINE_READY_TIMEOUT_S=3600 VLLM_USE_V2_MODEL_RUNNER=1 VLLM_USE_RUST_FRONTEND=1 "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True vllm serve moonshotai/Kimi-K3 "
    "--trust-remote-code --gpu-memory-utilization 0.97 --tensor-parallel-size 8 "
    "--max-num-seqs 5 --max-model-len 32768 --moe-backend marlin --disable-custom-all-reduce "
    "--no-enable-flashinfer-autotune --max-num-batched-tokens 4096 --attention-backend FLASHMLA "
    "--enable-auto-tool-choice --tool-call-parser kimi_k3 --reasoning-parser kimi_k3")


def test_the_recipes_h200_default_passes_the_shipped_presets_checks() -> None:
    """A team that deploys exactly the recipe's H200 default (TP 8, 32K context, no expert
    parallelism, driver 580.65.06, the CUDA 13 image) passes the kimi-k3 preset's environment
    and server expectations (--k3-hardware h200); one argument changed fails naming the recipe
    value, the live value, the recipe file and its date."""
    from pytest_k3accept.checks.environment import check_cuda, check_driver, check_topology
    from pytest_k3accept.checks.recipe_args import COMMAND, check_profile, profile_keys, summary
    from pytest_k3accept.config.presets import load_with_recipe
    from pytest_k3accept.output.reproduction import split_command
    from pytest_k3accept.suites.support import command_args, layout_problems

    preset, profile = load_with_recipe("kimi-k3", hardware="h200")
    assert profile is not None
    env, srv = preset.environment, preset.server
    facts = _h200_node()
    assert env.driver_min and env.cuda_major and env.gpus
    for check in (check_driver(facts, env.driver_min),
                  check_cuda(facts, env.cuda_major, env.cuda_minor),
                  check_topology(facts, env.gpus, env.interconnect, env.nodes)):
        assert check.ok is True, check.message()
    args, live_env = command_args(split_command(H200_COMMAND), profile_keys(profile))
    assert layout_problems(args, expert_parallel=srv.enable_expert_parallel,
                           min_dp=srv.min_data_parallel_size,
                           min_tp=srv.min_tensor_parallel_size) == []
    assert int(args["max_model_len"]) == srv.max_model_len == 32768
    assert args["tool_call_parser"] == srv.tool_call_parser == "kimi_k3"
    assert srv.prefix_caching == "any"  # the H200 profile passes no --enable-prefix-caching
    where = f"{profile.recipe.path} (2026-08-15, {profile.label()})"
    checks = check_profile(profile, args, live_env, source=COMMAND, where=where)
    assert summary(checks) == ([], []), summary(checks)
    # one argument changed: named with both values, the recipe file and its date
    changed, _ = command_args(split_command(H200_COMMAND.replace("--max-num-seqs 5",
                                                                 "--max-num-seqs 8")),
                              profile_keys(profile))
    [failed], unknown = summary(check_profile(profile, changed, live_env, source=COMMAND,
                                              where=where))
    assert unknown == []
    assert "--max-num-seqs: the server runs '8'" in failed and "says '5'" in failed
    assert "Kimi-K3.yaml (2026-08-15, h200/single_node_tp)" in failed
    # an old host driver is still an environment failure on the same preset
    assert check_driver(_h200_node(driver_version="575.57.08"), env.driver_min).ok is False
    # and the hand-written expectations of before (EP, DP >= 8) would have failed it
    assert layout_problems(args, expert_parallel=True, min_dp=8, min_tp=None)


# -- pd_cluster: each pool judged as the pool it is ----------------------------------------

#: the real repr vLLM 0.32 logs for --kv-transfer-config (seen here: EngineArgs parsing
#: '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' on the CPU build)
KV_PRODUCER = ("KVTransferConfig(kv_connector='NixlConnector', engine_id='3a313a79-5113-41a8-"
               "9ef8-bea362b01e38', kv_buffer_device='cpu', kv_role='kv_producer', "
               "kv_port=14579, kv_connector_extra_config={}, kv_connector_module_path=None, "
               "enable_permute_local_kv=False, kv_load_failure_policy='fail')")


def _pd_line(**args: object) -> str:
    body = ", ".join(f"'{k}': {v!r}" for k, v in args.items())
    return ("(APIServer pid=7) INFO 12-01 10:00:00 [api_utils.py:286] non-default args: "
            "{'model': 'moonshotai/Kimi-K3', " + body + "}")


def _decode_args(**changes: object) -> dict[str, object]:
    args: dict[str, object] = {
        "trust_remote_code": True, "gpu_memory_utilization": 0.95,
        "enable_expert_parallel": True, "data_parallel_size": 16,
        "data_parallel_hybrid_lb": True, "enable_prefix_caching": False, "max_num_seqs": 8,
        "max_num_batched_tokens": 32, "disable_hybrid_kv_cache_manager": False,
        "enable_auto_tool_choice": True, "tool_call_parser": "kimi_k3",
        "reasoning_parser": "kimi_k3"}
    args.update(changes)
    return args


def _judge(profile, line: str, kv: str | None = None):
    from pytest_k3accept.checks.recipe_args import (LOG, check_profile, profile_keys,
                                                    summary)
    from pytest_k3accept.suites.support import server_args

    live = server_args([line], keys=profile_keys(profile))
    checks = check_profile(profile, live, None, source=LOG, where="Kimi-K3.yaml (2026-08-15, "
                           f"{profile.label()})", kv_transfer=kv)
    return {c.name: c for c in checks}, summary(checks)


def test_a_pd_decode_pool_is_judged_as_dep_with_prefix_caching_off() -> None:
    from pytest_k3accept.checks.recipe_args import pool_of

    pd = select(load_recipe(K3_NEW), "b300", "pd_cluster")
    consumer = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
    assert pool_of(consumer) == ("decode", "kv_role 'kv_consumer' of its --kv-transfer-config")
    assert pool_of(KV_PRODUCER)[0] == "prefill" and pool_of({"kv_role": "kv_consumer"})[0] == (
        "decode")
    line = _pd_line(**_decode_args())
    checks, (failed, unknown) = _judge(pd, line, kv=consumer)
    assert failed == [] and checks["data_parallel_size"].ok is True
    assert checks["enable_prefix_caching"].ok is True  # --no-enable-prefix-caching
    assert checks["enable_expert_parallel"].ok and checks["tensor_parallel_size"].ok
    # the decode pool with prefix caching on, and with a DP below the DEP floor
    checks, (failed, _) = _judge(pd, _pd_line(**_decode_args(enable_prefix_caching=True,
                                                             data_parallel_size=8)),
                                 kv=consumer)
    assert checks["enable_prefix_caching"].ok is False
    assert any("--no-enable-prefix-caching: the server runs on" in f and "decode pool" in f
               for f in failed), failed
    assert any("--data-parallel-size: the server runs 8" in f and "at least 16" in f
               for f in failed), failed


def test_a_pd_prefill_pool_is_judged_as_tep() -> None:
    pd = select(load_recipe(K3_NEW), "b300", "pd_cluster")
    prefill = {"trust_remote_code": True, "gpu_memory_utilization": 0.95,
               "enable_expert_parallel": True, "tensor_parallel_size": 8,
               "max_num_batched_tokens": 16384, "disable_hybrid_kv_cache_manager": False,
               "enable_flashinfer_autotune": False, "enable_auto_tool_choice": True,
               "tool_call_parser": "kimi_k3", "reasoning_parser": "kimi_k3"}
    line = _pd_line(**prefill)[:-1] + f", 'kv_transfer_config': {KV_PRODUCER}}}"
    checks, (failed, unknown) = _judge(pd, line, kv=line)
    assert failed == [] and "data_parallel_size" not in checks
    # the variables: only a launch command shows them
    assert [c.name for c in checks.values() if c.ok is None] == [
        "VLLM_SSM_CONV_STATE_LAYOUT", "VLLM_KIMI_K3_SHARD_SP_SHARED_EXPERT", "UCX_TLS"]
    # the same server judged as the decode pool (chosen explicitly) fails its layout
    decode = select(load_recipe(K3_NEW), "b300", "pd_cluster:decode")
    assert decode.label() == "b300/pd_cluster:decode"
    checks, (failed, _) = _judge(decode, line, kv=line)
    assert checks["tensor_parallel_size"].ok is False and checks["data_parallel_size"].ok is False
    assert any("--k3-strategy pd_cluster:decode" in f for f in failed)


def test_an_unidentified_pool_is_unknown_never_a_pass() -> None:
    """kv_both (NixlConnector on both pools) or no KV transfer config: the arguments both
    pools share are compared, the pool's own are one unknown check saying how to choose."""
    pd = select(load_recipe(K3_NEW), "b300", "pd_cluster")
    both = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    for kv in (both, None):
        checks, (failed, unknown) = _judge(pd, _pd_line(**_decode_args()), kv=kv)
        pool = checks["pd_cluster_pool"]
        assert pool.ok is None and failed == [] and pool.message in unknown
        assert "not checked" in pool.message
        assert "--k3-strategy pd_cluster:prefill or pd_cluster:decode" in pool.message
        assert ("kv_both" in pool.message) == (kv is not None)
        # only what both pools share: no pool layout, no prefix caching, no DP floor
        assert "enable_prefix_caching" not in checks and "tensor_parallel_size" not in checks
        assert "data_parallel_size" not in checks and checks["trust_remote_code"].ok
    # the preset of a chosen pool carries that pool's layout for the structural check
    preset = preset_from_recipe(read_preset("kimi-k3"),
                                select(load_recipe(K3_NEW), "b300", "pd_cluster:decode"))
    srv = preset.server
    assert (srv.enable_expert_parallel, srv.min_tensor_parallel_size,
            srv.min_data_parallel_size) == (True, 1, 16)
    whole = preset_from_recipe(read_preset("kimi-k3"), pd)
    assert whole.server.enable_expert_parallel is None  # one server is one pool: not both
    assert "judged for the pool the server is" in whole.description


def test_a_pool_name_the_profile_lacks_lists_the_ones_it_has() -> None:
    with pytest.raises(RecipeError, match="no pool 'router'; it has: pd_cluster:prefill, "
                                          "pd_cluster:decode"):
        select(load_recipe(K3_NEW), "b300", "pd_cluster:router")
    with pytest.raises(RecipeError, match="single_node_tp has no pools"):
        select(load_recipe(K3_NEW), "h200", "single_node_tp:decode")


# -- bad input -----------------------------------------------------------------------------


def test_a_bad_packaged_or_preset_recipe_names_the_preset(tmp_path: Path) -> None:
    """A preset whose [recipe] is malformed, of no such file, or names hardware the recipe
    lacks: the message names the preset and the recipe, and lists what the recipe has."""
    from pytest_k3accept.config.presets import PresetError

    bad = tmp_path / "Bad.yaml"
    bad.write_text("meta:\n  title: [unclosed\n")
    for recipe, words in ((bad.name, "not valid YAML (line"),
                          ("missing.yaml", "cannot read the recipe"),
                          (str(K3_NEW) + '"\nhardware = "a100', "it has: h200, b200, b300")):
        team = tmp_path / "team.toml"
        team.write_text(f'name = "team"\n[recipe]\nfile = "{recipe}"\n')
        with pytest.raises(RecipeError) as exc:
            load_preset(team)
        assert f"preset 'team' ({team}) [recipe]:" in str(exc.value) and words in str(exc.value)
    team.write_text('name = "team"\n[recipe]\nhardware = "h200"\n')
    with pytest.raises(PresetError, match="recipe.file: missing"):
        load_preset(team)
    team.write_text('name = "team"\n[recipe]\nfile = "x.yaml"\nhw = "h200"\n')
    with pytest.raises(PresetError, match="recipe.hw: unknown field"):
        load_preset(team)


def test_another_models_recipe_on_the_kimi_k3_preset_says_what_it_lacks() -> None:
    """A recipe of another model (Kimi-K2.6, with --k3-recipe) still derives a preset: its
    identity is the other model's, and what it does not state is not checked, naming it."""
    from pytest_k3accept.config.presets import load_with_recipe

    preset, profile = load_with_recipe("kimi-k3", recipe=K26, hardware="h200")
    assert profile is not None and profile.recipe.model_id == "moonshotai/Kimi-K2.6"
    assert preset.server.tool_call_parser == "kimi_k2"
    assert "Kimi-K2.6" in preset.name and preset.environment.driver_min is None
    assert str(K26) in preset.absent("host-driver expectation")


KLINEAR = DATA / "Kimi-Linear-48B-A3B-Instruct.2026-04-17.yaml"  # commit c39a374


def test_a_third_models_recipe_kimi_linear() -> None:
    """Kimi-Linear (another model, another shape: no default hardware, no parsers, AMD with
    --no-enable-prefix-caching) reads the same way; what it does not state is not checked."""
    from pytest_k3accept.checks.recipe_args import COMMAND, check_profile, summary

    recipe = load_recipe(KLINEAR)
    assert (recipe.model_id, recipe.date_updated, recipe.unknown_keys) == (
        "moonshotai/Kimi-Linear-48B-A3B-Instruct", "2026-04-17", ())
    with pytest.raises(RecipeError, match="names no default_hardware; choose one with "
                                          "--k3-hardware: h200, mi300x, mi325x, mi355x"):
        select(recipe)
    h200 = select(recipe, "h200")
    assert h200.label() == "h200/single_node_tp" and dict(h200.args) == {
        "trust_remote_code": True, "tensor_parallel_size": "1"}  # 115 GB fit one 141 GB GPU
    assert (h200.tool_call_parser, h200.reasoning_parser, h200.driver_min, h200.image,
            h200.max_model_len, h200.prefix_caching) == (None,) * 6
    amd = select(recipe, "mi300x")
    assert amd.prefix_caching is False and amd.env == {"SAFETENSORS_FAST_GPU": "1"}
    preset = preset_from_recipe(read_preset("kimi-k3"), h200)
    assert preset.server.tool_call_parser is None and preset.server.max_model_len is None
    assert "Kimi-Linear-48B-A3B-Instruct" in preset.name
    # its own arguments on a launch command pass, one changed fails naming the recipe
    live = {"trust_remote_code": True, "tensor_parallel_size": "1",
            "enable_prefix_caching": False}
    where = f"{KLINEAR.name} (2026-04-17, mi300x/single_node_tp)"
    assert summary(check_profile(amd, live, {"SAFETENSORS_FAST_GPU": "1"}, source=COMMAND,
                                 where=where)) == ([], [])
    [failed], _ = summary(check_profile(amd, {**live, "enable_prefix_caching": True},
                                        {"SAFETENSORS_FAST_GPU": "1"}, source=COMMAND,
                                        where=where))
    assert "--no-enable-prefix-caching: the server runs on" in failed and where in failed


def test_the_derived_preset_names_the_recipe_it_came_from() -> None:
    """``Preset.recipe`` of a derived preset is the recipe and profile it was derived from
    (what the cache-expectation messages name), also when --k3-recipe replaced the preset's."""
    from pytest_k3accept.config.presets import load_with_recipe

    preset, _ = load_with_recipe("kimi-k3", recipe=K3_OLD, hardware="h200")
    assert preset.recipe is not None
    assert (preset.recipe.file, preset.recipe.hardware, preset.recipe.strategy) == (
        str(K3_OLD), "h200", "single_node_tp")
    decode, _ = load_with_recipe("kimi-k3", hardware="b300", strategy="pd_cluster:decode")
    assert decode.recipe is not None and decode.recipe.strategy == "pd_cluster:decode"
    assert decode.recipe.file.endswith("data/recipes/Kimi-K3.yaml")


def test_host_gpus_of_other_hardware_name_the_profile_that_fits() -> None:
    """The default profile is b300's; H200 GPUs in the host facts say to pass --k3-hardware
    h200 (a GPU the recipe has no profile for lists the ones it has)."""
    from pytest_k3accept.checks.recipe_args import check_hardware
    from pytest_k3accept.config.recipe import HARDWARE, hardware_of

    assert hardware_of(["NVIDIA H200"] * 8, list(HARDWARE)) == "h200"
    assert hardware_of(["NVIDIA GB200"], list(HARDWARE)) == "gb200"
    assert hardware_of(["AMD Instinct MI300X"], list(HARDWARE)) == "mi300x"
    assert hardware_of(["NVIDIA H200", "NVIDIA B200"], list(HARDWARE)) is None
    assert hardware_of(["NVIDIA A100-SXM4-80GB"], list(HARDWARE)) is None
    default = select(load_recipe(K3_NEW))
    [wrong] = check_hardware(default, ["NVIDIA H200"], where="Kimi-K3.yaml (2026-08-15)")
    assert wrong.ok is False and "pass --k3-hardware h200" in wrong.message
    assert "NVIDIA H200 (h200)" in wrong.message and "for b300" in wrong.message
    [right] = check_hardware(select(load_recipe(K3_NEW), "h200"), ["NVIDIA H200"], where="r")
    assert right.ok is True
    [h100] = check_hardware(default, ["NVIDIA H100 80GB HBM3"], where="r")
    assert "the recipe has no h100 profile; it has: h200, b200, b300" in h100.message
    assert check_hardware(default, [], where="r") == []  # no GPU names: nothing said
