"""The preset's data model: :class:`Preset` and its tables (see :mod:`pytest_k3accept.config.presets`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ...checks.slo import SLO

HERE = Path(__file__).resolve().parent
DEFAULT = "kimi-k3"
INTERCONNECTS = ("nvlink", "rdma")
PREFIX_MODES = ("explicit", "on", "any")


class PresetError(ValueError):
    """A preset cannot be found or is invalid; the message names the file and field."""


@dataclass(frozen=True)
class Environment:
    """``[environment]``: host driver, image CUDA runtime and GPU topology (None: no
    expectation; ``reason`` says why, e.g. "the CPU testbed has no GPU")."""

    driver_min: str | None = None
    cuda_major: int | None = None
    cuda_minor: int | None = None
    gpus: int | None = None
    nodes: int | None = None
    interconnect: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class Server:
    """``[server]``: the serving configuration, checked against the live server (``/v1/models``,
    ``/metrics``) and its startup arguments (the log's ``non-default args`` line)."""

    max_model_len: int | None = None
    enable_expert_parallel: bool | None = None
    min_data_parallel_size: int | None = None
    min_tensor_parallel_size: int | None = None
    all2all_backends: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    prefix_caching: str = "on"
    min_prefix_cache_hit_rate: float = 0.0
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    require_parsed_tool_call: bool = False
    parsed_tool_call_reason: str = ""
    #: the KV cache (bytes, ``--kv-cache-memory-bytes``) that ``--k3-launch testbed`` starts the
    #: embedded testbed with; None: the testbed's default (1 GiB). Read by nothing else: a
    #: real deployment's cache is what its own launch command sizes.
    kv_cache_bytes: int | None = None
    #: the live KV cache's shape as the deployment must run it (``vllm:cache_config_info``:
    #: ``cache_dtype``, ``block_size``, ``prefix_match_unit``); None: not checked. A recipe
    #: fills them where its profile passes ``--kv-cache-dtype`` / ``--block-size`` /
    #: ``--prefix-match-unit`` (Kimi K3 on Blackwell: ``kv_cache_dtype = "fp8"``)
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    prefix_match_unit: int | None = None
    #: ``mamba_cache_mode`` a hybrid model (KDA / linear-attention layers with recurrent state)
    #: must serve with (``cache_config_info``; ``"align"`` with prefix caching); None: not checked
    mamba_cache_mode: str | None = None


@dataclass(frozen=True)
class RecipeRef:
    """``[recipe]``: the official recipe the preset's deployment expectations come from
    (``file`` relative to the preset file; ``hardware`` / ``strategy`` as the recipe names
    them, None: the recipe's ``default_hardware`` / ``default_strategy``). ``--k3-recipe``,
    ``--k3-hardware`` and ``--k3-strategy`` choose another."""

    file: str
    hardware: str | None = None
    strategy: str | None = None


@dataclass(frozen=True)
class Targets:
    """``[targets]``: the target load when no ``--k3-profile`` gives one."""

    context_tokens: int = 4096
    concurrency: int = 4
    output_tokens: int = 128
    prefix_tokens: int = 0
    prefix_reuse: float = 1.0
    requests: int = 32
    max_seconds: float = 600.0

    def profile_values(self) -> dict[str, Any]:
        """The values as load-profile fields (for ``k3_headroom`` / ``k3_load.run``)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Suites:
    """Per-suite values: ``[poc]``, ``[platform]``, ``[agent]`` and ``[production]``."""

    poc_max_tokens: int = 16
    poc_tool_call_max_tokens: int = 1024
    #: parsed tool-call attempts and the share that must parse and validate against the
    #: tool's JSON schema (the recipe: K3 occasionally emits a format its parser does not
    #: expect; validate against the schema and retry)
    poc_tool_call_attempts: int = 1
    poc_min_tool_call_rate: float = 1.0
    prefill_tokens: int | None = None
    prefill_fraction: float = 0.9
    agent_request_set: str | None = None
    restart_timeout: float = 900.0
    drain_timeout: float = 120.0
    restart_requests: int = 4


@dataclass(frozen=True)
class Preset:
    """One deployment preset, read from ``source``."""

    name: str
    description: str
    source: str
    environment: Environment = field(default_factory=Environment)
    server: Server = field(default_factory=Server)
    targets: Targets = field(default_factory=Targets)
    suites: Suites = field(default_factory=Suites)
    slo: SLO = field(default_factory=SLO)
    recipe: RecipeRef | None = None

    def absent(self, what: str) -> str:
        """The skip reason of a check whose expectation this preset does not set."""
        why = f": {self.environment.reason}" if self.environment.reason else ""
        return (f"not checked: preset {self.name!r} ({self.source}) sets no {what}{why}. "
                "Select another preset (--k3-preset NAME|PATH) or add the field to yours")

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-serializable values (evidence and the record)."""
        out = dataclasses.asdict(self)
        out["server"]["all2all_backends"] = {k: list(v) for k, v in
                                             self.server.all2all_backends.items()}
        out["slo"] = self.slo.as_dict()
        return out
