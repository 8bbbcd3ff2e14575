"""The prefix-cache A/B's pure logic: prefix shape, side assignment, the decision."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_k3accept.checks.prefix_ab.compare import (FAIL, INCOMPLETE, PASS, Arm, arm_from_load,
                                                      assign, compare, prefix_shape)

ON_CFG = {"enable_prefix_caching": "True", "mamba_cache_mode": "align",
          "prefix_cache_retention_interval": "0", "block_size": "128"}
OFF_CFG = {"enable_prefix_caching": "False", "mamba_cache_mode": "none", "block_size": "128"}


def arm(label: str, cfg: dict[str, str], hits: float, queries: float = 2400.0,
        errors: int = 0, url: str = "") -> Arm:
    return Arm(label, url or f"http://{label}:8000", dict(cfg), requests=6, ok=6 - errors,
               errors=errors, first_error="HTTP 500: boom" if errors else None,
               queries=queries, hits=hits, prompt_tokens=2400, ttft_mean=0.03,
               prefill_mean=0.01, peak_kv=0.2)


REPEATS = prefix_shape([[1] * 300 + [i] * 100 for i in range(6)], 128)
DISTINCT = prefix_shape([[i] * 400 for i in range(6)], 128)


def test_prefix_shape_counts_blocks() -> None:
    assert REPEATS.shared_tokens == 300 and REPEATS.sharing == 5 and REPEATS.repeats
    assert not DISTINCT.repeats and DISTINCT.shared_tokens == 0
    # a shared prefix shorter than one block cannot hit
    short = prefix_shape([[7] * 100 + [i] * 300 for i in range(4)], 128)
    assert short.shared_tokens == 100 and not short.repeats
    with pytest.raises(ValueError):
        prefix_shape([[1]], 0)


@given(st.lists(st.lists(st.integers(0, 3), max_size=40), max_size=8), st.integers(1, 16))
def test_prefix_shape_bounds(ids: list[list[int]], block: int) -> None:
    shape = prefix_shape(ids, block)
    assert 0 <= shape.sharing <= max(0, len(ids) - 1)
    assert shape.shared_tokens <= max((len(x) for x in ids), default=0)
    assert shape.repeats == (shape.sharing > 0)


def test_hits_on_and_none_off_passes() -> None:
    res = compare(arm("on", ON_CFG, 1280), arm("off", OFF_CFG, 0, queries=0), REPEATS)
    assert res.status == PASS and res.ok and res.compared
    assert "53.3%" in res.message and "0 hits (no lookups)" in res.message
    assert json.loads(json.dumps(res.as_dict()))["on"]["hit_rate"] == pytest.approx(1280 / 2400)


def test_caching_on_but_zero_hits_fails_with_live_config() -> None:
    res = compare(arm("on", ON_CFG, 0), arm("off", OFF_CFG, 0), REPEATS)
    assert res.status == FAIL and not res.ok
    assert "prefix_cache_hits stayed 0" in res.message
    assert "mamba_cache_mode=align" in res.message and "5 of 6 requests" in res.message


def test_zero_hits_is_fine_when_prefixes_do_not_repeat() -> None:
    res = compare(arm("on", ON_CFG, 0), arm("off", OFF_CFG, 0), DISTINCT)
    assert res.status == PASS
    assert "prefix caching cannot help this load" in res.message


def test_off_side_with_hits_or_flag_on_fails() -> None:
    res = compare(arm("on", ON_CFG, 1280), arm("off", OFF_CFG, 640), REPEATS)
    assert res.status == FAIL and "not actually off" in res.message
    wrong = dict(OFF_CFG, enable_prefix_caching="True")
    res = compare(arm("on", ON_CFG, 1280), arm("off", wrong, 0), REPEATS)
    assert res.status == FAIL and "--no-enable-prefix-caching" in res.message


def test_failed_requests_fail_the_ab() -> None:
    res = compare(arm("on", ON_CFG, 1280, errors=2), arm("off", OFF_CFG, 0), REPEATS)
    assert res.status == FAIL and "2 of 6 requests failed on the cache-on side" in res.message


def test_single_side_is_incomplete_unless_it_fails() -> None:
    res = compare(arm("on", ON_CFG, 1280), None, REPEATS)
    assert res.status == INCOMPLETE and res.ok and not res.compared
    assert "no cache-off side" in res.message
    assert compare(arm("on", ON_CFG, 0), None, REPEATS).status == FAIL
    assert "no side with prefix caching on" in compare(None, arm("off", OFF_CFG, 0),
                                                       REPEATS).message


def test_assign_by_live_config_not_order() -> None:
    a, b = arm("?", OFF_CFG, 0, url="http://a"), arm("?", ON_CFG, 0, url="http://b")
    on, off, notes = assign([a, b])
    assert on is b and off is a and not notes
    both = assign([arm("?", ON_CFG, 0, url="http://x"), arm("?", ON_CFG, 0, url="http://y")])
    assert both[1] is None and "2 endpoints have prefix caching on" in both[2][0]
    unknown = assign([arm("on", {}, 0), arm("off", {}, 0)])
    assert unknown[0] is not None and unknown[0].label == "on"
    assert unknown[1] is not None and unknown[1].label == "off"
    assert len(unknown[2]) == 2 and "does not report" in unknown[2][0]


def test_missing_cached_tokens_is_noted() -> None:
    res = compare(arm("on", ON_CFG, 1280), arm("off", OFF_CFG, 0), REPEATS)
    assert any("--enable-prompt-tokens-details" in n for n in res.notes)


def test_arm_from_load_result() -> None:
    rec = [SimpleNamespace(ok=True, cached_tokens=256, error=None),
           SimpleNamespace(ok=False, cached_tokens=None, error="HTTP 500: dead")]
    result = SimpleNamespace(
        endpoint="http://s", records=rec,
        summary={"requests": 2, "ok": 1, "errors": 1, "prompt_tokens": 400,
                 "ttft": {"mean": 0.05}},
        server={"prefix_cache_queries": 800.0, "prefix_cache_hits": 256.0,
                "prefill_time_mean": 0.02, "peak_kv_usage": 0.4})
    a = arm_from_load("on", result, ON_CFG)
    assert (a.hits, a.queries, a.cached_tokens, a.errors) == (256.0, 800.0, 256, 1)
    assert a.first_error == "HTTP 500: dead" and a.caching is True
    assert a.ttft_mean == 0.05 and a.peak_kv == 0.4


def test_a_server_without_prefix_cache_counters_is_unknown_not_a_failing_cache() -> None:
    """An older or Rust-frontend /metrics without the prefix-cache families: hits unknown,
    so the A/B is incomplete, never 'the cache does not hit'."""
    shape = prefix_shape([[1] * 600, [1] * 600, [1] * 600], block_size=16)
    on = Arm("on", "http://on", {"enable_prefix_caching": "True"}, requests=3, ok=3,
             measured=False)
    off = Arm("off", "http://off", {"enable_prefix_caching": "False"}, requests=3, ok=3)
    res = compare(on, off, shape)
    assert res.status == INCOMPLETE and "unknown, not zero" in res.message
    assert "does not hit" not in res.message
