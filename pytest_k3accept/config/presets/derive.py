"""A preset derived from the official recipe: :func:`preset_from_recipe` (``--k3-recipe``).

The recipe's profile (one hardware, one strategy: :mod:`pytest_k3accept.config.recipe`)
decides what the deployment must be: host driver floor, CUDA runtime, GPU count and nodes,
parallel layout, served context, prefix caching, parsers and the all-to-all backend per
interconnect. What the recipe does not state is *not checked* (None, with the reason in the
skip message), never taken from the hand-written preset. The base preset keeps what a recipe
never says: the target load, the SLOs, the per-suite values, the prefix-cache hit-rate floor
and whether a parsed tool call is required. Pure: no pytest, no network.
"""

from __future__ import annotations

import dataclasses

from typing import Any

from ..recipe import Profile
from .model import INTERCONNECTS, Environment, Preset, RecipeRef


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _whole(value: Any) -> int | None:
    text = _text(value)
    return int(text) if text is not None and text.strip().isdigit() else None


def preset_from_recipe(base: Preset, profile: Profile) -> Preset:
    """``base`` with the deployment expectations of the recipe ``profile``."""
    recipe = profile.recipe
    where = recipe.where()
    silent = [what for what, value in (
        ("host driver floor", profile.driver_min), ("CUDA runtime", profile.cuda_major),
        ("minimum GPU count", profile.min_gpus)) if value is None]
    reason = (f"the recipe {where} states no {', '.join(silent)} for {profile.label()}"
              if silent else "")
    env = Environment(driver_min=profile.driver_min, cuda_major=profile.cuda_major,
                      gpus=profile.min_gpus,
                      nodes=profile.nodes if profile.nodes and profile.nodes > 1 else None,
                      reason=reason)
    backends = {k: (v,) for k, v in profile.all2all.items() if k in INTERCONNECTS}
    pool = profile.role(profile.pool)
    # a chosen pd_cluster pool (--k3-strategy pd_cluster:decode): that pool's layout
    ep, dp, tp, prefix = (
        (pool.expert_parallel, pool.data_parallel_size, pool.tensor_parallel_size,
         pool.prefix_caching) if pool else
        (profile.expert_parallel, profile.data_parallel_size, profile.tensor_parallel_size,
         profile.prefix_caching))
    server = dataclasses.replace(
        base.server, max_model_len=profile.max_model_len,
        enable_expert_parallel=ep, min_data_parallel_size=dp, min_tensor_parallel_size=tp,
        all2all_backends=backends,
        # "explicit" when the recipe passes --enable-prefix-caching; otherwise the recipe asks
        # nothing of the flag (a preset cannot say "off": a pd_cluster decode pool's
        # --no-enable-prefix-caching is kept in the profile's roles)
        prefix_caching="explicit" if prefix else "any",
        tool_call_parser=profile.tool_call_parser, reasoning_parser=profile.reasoning_parser,
        kv_cache_dtype=_text(profile.arg("--kv-cache-dtype")),
        block_size=_whole(profile.arg("--block-size")),
        prefix_match_unit=_whole(profile.arg("--prefix-match-unit")))
    notes = []
    targets = base.targets
    window = profile.max_model_len
    if window and targets.context_tokens + targets.output_tokens > window:
        context = max(1, window - targets.output_tokens)
        targets = dataclasses.replace(
            targets, context_tokens=context,
            prefix_tokens=min(targets.prefix_tokens, max(0, context - 1)))
        notes.append(f"target context {base.targets.context_tokens} capped to {context} "
                     f"(the recipe serves max_model_len {window})")
    suites = base.suites
    if suites.prefill_tokens and window and suites.prefill_tokens > window:
        suites = dataclasses.replace(suites, prefill_tokens=None)
        notes.append("platform.prefill_tokens dropped (larger than the recipe's context)")
    if pool is not None:
        notes.append(f"pd_cluster {pool.name} pool: {pool.parallelism} "
                     f"TP{pool.tensor_parallel_size}"
                     + (f" DP{pool.data_parallel_size}" if pool.data_parallel_size else "")
                     + (", prefix caching off" if pool.prefix_caching is False else ""))
    elif profile.roles:
        notes.append("pd_cluster: the parallel layout and prefix caching are per pool ("
                     + "; ".join(f"{r.name} {r.parallelism} TP{r.tensor_parallel_size}"
                                 for r in profile.roles) + "): judged for the pool the "
                     "server is, by the recipe-arguments check (S6)")
    desc = (f"{base.name} with the expectations of the recipe {where}, profile "
            f"{profile.label()}" + (f"; {'; '.join(notes)}" if notes else ""))
    return dataclasses.replace(
        base, name=(f"{base.name} + recipe {recipe.title} {recipe.date_updated or 'undated'} "
                    f"{profile.label()}"),
        description=desc, source=recipe.path, environment=env, server=server,
        targets=targets, suites=suites,
        # what it was derived from (a --k3-recipe file replaces the base's [recipe])
        recipe=RecipeRef(file=recipe.path, hardware=profile.hardware,
                         strategy=profile.label().split("/", 1)[1]))
