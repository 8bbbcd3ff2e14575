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
from array import array
from bisect import bisect_right
from typing import Any, Iterable, Mapping, Protocol, Sequence

from .store import FloatColumn

#: the percentiles every latency summary reports
PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)

#: error classes (same as ``client.ERROR_KINDS``; repeated so this module imports no httpx)
ERROR_KINDS: tuple[str, ...] = ("http-4xx", "http-5xx", "timeout", "connection", "protocol")
#: the kind of a request the harness cut at the run's time bound while it was no older than
#: the longest that completed (``runner.cut_record``): counted apart, neither sent nor failed
CUT = "cut"


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
    return _interpolate(data[lo], data[hi], pos - lo)


def _interpolate(low: float, high: float, frac: float) -> float:
    """The value ``frac`` of the way from ``low`` to ``high`` (the two closest ranks)."""
    if frac == 0.0 or low == high:
        return float(low)
    value = low + (high - low) * frac
    # guard against rounding just outside the bracketing pair
    return float(min(max(value, low), high))


def distribution(values: Iterable[float],
                 percentiles: Sequence[float] = PERCENTILES) -> dict[str, float] | None:
    """``{"p50", "p90", "p99", "mean", "min", "max", "count"}`` of ``values``; None if empty.

    A packed ``array('d')`` of more than :data:`SELECT_ABOVE` values (a soak's pooled ITL)
    is not copied into a sorted list (~40 bytes a value), nor is a :class:`~.store.FloatColumn`
    spilled to disk read back whole: :func:`order_statistics` finds the same figures in
    passes. A column still in memory is its packed array.
    """
    if isinstance(values, FloatColumn):
        if values.spilled:
            return _selected(values, percentiles)
        values = values.values
    if isinstance(values, array) and len(values) > SELECT_ABOVE:
        return _selected(values, percentiles)
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return None
    out: dict[str, float] = {f"p{_fmt(q)}": _sorted_percentile(data, q) for q in percentiles}
    out["mean"] = math.fsum(data) / len(data)
    out["min"] = float(data[0])
    out["max"] = float(data[-1])
    out["count"] = float(len(data))
    return out


#: above this many values, a packed ``array('d')`` (a soak's pooled ITL) is not sorted:
#: :func:`order_statistics` finds the same percentiles holding at most ``_KEEP`` floats
SELECT_ABOVE = 1_000_000
_BUCKETS = 4096
_KEEP = 65_536
_LEVELS = 12


def order_statistics(data: Iterable[float], ranks: Iterable[int]) -> dict[int, float]:
    """The ``k``-th smallest value (0-based; NaN left out) of ``data`` for each ``k`` in
    ``ranks``, without sorting ``data``: exact, holding at most ~``_KEEP`` floats a window.
    ``data`` is read in passes, so it must be re-iterable (a sequence, a
    :class:`~.store.FloatColumn` on disk), not an iterator.

    A window of values (first: all of them) is counted into :data:`_BUCKETS` buckets by
    ``int((v - lo) * scale)``, which never puts a larger value into a lower bucket, so a
    rank's value is in the bucket where the counts pass it. A bucket of at most ``_KEEP``
    values is sorted; a larger one becomes the next window (its own min..max holds exactly
    its values). A window of equal values is its own answer."""
    n, lo, hi = 0, math.inf, -math.inf
    for v in data:
        if v == v:
            n += 1
            lo, hi = (v if v < lo else lo), (v if v > hi else hi)
    wanted = sorted({k for k in ranks if 0 <= k < n})
    out: dict[int, float] = {}
    todo: list[tuple[float, float, int, list[int], int]] = [(lo, hi, 0, wanted, 0)]
    while todo:
        lo, hi, below, want, level = todo.pop()
        if not want:
            continue
        if lo == hi:
            out.update((k, float(lo)) for k in want)
            continue
        scale = (_BUCKETS - 1) / (hi - lo) if math.isfinite(hi - lo) else 0.0
        if scale == 0.0 or not math.isfinite(scale) or level >= _LEVELS:
            window = sorted(v for v in data if lo <= v <= hi)  # rare: no finite span
            out.update((k, float(window[k - below])) for k in want)
            continue
        counts = [0] * _BUCKETS
        for v in data:
            if lo <= v <= hi:
                counts[int((v - lo) * scale)] += 1
        starts, total = [], below
        for c in counts:
            starts.append(total)
            total += c
        by_bucket: dict[int, list[int]] = {}
        for k in want:
            by_bucket.setdefault(bisect_right(starts, k) - 1, []).append(k)
        small: dict[int, list[float]] = {b: [] for b in by_bucket if counts[b] <= _KEEP}
        big = {b: [math.inf, -math.inf] for b in by_bucket if b not in small}
        for v in data:
            if lo <= v <= hi:
                b = int((v - lo) * scale)
                if b in small:
                    small[b].append(v)
                elif b in big:
                    edge = big[b]
                    if v < edge[0]:
                        edge[0] = v
                    if v > edge[1]:
                        edge[1] = v
        for b, values in small.items():
            values.sort()
            out.update((k, float(values[k - starts[b]])) for k in by_bucket[b])
        for b, (blo, bhi) in big.items():
            todo.append((blo, bhi, starts[b], by_bucket[b], level + 1))
    return out


