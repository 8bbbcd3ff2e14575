"""The prefix-cache A/B's block arithmetic: live cache config, sizes, why 0 hits are inconclusive."""

from __future__ import annotations

from pytest_k3accept.checks.prefix_ab.blocks import (CacheBlocks, from_config, inconclusive,
                                                     saved_state, synthetic_sizes)
from pytest_k3accept.checks.prefix_ab.compare import FAIL, INCOMPLETE, PASS, Arm, compare, prefix_shape

# labels as vLLM 0.32 (CPU build) reports them for the hybrid testbed model
HYBRID = {"enable_prefix_caching": "True", "block_size": "128", "mamba_cache_mode": "align",
          "prefix_cache_retention_interval": "0", "prefix_match_unit": "None",
          "mamba_block_size": "16"}
OFF = {"enable_prefix_caching": "False", "block_size": "128", "mamba_cache_mode": "none"}


def arm(label: str, cfg: dict[str, str], hits: float) -> Arm:
    return Arm(label, f"http://{label}:8000", dict(cfg), requests=2, ok=2, queries=1400.0,
               hits=hits, prompt_tokens=1400)


def test_live_config_gives_block_unit_and_mode() -> None:
    b = from_config([HYBRID])
    assert (b.block_size, b.match_unit, b.unit, b.align) == (128, None, 128, True)
    assert b.retention_interval == 0 and "mamba_cache_mode=align" in b.words()
    k3 = from_config([{"block_size": "1536", "prefix_match_unit": "128",
                       "mamba_cache_mode": "align"}])
    assert (k3.unit, k3.block_size) == (128, 1536) and "prefix-match unit 128" in k3.words()
    dense = from_config([{}, {"block_size": "16", "mamba_cache_mode": "None"}])
    assert dense.block_size == 16 and dense.mamba_cache_mode is None and not dense.align
    unknown = from_config([{"block_size": "None"}])
    assert unknown.block_size is None and unknown.unit == 16 and "not reported" in unknown.words()


def test_synthetic_sizes_are_whole_blocks_with_a_unique_part_under_one_block() -> None:
    assert synthetic_sizes(from_config([HYBRID])) == (256, 320)
    assert synthetic_sizes(CacheBlocks(block_size=16)) == (256, 356)
    prefix, context = synthetic_sizes(CacheBlocks(1536, 128, "align"))
    assert prefix == 1536 and context == 1600 and saved_state(context, 128) == prefix
    assert synthetic_sizes(CacheBlocks()) == (256, 356)


def test_prefix_shorter_than_one_block_is_inconclusive() -> None:
    why = inconclusive(81, 128)
    assert why is not None
    assert "the shared prefix (81 tokens) is shorter than one block (128)" in why
    assert "one prefix-match unit (128)" in (inconclusive(81, 128, match_unit=True) or "")
    assert inconclusive(300, 128) is None  # not align: a whole block shared can hit


def test_align_mode_state_in_the_unique_part_is_inconclusive() -> None:
    # 2 requests, a 304-token shared prefix, 700-token prompts: the state the first one left is
    # at 640, in its unique part (seen on the hybrid testbed: 0 hits)
    ids = [[1] * 304 + [10 + i] * 396 for i in range(2)]
    shape = prefix_shape(ids, 128, align=True)
    assert (shape.shared_tokens, shape.sharing, shape.reachable, shape.first_prompt) == (
        304, 1, 0, 700)
    why = shape.why_no_hits() or ""
    assert "align mode keeps state only at block boundaries" in why
    assert "the shared part (304 tokens = 2 whole blocks of 128 + 48) ends mid-block" in why
    assert "(640 of its 700 tokens)" in why
    res = compare(arm("on", HYBRID, 0), arm("off", OFF, 0), shape)
    assert res.status == INCOMPLETE and res.ok and not res.problems
    assert "does not show that caching is broken" in res.message
    assert "the cache does not hit" not in res.message
    # the same set on a dense server (no align mode): 0 hits are a failing cache
    dense = prefix_shape(ids, 128)
    assert dense.reachable == 1 and dense.why_no_hits() is None
    assert compare(arm("on", HYBRID, 0), arm("off", OFF, 0), dense).status == FAIL


def test_whole_block_prefix_in_align_mode_must_hit() -> None:
    # 256 shared tokens + a unique part under one block: the state is kept at 256, shared
    ids = [[1] * 259 + [10 + i] * 61 for i in range(6)]
    shape = prefix_shape(ids, 128, align=True)
    assert shape.reachable == 5 and shape.why_no_hits() is None
    res = compare(arm("on", HYBRID, 0), arm("off", OFF, 0), shape)
    assert res.status == FAIL and "the cache does not hit" in res.message
    assert compare(arm("on", HYBRID, 1280), arm("off", OFF, 0), shape).status == PASS


def test_not_repeating_set_names_the_block_arithmetic() -> None:
    shape = prefix_shape([[7] * 81 + [i] * 100 for i in range(4)], 128, align=True)
    res = compare(arm("on", HYBRID, 0), arm("off", OFF, 0), shape)
    assert res.status == PASS and not res.problems
    assert "the shared prefix (81 tokens) is shorter than one block (128)" in res.message
    assert shape.as_dict()["unit"] == 128 and shape.as_dict()["align"] is True
