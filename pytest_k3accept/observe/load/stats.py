"""Statistics of a load run: percentiles and per-run summaries (pure functions).

Percentiles use linear interpolation between closest ranks (numpy's default ``linear``
method), so p0 is the minimum, p100 the maximum and every percentile lies between them.
Summaries keep failed requests out of every latency figure: errors are counted by class
(``http-4xx``, ``http-5xx``, ``timeout``, ``connection``, ``protocol``) and only successful
requests contribute TTFT, ITL, TPOT and e2e values. Token counts come from the server's
``usage`` (never from counting stream chunks).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Protocol, Sequence

#: the percentiles every latency summary reports
PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)

#: error classes (same as ``client.ERROR_KINDS``; repeated so this module imports no httpx)
ERROR_KINDS: tuple[str, ...] = ("http-4xx", "http-5xx", "timeout", "connection", "protocol")


class Record(Protocol):
    """What a summary reads from one request (``client.RequestResult`` satisfies it)."""

    ok: bool
    error_kind: str | None
    ttft: float | None
    e2e: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None

    @property
    def itl(self) -> Sequence[float]:
        """The gaps between content chunks (a list, or the packed ``array('d')`` of a
        :class:`~.result.RunRecord`)."""

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first."""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` by linear interpolation.

    Raises ``ValueError`` for an empty sequence, a NaN value or ``q`` outside [0, 100].
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    if any(math.isnan(v) for v in values):
        raise ValueError("percentile of a sequence containing NaN")
    return _sorted_percentile(sorted(values), q)


def _sorted_percentile(data: Sequence[float], q: float) -> float:
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    frac = pos - lo
    if frac == 0.0 or data[lo] == data[hi]:
        return float(data[lo])
    value = data[lo] + (data[hi] - data[lo]) * frac
    # guard against rounding just outside the bracketing pair
    return float(min(max(value, data[lo]), data[hi]))


def distribution(values: Iterable[float],
                 percentiles: Sequence[float] = PERCENTILES) -> dict[str, float] | None:
    """``{"p50", "p90", "p99", "mean", "min", "max", "count"}`` of ``values``; None if empty."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return None
    out: dict[str, float] = {f"p{_fmt(q)}": _sorted_percentile(data, q) for q in percentiles}
    out["mean"] = math.fsum(data) / len(data)
    out["min"] = float(data[0])
    out["max"] = float(data[-1])
    out["count"] = float(len(data))
    return out


def _fmt(q: float) -> str:
    return str(int(q)) if float(q).is_integer() else str(q).replace(".", "_")


def error_counts(records: Iterable[Record]) -> dict[str, int]:
    """Failed requests by class; every class is present (0 when none)."""
    counts = dict.fromkeys(ERROR_KINDS, 0)
    for r in records:
        if not r.ok:
            kind = r.error_kind or "protocol"
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def is_good(r: Record, *, ttft: float | None = None, tpot: float | None = None,
            e2e: float | None = None) -> bool:
    """True when ``r`` succeeded and meets every given per-request limit (seconds)."""
    if not r.ok:
        return False
    for limit, value in ((ttft, r.ttft), (tpot, r.tpot), (e2e, r.e2e)):
        if limit is not None and (value is None or value > limit):
            return False
    return True


def goodput(records: Sequence[Record], elapsed: float, *, ttft: float | None = None,
            tpot: float | None = None, e2e: float | None = None) -> dict[str, float]:
    """Requests per second that succeeded within the per-request limits, and their share."""
    good = sum(1 for r in records if is_good(r, ttft=ttft, tpot=tpot, e2e=e2e))
    return {"good": float(good),
            "goodput": good / elapsed if elapsed > 0 else 0.0,
            "ratio": good / len(records) if records else 0.0}


def summarize(records: Sequence[Record], elapsed: float) -> dict[str, Any]:
    """Summary of one run: counts, error classes, latency distributions and throughput.

    Latency figures (``ttft``, ``itl``, ``tpot``, ``e2e``; seconds) come from successful
    requests only; ITL pools every inter-token gap of every successful stream. When the
    streams arrived in one burst (a buffering proxy, :mod:`.buffering`), ``ttft``, ``itl``
    and ``tpot`` are None and ``latency_unreliable`` says why (e2e stays measured).
    """
    from . import buffering

    ok = [r for r in records if r.ok]
    burst = buffering.judge(ok)
    unreliable = burst["unreliable"]
    n_ok = len(ok)
    itl_total = sum(len(r.itl) for r in ok)
    gaps: list[float] = [0.0] * itl_total
    i = 0
    for r in ok:
        k = len(r.itl)
        gaps[i:i + k] = r.itl
        i += k
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    completion = sum(r.completion_tokens or 0 for r in ok)
    cached = sum(r.cached_tokens or 0 for r in ok)
    rate = (lambda x: x / elapsed) if elapsed > 0 else (lambda x: 0.0)
    return {
        "requests": len(records),
        "ok": n_ok,
        "errors": len(records) - n_ok,
        "error_rate": (len(records) - n_ok) / len(records) if records else 0.0,
        "errors_by_kind": error_counts(records),
        "elapsed": elapsed,
        "ttft": None if unreliable else distribution(r.ttft for r in ok if r.ttft is not None),
        "itl": None if unreliable else distribution(gaps),
        "tpot": None if unreliable else distribution(
            t for t in (r.tpot for r in ok) if t is not None),
        "latency_unreliable": unreliable,
        "buffered_streams": {"streams": burst["streams"], "bursts": burst["bursts"]},
        "e2e": distribution(r.e2e for r in ok if r.e2e is not None),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": cached,
        "request_throughput": rate(n_ok),
        "output_throughput": rate(completion),
        "total_token_throughput": rate(prompt + completion),
    }


def metric(summary: Mapping[str, Any], name: str) -> float | None:
    """Look up ``"ttft_p99"``, ``"e2e_mean"``, ``"error_rate"`` ... in a summary."""
    if name in summary and not isinstance(summary[name], Mapping):
        value = summary[name]
        return None if value is None else float(value)
    head, _, tail = name.partition("_")
    dist = summary.get(head)
    if isinstance(dist, Mapping) and tail in dist:
        return float(dist[tail])
    return None


def concurrency(intervals: Sequence[tuple[float, float]], elapsed: float) -> dict[str, float]:
    """Achieved concurrency from (start, end) times: time-weighted mean and maximum in flight."""
    if not intervals or elapsed <= 0:
        return {"mean": 0.0, "max": 0.0}
    busy = math.fsum(max(0.0, e - s) for s, e in intervals)
    events: list[tuple[float, int]] = []
    for s, e in intervals:
        events.append((s, 1))
        events.append((max(s, e), -1))
    events.sort(key=lambda ev: (ev[0], ev[1]))  # ends before starts at the same instant
    cur = peak = 0
    for _, step in events:
        cur += step
        peak = max(peak, cur)
    return {"mean": busy / elapsed, "max": float(peak)}
