"""Percentile maths and run summaries (pure; Hypothesis for the maths)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_k3accept.observe.load import stats

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
values = st.lists(finite, min_size=1, max_size=200)
qs = st.floats(min_value=0, max_value=100, allow_nan=False)


def reference(data: list[float], q: float) -> float:
    """numpy's default 'linear' method, written out."""
    xs = sorted(data)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@given(values, qs)
def test_percentile_lies_between_min_and_max_and_matches_reference(data: list[float],
                                                                  q: float) -> None:
    p = stats.percentile(data, q)
    assert min(data) <= p <= max(data)
    assert p == pytest.approx(reference(data, q), rel=1e-9, abs=1e-6)


@given(values, qs, qs)
def test_percentile_is_monotone_in_q(data: list[float], a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert stats.percentile(data, lo) <= stats.percentile(data, hi)


@given(values, st.randoms())
def test_percentile_ignores_order_and_hits_the_ends(data: list[float], rnd) -> None:
    shuffled = list(data)
    rnd.shuffle(shuffled)
    assert stats.percentile(shuffled, 50) == stats.percentile(data, 50)
    assert stats.percentile(data, 0) == min(data)
    assert stats.percentile(data, 100) == max(data)


def test_percentile_known_values_and_bad_input() -> None:
    assert stats.percentile([1, 2, 3, 4], 50) == 2.5
    assert stats.percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    for bad, q in (([], 50), ([1.0], 101), ([1.0, math.nan], 50)):
        with pytest.raises(ValueError):
            stats.percentile(bad, q)


@dataclass
class Rec:
    ok: bool = True
    error_kind: str | None = None
    ttft: float | None = 0.1
    itl: list[float] = field(default_factory=lambda: [0.01, 0.02])
    e2e: float | None = 1.0
    prompt_tokens: int | None = 100
    completion_tokens: int | None = 3
    cached_tokens: int | None = 0

    @property
    def tpot(self) -> float | None:
        if self.e2e is None or self.ttft is None or not self.completion_tokens or (
                self.completion_tokens < 2):
            return None
        return (self.e2e - self.ttft) / (self.completion_tokens - 1)


def test_failed_requests_never_skew_latency_and_are_counted_by_class() -> None:
    good = [Rec(e2e=1.0), Rec(e2e=2.0)]
    # a failed request carrying (bogus) huge timings must not move any latency figure
    bad = [Rec(ok=False, error_kind="timeout", ttft=99.0, e2e=99.0, itl=[50.0]),
           Rec(ok=False, error_kind="http-5xx", ttft=None, e2e=0.001),
           Rec(ok=False, error_kind="http-4xx")]
    s = stats.summarize(good + bad, elapsed=2.0)
    assert s["requests"] == 5 and s["ok"] == 2 and s["errors"] == 3
    assert s["error_rate"] == pytest.approx(0.6)
    assert s["errors_by_kind"] == {"http-4xx": 1, "http-5xx": 1, "timeout": 1,
                                   "connection": 0, "protocol": 0}
    assert s["e2e"]["max"] == 2.0 and s["e2e"]["min"] == 1.0
    assert s["ttft"]["max"] == 0.1
    assert s["itl"]["max"] == 0.02 and s["itl"]["count"] == 4
    assert s["prompt_tokens"] == 200 and s["completion_tokens"] == 6
    assert s["request_throughput"] == 1.0
    assert s["output_throughput"] == 3.0
    assert s["tpot"]["p50"] == pytest.approx((1.5 - 0.1) / 2)


def test_summary_of_only_failures_has_no_latency() -> None:
    s = stats.summarize([Rec(ok=False, error_kind="connection")], elapsed=1.0)
    assert s["ttft"] is None and s["e2e"] is None and s["itl"] is None
    assert s["error_rate"] == 1.0 and s["request_throughput"] == 0.0
    assert stats.metric(s, "ttft_p99") is None
    assert stats.metric(s, "error_rate") == 1.0


def test_metric_lookup() -> None:
    s = stats.summarize([Rec(e2e=1.0), Rec(e2e=3.0)], elapsed=1.0)
    assert stats.metric(s, "e2e_p50") == 2.0
    assert stats.metric(s, "e2e_mean") == 2.0
    assert stats.metric(s, "request_throughput") == 2.0
    assert stats.metric(s, "nonsense_p99") is None


def test_goodput_counts_only_ok_requests_within_limits() -> None:
    recs = [Rec(ttft=0.1, e2e=1.0), Rec(ttft=0.5, e2e=1.0), Rec(ok=False, error_kind="timeout")]
    g = stats.goodput(recs, elapsed=2.0, ttft=0.2)
    assert g == {"good": 1.0, "goodput": 0.5, "ratio": pytest.approx(1 / 3)}
    assert stats.goodput(recs, elapsed=2.0)["good"] == 2.0


def test_concurrency_time_weighted_mean_and_max() -> None:
    spans = [(0.0, 2.0), (0.0, 1.0), (1.0, 2.0), (2.0, 4.0)]
    c = stats.concurrency(spans, elapsed=4.0)
    assert c["mean"] == pytest.approx((2 + 1 + 1 + 2) / 4)
    assert c["max"] == 2.0  # an end and a start at the same instant do not overlap
    assert stats.concurrency([], 1.0) == {"mean": 0.0, "max": 0.0}


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10)), min_size=1, max_size=50))
def test_concurrency_max_bounds(raw: list[tuple[float, float]]) -> None:
    spans = [(s, s + d) for s, d in raw]
    c = stats.concurrency(spans, elapsed=200.0)
    assert 0 <= c["max"] <= len(spans)
    assert c["mean"] <= c["max"] + 1e-9
