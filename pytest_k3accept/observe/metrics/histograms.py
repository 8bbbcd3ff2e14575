"""Quantiles from Prometheus histogram buckets, computed as PromQL's ``histogram_quantile``.

vLLM exports latencies (``vllm:time_to_first_token_seconds``, ...) as classic histograms:
cumulative ``_bucket`` counters per upper bound ``le``. A quantile of the observations over
an interval comes from the buckets' increases (merged over engines by adding the counts of
the same ``le``), interpolated linearly inside the bucket the rank falls in, exactly as
Prometheus does it (``promql/quantile.go``: ``bucketQuantile``): the lowest bucket starts at
0 (unless its bound is <= 0), a rank in the ``+Inf`` bucket gives the highest finite bound,
counts are made monotonic first. So a figure read from ``/metrics`` and the one PromQL gives
for the same buckets are the same number.
"""

from __future__ import annotations

import math
from typing import Mapping


def bucket_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The ``q`` quantile (0..1) of cumulative bucket counts ``{upper bound: count}``; None
    when it is not defined (no ``+Inf`` bucket, fewer than two buckets, no observation, or
    ``q`` outside 0..1 or NaN)."""
    if math.isnan(q) or not 0.0 <= q <= 1.0:
        return None
    rows = sorted((le, 0.0 if math.isnan(n) else n) for le, n in buckets.items()
                  if not math.isnan(le))
    if len(rows) < 2 or not math.isinf(rows[-1][0]):
        return None
    bounds = [le for le, _ in rows]
    counts: list[float] = []
    for _, n in rows:  # cumulative counts never fall (PromQL's ensureMonotonic)
        counts.append(max(n, counts[-1]) if counts else n)
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    b = next((i for i in range(len(rows) - 1) if counts[i] >= rank), len(rows) - 1)
    if b == len(rows) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count <= 0:  # q = 0 over an empty lowest bucket: PromQL's 0/0, NaN
        return None
    return start + (end - start) * (rank / count)
