"""The official vLLM recipe (``--k3-recipe``): real recipe files of vllm-project/recipes read
into profiles per hardware and strategy, and the preset derived from one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_k3accept.config.presets import load_preset, preset_from_recipe
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
    json.dumps(preset_from_recipe(load_preset("kimi-k3"), profile).as_dict())


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
    preset = preset_from_recipe(load_preset("kimi-k3"), p)
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
    base = load_preset("kimi-k3")
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
    # the shipped preset itself is unchanged
    assert base.server.max_model_len == 1048576 and base.server.min_data_parallel_size == 8


def test_preset_from_a_blackwell_dep_profile() -> None:
    preset = preset_from_recipe(load_preset("kimi-k3"),
                                select(load_recipe(K3_NEW), "b300", "multi_node_dep"))
    srv = preset.server
    assert srv.prefix_caching == "explicit" and srv.max_model_len == 1048576
    assert (srv.enable_expert_parallel, srv.min_data_parallel_size) == (True, 16)
    assert (preset.environment.gpus, preset.environment.nodes) == (16, 2)
    assert preset.targets == load_preset("kimi-k3").targets