def _selected(data: Iterable[float], percentiles: Sequence[float]) -> dict[str, float] | None:
    """:func:`distribution` of a packed array without a sorted copy (the same figures)."""
    n = sum(1 for v in data if v == v)
    if n == 0:
        return None
    positions = {q: (n - 1) * q / 100.0 for q in percentiles}
    ranks = {r for pos in positions.values()
             for r in (math.floor(pos), min(math.floor(pos) + 1, n - 1))}
    found = order_statistics(data, ranks | {0, n - 1})
    out: dict[str, float] = {}
    for q, pos in positions.items():
        a = math.floor(pos)
        out[f"p{_fmt(q)}"] = _interpolate(found[a], found[min(a + 1, n - 1)], pos - a)
    out["mean"] = math.fsum(v for v in data if v == v) / n
    out["min"], out["max"], out["count"] = found[0], found[n - 1], float(n)
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


def summarize(records: Iterable[Record], elapsed: float) -> dict[str, Any]:
    """Summary of one run: counts, error classes, latency distributions and throughput.

    Requests cut at the time bound (:data:`CUT`) are counted in ``cut`` only, outside
    ``requests`` and ``errors``. Latency figures (``ttft``, ``itl``, ``tpot``, ``e2e``;
    seconds) come from successful requests only; ITL pools every inter-token gap of every successful stream. When the
    streams arrived in one burst (a buffering proxy, :mod:`.buffering`), ``ttft``, ``itl``
    and ``tpot`` are None and ``latency_unreliable`` says why (e2e stays measured).

    One pass over ``records`` (a list, or a :class:`~.store.RecordStore` read frame by
    frame): each figure's values go to a :class:`~.store.FloatColumn` (packed, spilled to
    disk past ``MEMORY_FLOATS``), so a soak's summary holds no list of its records and the
    figures are the exact ones of every value.
    """
    from . import buffering

    n = n_ok = prompt = completion = cached = streams = bursts = cut = 0
    errors = dict.fromkeys(ERROR_KINDS, 0)
    ttft, gaps, tpot, e2e = FloatColumn(), FloatColumn(), FloatColumn(), FloatColumn()
    try:
        for r in records:
            if r.error_kind == CUT:  # the harness ended it at the time bound: not sent
                cut += 1
                continue
            n += 1
            if not r.ok:
                kind = r.error_kind or "protocol"
                errors[kind] = errors.get(kind, 0) + 1
                continue
            n_ok += 1
            verdict = buffering.is_burst(r)
            if verdict is not None:
                streams += 1
                bursts += verdict
            if r.ttft is not None:
                ttft.append(r.ttft)
            gaps.extend(r.itl)
            t = r.tpot
            if t is not None:
                tpot.append(t)
            if r.e2e is not None:
                e2e.append(r.e2e)
            prompt += r.prompt_tokens or 0
            completion += r.completion_tokens or 0
            cached += r.cached_tokens or 0
        burst = buffering.verdict(streams, bursts)
        unreliable = burst["unreliable"]
        rate = (lambda x: x / elapsed) if elapsed > 0 else (lambda x: 0.0)
        return {
            "requests": n,
            "ok": n_ok,
            "errors": n - n_ok,
            "error_rate": (n - n_ok) / n if n else 0.0,
            "errors_by_kind": errors,
            "cut": cut,
            "elapsed": elapsed,
            "ttft": None if unreliable else distribution(ttft),
            "itl": None if unreliable else distribution(gaps),
            "tpot": None if unreliable else distribution(tpot),
            "latency_unreliable": unreliable,
            "buffered_streams": {"streams": burst["streams"], "bursts": burst["bursts"]},
            "e2e": distribution(e2e),
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "cached_tokens": cached,
            "request_throughput": rate(n_ok),
            "output_throughput": rate(completion),
            "total_token_throughput": rate(prompt + completion),
        }
    finally:
        for column in (ttft, gaps, tpot, e2e):
            column.close()


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


class InFlight:
    """:func:`concurrency` of a run measured as it goes, holding no interval: fed each
    request's start and end in time order (the runner's ``perf_counter`` readings in
    program order), it gives the very figures :func:`concurrency` gives of the intervals.

    The busy time is summed exactly (Shewchuk's partials, the algorithm of
    ``math.fsum``, whose correctly rounded result is then ``math.fsum`` of the partials:
    the same float as ``math.fsum`` of every duration); the peak treats events at one
    instant as :func:`concurrency` sorts them (ends before starts)."""

    __slots__ = ("intervals", "_partials", "_cur", "_peak", "_at", "_starts", "_ends")

    def __init__(self) -> None:
        self.intervals = 0  #: ended requests
        self._partials: list[float] = []
        self._cur = self._peak = self._starts = self._ends = 0
        self._at: float | None = None

    def _instant(self, t: float) -> None:
        if t != self._at:  # close the events of the previous instant
            self._cur -= self._ends
            self._cur += self._starts
            self._peak = max(self._peak, self._cur)
            self._starts = self._ends = 0
            self._at = t

    def start(self, t: float) -> None:
        """A request started at ``t`` (never earlier than the last event)."""
        self._instant(t)
        self._starts += 1

    def end(self, t: float, started: float) -> None:
        """The request started at ``started`` ended at ``t``."""
        self._instant(max(started, t))
        self._ends += 1
        self.intervals += 1
        x, i, partials = max(0.0, t - started), 0, self._partials
        for y in partials:  # math.fsum's partials (exact running sum)
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]

    def result(self, elapsed: float) -> dict[str, float]:
        """``concurrency(intervals, elapsed)`` of what was fed."""
        if not self.intervals or elapsed <= 0:
            return {"mean": 0.0, "max": 0.0}
        self._instant(math.nan)  # closes the last instant (NaN equals no time)
        self._at = None
        return {"mean": math.fsum(self._partials) / elapsed, "max": float(self._peak)}
