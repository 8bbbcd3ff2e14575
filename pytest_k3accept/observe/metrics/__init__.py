"""``/metrics`` snapshots and deltas of a vLLM server (prometheus_client's parsers).

A :class:`Snapshot` is an immutable map of samples; ``later - earlier`` gives a :class:`Delta`
for counters. Typed accessors cover what acceptance decisions need: prefix-cache hit rate,
KV-cache usage, preemptions, running/waiting requests, successes by finish reason, histogram
sums/counts, and the live cache config from ``vllm:cache_config_info``. A server that exposes
no vLLM engine statistics (``--disable-log-stats``, or not vLLM at all) yields
:class:`MetricsUnavailable` with a message saying so. vLLM 0.32 started with
``--disable-log-stats`` still exposes a few ``vllm:`` series (tool-parser counters), so the
test is for the engine's own series (:data:`ENGINE_SERIES`), not for any ``vllm:`` name.

**Engines.** With ``--data-parallel-size N`` every ``vllm:`` family has one series per engine
(label ``engine="0"`` .. ``"N-1"``; seen on the real testbed, ``tests/data/metrics/``).
Counters and histograms are summed over engines (tokens, preemptions and observations add
up); gauges are kept per engine (:meth:`Snapshot.engine_gauges`) and folded by
:data:`GAUGE_FOLD`: KV-cache usage is the *worst* engine's (a fraction: 2 engines at 73 % are
not 146 % full), running/waiting requests are the server's totals (counts add up). The
Prometheus path (:meth:`Snapshot.from_samples`, fed by PromQL) uses the same accessors, so
both paths give the same figures for the same server. Quantiles of a histogram over an
interval (:meth:`Delta.histogram_quantile`, e.g. TTFT p99) come from the buckets merged over
engines, interpolated as PromQL's ``histogram_quantile`` (:mod:`.histograms`).

**Releases.** Older names are read as the current ones (:data:`RENAMED`), only when the
current family is absent (releases that export both must not count twice); ``aliased`` says
which were used. A family that is not exported at all is *unknown*: the counter accessors of
:class:`Delta` return None for it (never 0) and :meth:`Snapshot.missing` names it.

**OpenMetrics.** A page served as ``application/openmetrics-text`` (or ending ``# EOF``) is
read with prometheus_client's OpenMetrics parser. vLLM 0.32 answers ``GET /metrics/`` with
``Accept: application/openmetrics-text`` with ``escaping=underscores``: ``# TYPE
vllm:prompt_tokens counter`` over samples ``vllm_prompt_tokens_total``, which that parser
rejects ("Clashing name"); names are therefore escaped alike before parsing and ``vllm_``
read back as ``vllm:`` after it. Counters with and without ``_total`` both read as
``..._total``; exemplars are ignored; a page without ``# EOF`` is refused by name.

The page is untrusted: it is read up to :data:`MAX_METRICS_BODY` bytes, infinities and NaN
become NaN (ignored by sums), negative counters are ignored and a non-finite increase counts
as nothing, so absurd numbers cannot crash a decision or turn into a verdict.
"""

from __future__ import annotations

from .exposition import (ENGINE_LABEL, ENGINE_SERIES, EXPECTED_TYPES, RENAMED, Labels,
                         Sample, engine_key, is_openmetrics, number, target)
from .gauges import GAUGE_FOLD, GAUGES, fold_gauges, scan_engine_gauges, scan_gauges
from .histograms import bucket_quantile
from .scrape import MAX_METRICS_BODY, MetricsScraper, MetricsUnavailable
from .snapshot import RECORDED, Delta, Snapshot, not_exported, parse_many

__all__ = ["Delta", "ENGINE_LABEL", "ENGINE_SERIES", "EXPECTED_TYPES", "GAUGES",
           "GAUGE_FOLD", "Labels", "MAX_METRICS_BODY", "MetricsScraper",
           "MetricsUnavailable", "RECORDED", "RENAMED", "Sample", "Snapshot",
           "bucket_quantile", "engine_key", "fold_gauges", "is_openmetrics", "not_exported",
           "number", "parse_many", "scan_engine_gauges", "scan_gauges", "target"]
