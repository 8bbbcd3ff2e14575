"""benchmarks/generator.py (the synthetic generator's cost on the real server): the growth
and slope figures it prints. The build itself runs against the live testbed only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import generator  # noqa: E402


def _rows(seconds: list[float]) -> list[dict[str, object]]:
    return [{"tokens": 8192 * 4 ** i, "calls": 5, "seconds": s, "measured": 8192 * 4 ** i,
             "deviation": 0} for i, s in enumerate(seconds)]


def test_linear_cost_has_growth_one_and_slope_one() -> None:
    rows = _rows([0.1, 0.4, 1.6])
    assert generator.growth(rows)[0] is None
    assert generator.growth(rows)[1:] == pytest.approx([1.0, 1.0])
    assert generator.slope(rows) == pytest.approx(1.0)


def test_quadratic_cost_is_shown_as_faster_than_linear() -> None:
    rows = _rows([0.1, 1.6, 25.6])
    assert generator.growth(rows)[1:] == pytest.approx([4.0, 4.0])
    assert generator.slope(rows) == pytest.approx(2.0)
    text = generator.table(rows)
    assert "slope of seconds against tokens: 2.00" in text and "4.00" in text


def test_one_length_has_no_slope() -> None:
    assert generator.slope(_rows([0.3])) is None
    assert "slope" not in generator.table(_rows([0.3]))


def test_accuracy_pairs_are_compared_pair_by_pair() -> None:
    import accuracy

    # a constant offset of 0.3 ms between the two clients shows whatever the server did
    runner = [10.3, 50.3, 20.3, 90.3]
    raw = [10.0, 50.0, 20.0, 90.0]
    d = accuracy.paired(runner, raw)
    assert d["pairs"] == 4 and d["median"] == pytest.approx(0.3)
    assert d["mean"] == pytest.approx(0.3) and d["ci95"] == pytest.approx(0.0, abs=1e-9)
    assert accuracy.paired([], [])["median"] is None
    assert accuracy.paired([1.0], [0.5])["ci95"] is None
    line = accuracy.paired_line({"context_tokens": None, "pairs": 4,
                                 **{f"{k}_added_median_ms": 1.0 for k in ("ttft", "e2e")},
                                 **{f"{k}_raw_added_median_ms": 0.7 for k in ("ttft", "e2e")},
                                 **{f"{k}_paired_ms": d for k in ("ttft", "e2e")}})
    assert line.startswith("short   c=1   pairs=4") and "median +0.30, mean +0.30 +- 0.00" in line


def test_call_counting_counts_and_passes_the_answer_through() -> None:
    import asyncio

    from pytest_k3accept.observe.load.synthetic import CallCounting

    async def inner(messages: list[dict[str, object]], gen: bool) -> int:
        return len(messages) + (1 if gen else 0)

    counting = CallCounting(inner)
    assert asyncio.run(counting([{}, {}], True)) == 3
    assert asyncio.run(counting([], False)) == 0
    assert counting.calls == 2


def test_the_generators_own_seconds_are_told_apart_from_the_servers() -> None:
    # the server's tokenization grows faster than linear, the generator's own part linearly
    rows = _rows([0.2, 1.0, 5.0])
    for row, server in zip(rows, [0.1, 0.6, 3.4]):
        row["server_s"] = server
        row["tokenized"] = row["tokens"]
    assert generator.growth(rows)[1:] == pytest.approx([1.25, 1.25])
    assert generator.growth(rows, own=True)[1:] == pytest.approx([1.0, 1.0])
    assert generator.slope(rows, own=True) == pytest.approx(1.0)
    text = generator.table(rows)
    assert "own seconds (not waiting for /tokenize): 1.00" in text and "1.0x" in text
