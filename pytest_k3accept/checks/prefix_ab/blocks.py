"""The block arithmetic of prefix caching, read from the live ``vllm:cache_config_info``.

vLLM's prefix cache hits only in whole blocks (``block_size``; a server started with
``--prefix-match-unit N`` matches in units of N tokens instead). A hybrid model (linear
attention / KDA layers with recurrent state beside attention KV) runs with
``mamba_cache_mode="align"`` when prefix caching is on: its recurrent state is kept only at
block boundaries (the last whole block a prefill step computed), so a repeat hits only when an
earlier request's saved state lies inside the part they share. Pure: no pytest, no network.

:func:`inconclusive` says why 0 hits prove nothing about the cache ("the shared prefix (81
tokens) is shorter than one block (128)"; "align mode keeps state only at block boundaries:
the shared part ends mid-block"); :func:`synthetic_sizes` sizes a shared prefix that can hit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

#: vLLM's GPU default block size, used (and said) when a server does not report its own
FALLBACK_BLOCK = 16


def _int(value: str | None) -> int | None:
    """A positive integer label value, or None (absent, "None", "", not a number)."""
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


@dataclass(frozen=True)
class CacheBlocks:
    """What the live cache config says about hit granularity (None: the server does not say)."""

    block_size: int | None = None
    match_unit: int | None = None
    mamba_cache_mode: str | None = None
    retention_interval: int | None = None

    @property
    def unit(self) -> int:
        """Tokens a hit comes in: the prefix-match unit, else the block size (else vLLM's
        default of 16 when the server reports neither)."""
        return self.match_unit or self.block_size or FALLBACK_BLOCK

    @property
    def align(self) -> bool:
        """True when the server keeps recurrent state only at block boundaries."""
        return (self.mamba_cache_mode or "").strip().lower() == "align"

    def words(self) -> str:
        """``block 128, mamba_cache_mode=align`` (what is known)."""
        parts = [f"block {self.block_size}" if self.block_size else
                 f"block size not reported (taken as {FALLBACK_BLOCK})"]
        if self.match_unit:
            parts.append(f"prefix-match unit {self.match_unit}")
        if self.mamba_cache_mode and self.mamba_cache_mode != "None":
            parts.append(f"mamba_cache_mode={self.mamba_cache_mode}")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unit": self.unit, "align": self.align}


def from_config(configs: Sequence[Mapping[str, str]]) -> CacheBlocks:
    """The block arithmetic of the first config that reports a block size (the sides of an A/B
    serve the same model, so they share it)."""
    cfg = next((c for c in configs if _int(c.get("block_size"))), None) or next(
        iter(configs), {})
    mode = cfg.get("mamba_cache_mode")
    retention = cfg.get("prefix_cache_retention_interval")
    return CacheBlocks(block_size=_int(cfg.get("block_size")),
                       match_unit=_int(cfg.get("prefix_match_unit")),
                       mamba_cache_mode=None if mode in (None, "", "None") else mode,
                       retention_interval=None if retention in (None, "", "None")
                       else _int(retention) or 0)


def saved_state(prompt_tokens: int, unit: int) -> int:
    """Where align mode keeps a one-step prefill's recurrent state: its last whole block."""
    return prompt_tokens // unit * unit


def inconclusive(shared_tokens: int, unit: int, *, align: bool = False, reachable: int = 1,
                 first_prompt: int | None = None, match_unit: bool = False) -> str | None:
    """Why 0 hits on a cache-on server are inconclusive for a request set, or None when its
    shape allows hits (0 then means the cache does not hit).

    ``shared_tokens``: the longest prefix a request shares with an earlier one, and
    ``first_prompt`` the length of that earlier request; ``reachable``: how many requests share
    with an earlier one a part that holds a state align mode kept (its last whole block).
    """
    what = "one prefix-match unit" if match_unit else "one block"
    if shared_tokens < unit:
        return (f"inconclusive: the shared prefix ({shared_tokens} tokens) is shorter than "
                f"{what} ({unit}): no repeat can hit; size the shared prefix in whole blocks")
    if not align or reachable > 0:
        return None
    whole = shared_tokens // unit * unit
    end = "ends mid-block" if shared_tokens % unit else "ends at a block boundary"
    state = "" if first_prompt is None else (
        f" ({saved_state(first_prompt, unit)} of its {first_prompt} tokens)")
    return (f"inconclusive: align mode keeps state only at block boundaries: the shared part "
            f"({shared_tokens} tokens = {whole // unit} whole blocks of {unit} + "
            f"{shared_tokens - whole}) {end}, and the state an earlier request left is at its "
            f"last whole block{state}, in its unique part; size the shared prefix in whole "
            "blocks with each request's unique part under one block")


def synthetic_sizes(blocks: CacheBlocks, *, min_prefix: int = 256) -> tuple[int, int]:
    """``(prefix_tokens, context_tokens)`` of a synthetic set that can hit on this server: a
    shared prefix of whole blocks (at least ``min_prefix`` tokens, two blocks) and a unique
    part under one block (half a unit) in align mode, 100 tokens otherwise."""
    block = math.lcm(blocks.block_size or FALLBACK_BLOCK, blocks.unit)
    n = max(2 if block < min_prefix else 1, -(-min_prefix // block))
    prefix = n * block
    unique = max(16, blocks.unit // 2) if blocks.align else 100
    return prefix, prefix + unique
