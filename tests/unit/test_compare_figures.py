"""Figures side by side (compare/figures.py, compare/thresholds.py): marks, changes and
regressions, on the real records in tests/data/records and on generated values."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_k3accept.checks.procedure.plan import ProcedureError, read_profile
from pytest_k3accept.compare import compare
from pytest_k3accept.compare.figures import (BETTER, SAME, UNKNOWN, WORSE, mark, regressed,
                                             runs_of, startup_figures)
from pytest_k3accept.compare.read import Record, from_data
from pytest_k3accept.compare.thresholds import (DEFAULTS, RUN_FIGURES, ThresholdError,
                                                Thresholds, from_table)

RECORDS = Path(__file__).resolve().parents[1] / "data" / "records"


def record(name: str = "record-1.1-load.json") -> dict[str, Any]:
    return json.loads((RECORDS / name).read_text())  # type: ignore[no-any-return]


def load_data(data: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in data["evidence"] if e["kind"] == "load")["data"]  # type: ignore


def rec(data: dict[str, Any], source: str = "x") -> Record:
    return from_data(data, source)


def test_the_real_load_run_has_every_figure_and_the_startup_durations() -> None:
    runs = runs_of(rec(record()))
    assert len(runs) == 1 and runs[0].profile == "default"
    figs = runs[0].figures
    assert figs["ttft_p99"] == pytest.approx(0.16377, abs=1e-4)
    assert figs["request_throughput"] == pytest.approx(7.11, abs=0.01)
    assert figs["error_rate"] == 0.0 and figs["preemptions"] == 0.0
    assert figs["prefix_cache_hit_rate"] == 0.0 and figs["peak_kv"] is not None
    assert runs[0].fingerprint and runs[0].fingerprint.startswith("79991eb0")
    start = startup_figures(rec(record()))
    assert start["startup_engine_init_done"][1] > start["startup_weights_loaded"][1] > 0
    assert start["startup_engine_init_logged"][1] == pytest.approx(4.5)


def test_a_record_compared_with_itself_changes_nothing() -> None:
    for name in ("record-1.1-load.json", "record-1.1-poc.json"):
        c = compare(rec(record(name)), rec(record(name)))
        assert c.regressions == [] and c.conditions.changes == []
        assert {r.mark for r in c.rows} <= {SAME, UNKNOWN}


def test_a_p99_ttft_beyond_ten_percent_is_a_regression_with_measured_vs_baseline() -> None:
    new = record()
    d = load_data(new)
    d["summary"]["ttft"]["p99"] *= 1.25
    c = compare(rec(record(), "base.json"), rec(new))
    assert len(c.regressions) == 1
    line = c.regressions[0]
    assert line.startswith("REGRESSION TTFT p99 of load 'default'")
    assert "204.7 ms now vs 163.8 ms in the baseline (+25.0 %, allowed +10 %)" in line
    row = next(r for r in c.rows if r.key == "ttft_p99")
    assert row.mark == WORSE and row.regression
    d["summary"]["ttft"]["p99"] = 0.1637777065996488 * 1.09  # within +10 %
    assert compare(rec(record()), rec(new)).regressions == []


def test_throughput_drop_and_error_rate_rise_are_regressions_by_default() -> None:
    new = record()
    d = load_data(new)
    d["summary"]["request_throughput"] *= 0.8
    d["error_rate"] = 0.05
    keys = [r.key for r in compare(rec(record()), rec(new)).rows if r.regression]
    assert keys == ["request_throughput", "error_rate"]


def test_an_unmeasured_figure_is_unknown_never_a_regression() -> None:
    new = record()
    d = load_data(new)
    d["summary"]["ttft"] = {}
    d["peak_kv"] = None
    c = compare(rec(record()), rec(new))
    rows = {r.key: r for r in c.rows}
    assert rows["ttft_p99"].mark == UNKNOWN and not rows["ttft_p99"].regression
    assert rows["peak_kv"].mark == UNKNOWN


def test_runs_are_matched_by_profile_and_unmatched_ones_are_named() -> None:
    new = record()
    load_data(new)["profile_name"] = "agent-team"
    c = compare(rec(record()), rec(new))
    assert not [r for r in c.rows if r.run != "session"]
    assert any("only in the baseline: load 'default'" in n for n in c.notes)
    assert any("only in this session: load 'agent-team'" in n for n in c.notes)
    assert any("no load run matched" in n for n in c.notes)


figures = st.sampled_from(RUN_FIGURES)
values = st.floats(min_value=0, max_value=1e6, allow_nan=False) | st.none()


@settings(max_examples=300, deadline=None)
@given(figures, values, values, st.floats(min_value=0, max_value=0.5))
def test_a_worse_figure_is_never_marked_better(fig: Any, old: Any, new: Any,
                                               same: float) -> None:
    m = mark(fig, old, new, same)
    if old is None or new is None:
        assert m == UNKNOWN
        return
    worse = new > old if not fig.higher_is_better else new < old
    if worse:
        assert m in (WORSE, SAME)
    if old == new:
        assert m == SAME
    limit = 0.1
    if regressed(fig, old, new, limit):
        assert worse


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from([f.key for f in RUN_FIGURES]),
                       st.floats(min_value=0, max_value=1e4, allow_nan=False), max_size=8))
def test_any_record_compared_with_itself_has_no_regression(figs: dict[str, float]) -> None:
    data = record()
    d = load_data(data)
    for key, value in figs.items():
        if "_p" in key:
            d["summary"][key.split("_")[0]][key.split("_")[1]] = value
        elif key in ("request_throughput", "output_throughput"):
            d["summary"][key] = value
        elif key == "prefix_cache_hit_rate":
            d["server"][key] = value
        else:
            d[key] = value
    c = compare(rec(data), rec(copy.deepcopy(data)))
    assert c.regressions == [] and all(r.mark in (SAME, UNKNOWN) for r in c.rows)


def test_thresholds_from_a_baseline_table() -> None:
    th = from_table({"ttft_p99": 0.05, "e2e_p99": False, "preemptions": 2,
                     "startup_engine_init_done": 0.5, "same_within": 0.01}, "p.toml: [baseline]")
    assert th.limit("ttft_p99") == 0.05 and th.limit("e2e_p99") is None
    assert th.limit("preemptions") == 2 and th.limit("startup_engine_init_done") == 0.5
    assert th.same_within == 0.01 and th.source == "p.toml: [baseline]"
    assert from_table(None).limits == DEFAULTS
    assert th.describe("ttft_p99") == "+5 %" and Thresholds().describe("error_rate") == "+1 pts"
    assert Thresholds().describe("request_throughput") == "-10 %"


@pytest.mark.parametrize("table, words", [
    ({"ttft_p98": 0.1}, "ttft_p98: unknown figure (did you mean 'ttft_p99'?)"),
    ({"ttft_p99": -0.1}, "ttft_p99: expected a number >= 0"),
    ({"ttft_p99": "10%"}, "ttft_p99: expected a number >= 0"),
    ({"ttft_p99": True}, "ttft_p99: expected a number >= 0"),
    ({"error_rate": 5}, "error_rate: expected a number >= 0 and <= 1"),
    ({"same_within": 0.9}, "same_within: expected a number >= 0 and <= 0.5"),
])
def test_a_bad_baseline_table_names_the_field(table: dict[str, Any], words: str) -> None:
    with pytest.raises(ThresholdError) as err:
        from_table(table, "p.toml: [baseline]")
    assert str(err.value).startswith("p.toml: [baseline]: ") and words in str(err.value)


def test_the_profile_file_carries_its_baseline_table(tmp_path: Path) -> None:
    good = tmp_path / "p.toml"
    good.write_text("concurrency = 2\n[baseline]\nttft_p99 = 0.2\n")
    dp = read_profile(good)
    assert dp.baseline.limit("ttft_p99") == 0.2 and dp.load.concurrency == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[baseline]\nttft = 0.2\n")
    with pytest.raises(ProcedureError, match=r"bad.toml: \[baseline\]: ttft: unknown figure"):
        read_profile(bad)
    assert read_profile(None).baseline.limits == DEFAULTS
