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
both paths give the same figures for the same server.

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

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Mapping[str, str], float]

#: series only vLLM's engine statistics produce (absent with ``--disable-log-stats``)
ENGINE_SERIES = ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:num_preemptions_total")
#: the most of a ``/metrics`` page that is read (vLLM's is ~100 KiB)
MAX_METRICS_BODY = 32 * 1024 * 1024

#: older family name -> current one. Checked in vLLM's source: V0 ``vllm/engine/metrics.py``
#: and the first V1 ``vllm/v1/metrics/loggers.py`` export ``vllm:gpu_cache_usage_perc`` and
#: ``vllm:time_per_output_token_seconds``; that V1 logger adds the counters
#: ``vllm:gpu_prefix_cache_queries`` / ``vllm:gpu_prefix_cache_hits`` (blocks at first, then
#: tokens). 0.11's ``loggers.py`` says "Deprecated in 0.9.2 - Renamed as
#: vllm:kv_cache_usage_perc" (likewise ``vllm:prefix_cache_queries`` / ``_hits``), "With 0.11.x
#: you can enable with --show-hidden-metrics-for-version=0.10", "TODO: remove in 0.12.0", and
#: "Deprecated in 0.11 - Renamed as vllm:inter_token_latency_seconds" (both histograms are
#: exported in 0.11). The 0.32 testbed's ``loggers.py`` has none of the old names. V0's
#: ``vllm:gpu_prefix_cache_hit_rate`` gauge (a block hit rate since start) is not a counter
#: and is not mapped.
RENAMED = {"vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
           "vllm:gpu_prefix_cache_queries": "vllm:prefix_cache_queries",
           "vllm:gpu_prefix_cache_hits": "vllm:prefix_cache_hits",
           "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds"}
_SUFFIXES = ("_total", "_created", "_bucket", "_sum", "_count", "")
#: the label that tells engines apart (see :func:`engine_key`)
ENGINE_LABEL = "engine"


class MetricsUnavailable(Exception):
    """The server has no (vLLM) metrics; features that need them are not available."""


def _finite(value: float) -> float:
    return value if math.isfinite(value) else math.nan


def _renamed(name: str) -> tuple[str, str] | None:
    """(old family, current sample name) when ``name`` is a sample of a renamed family."""
    for old, new in RENAMED.items():
        if name.startswith(old):
            suffix = name[len(old):]
            if suffix in _SUFFIXES:
                return old, new + suffix
    return None


def is_openmetrics(text: str, content_type: str | None = None) -> bool:
    """True for an OpenMetrics page: so declared, or ending with ``# EOF``."""
    if content_type and "openmetrics" in content_type.lower():
        return True
    return text[-256:].rstrip().endswith("# EOF")


def _escape_openmetrics(text: str) -> str:
    """The page with metric names underscore-escaped alike in metadata and samples (see the
    module docstring), counter families named without ``_total`` and their samples with it;
    HELP/UNIT lines (not read) are dropped, and so is a family's second block: vLLM 0.32 with
    ``--api-server-count 2`` exports ``http_request_duration_highr_seconds`` twice (the
    multiprocess collector's and the process' own), which the parser rejects ("Clashing
    name")."""
    out: list[str] = []
    family, kind = "", ""
    seen: set[str] = set()
    repeated = False
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) >= 4:
                family, kind = parts[2].replace(":", "_"), parts[3]
                if kind == "counter" and family.endswith("_total"):
                    family = family[:-len("_total")]
                repeated = family in seen
                seen.add(family)
                line = f"# TYPE {family} {kind}"
            if repeated:
                continue
        elif line.startswith(("# HELP ", "# UNIT ")) or (repeated and line != "# EOF"):
            continue
        elif line and not line.startswith("#"):
            cut = next((i for i, c in enumerate(line) if c in "{ "), len(line))
            name = line[:cut].replace(":", "_")
            if kind == "counter" and name == family:
                name += "_total"
            line = name + line[cut:]
        out.append(line)
    return "\n".join(out) + "\n"


#: the type each family the decisions read must have; a page declaring another type makes
#: that family unknown (``Snapshot.problems`` says why), never a figure read as something else
EXPECTED_TYPES = {**{g: "gauge" for g in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                                          "vllm:num_requests_waiting")},
                  **{c: "counter" for c in ("vllm:prompt_tokens", "vllm:generation_tokens",
                                            "vllm:num_preemptions", "vllm:prefix_cache_queries",
                                            "vllm:prefix_cache_hits", "vllm:request_success")}}
_ANY_TYPE = ("unknown", "untyped")


def _wrong_type(family: str, kind: str, problems: dict[str, str]) -> bool:
    """True (and the reason noted) when a family the decisions read has the wrong type."""
    name = "vllm:" + family[5:] if family.startswith("vllm_") else family
    name = name[:-len("_total")] if name.endswith("_total") else name
    want = EXPECTED_TYPES.get(RENAMED.get(name, name))
    if want is None or kind == want or kind in _ANY_TYPE:
        return False
    problems[name] = f"declared a {kind}, expected a {want}: not read (unknown)"
    return True


def _families(text: str, openmetrics: bool, problems: dict[str, str]) -> Iterable[Sample]:
    if not openmetrics:
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(text):
            if _wrong_type(family.name, family.type, problems):
                continue
            for s in family.samples:
                yield s.name, s.labels, float(s.value)
        return
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om

    if not is_openmetrics(text):
        raise ValueError("OpenMetrics page without the closing '# EOF' line (cut short?)")
    for family in om(_escape_openmetrics(text)):
        if _wrong_type(family.name, family.type, problems):
            continue
        for s in family.samples:
            name = "vllm:" + s.name[5:] if s.name.startswith("vllm_") else s.name
            yield name, s.labels, float(s.value)


@dataclass(frozen=True)
class Snapshot:
    """Samples of one scrape: ``{(sample_name, labels): value}`` plus the scrape time.

    ``aliased`` maps each older family name read as a current one (:data:`RENAMED`) to it;
    ``openmetrics`` says which exposition format the page had; ``problems`` names families
    that were not read as they came (declared with the wrong type, or a series repeated: the
    highest value of a repeated series is kept).
    """

    samples: Mapping[tuple[str, Labels], float]
    at: float = field(default_factory=time.time)
    aliased: Mapping[str, str] = field(default_factory=dict)
    openmetrics: bool = False
    problems: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, at: float | None = None,
              content_type: str | None = None) -> "Snapshot":
        """Parse Prometheus text or OpenMetrics exposition (``content_type`` or a final
        ``# EOF`` selects OpenMetrics); raises ``ValueError`` on malformed text."""
        om = is_openmetrics(text, content_type)
        problems: dict[str, str] = {}
        try:
            return cls.from_samples(list(_families(text, om, problems)), at, openmetrics=om,
                                    problems=problems)
        except (TypeError, IndexError, KeyError, AttributeError, OverflowError) as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None

    @classmethod
    def from_samples(cls, samples: Iterable[Sample], at: float | None = None, *,
                     openmetrics: bool = False,
                     problems: Mapping[str, str] | None = None) -> "Snapshot":
        """A snapshot of ``(sample name, labels, value)`` triples (a parsed page, or the
        series of a PromQL answer), older names read as current ones."""
        rows = [(name, tuple(sorted(labels.items())), _finite(float(value)))
                for name, labels, value in samples]
        names = {name for name, _, _ in rows}
        present = {fam for fam in RENAMED.values()
                   if any(fam + suffix in names for suffix in _SUFFIXES)}
        aliased: dict[str, str] = {}
        said = dict(problems or {})
        out: dict[tuple[str, Labels], float] = {}
        for name, labels, value in rows:
            old = _renamed(name)
            if old is not None:
                family, name = old
                if RENAMED[family] in present:
                    continue  # the server exports the current family too: read only that
                aliased[family] = RENAMED[family]
            key = (name, labels)
            if key in out:  # the same series twice: keep the highest, and say so
                said.setdefault(re.sub(r"_(total|sum|count|bucket)$", "", name),
                                "a series repeated on the page: its highest value read")
                value = value if math.isnan(out[key]) else max(out[key], value)
            out[key] = value
        return cls(out, time.time() if at is None else at, aliased, openmetrics, said)

    @property
    def has_vllm(self) -> bool:
        """True when vLLM's engine statistics are present (any of :data:`ENGINE_SERIES`)."""
        return any(name in ENGINE_SERIES for name, _ in self.samples)

    def has(self, name: str) -> bool:
        """True when the page has a sample called ``name``."""
        return any(sname == name for sname, _ in self.samples)

    def missing(self, names: Iterable[str]) -> list[str]:
        """The families among ``names`` (sample names) this server does not export."""
        return [n for n in names if not self.has(n)]

    def series(self, name: str, **match: str) -> list[tuple[dict[str, str], float]]:
        """All samples called ``name`` whose labels include ``match``."""
        out = []
        for (sname, labels), value in self.samples.items():
            if sname != name:
                continue
            ld = dict(labels)
            if all(ld.get(k) == v for k, v in match.items()):
                out.append((ld, value))
        return out

    def value(self, name: str, default: float | None = None, **match: str) -> float | None:
        """Sum of the matching series, or ``default`` when none exists."""
        found = [v for _, v in self.series(name, **match) if not math.isnan(v)]
        return sum(found) if found else default

    def per_engine(self, name: str, **match: str) -> dict[str, float]:
        """A gauge per engine: ``{engine key: value}`` (:func:`engine_key`; NaN left out).
        Several series of one engine (the same target scraped twice) count once (max)."""
        found = self.series(name, **match)
        many = len({target(lbl) for lbl, _ in found}) > 1
        out: dict[str, float] = {}
        for labels, value in found:
            if not math.isnan(value):
                key = engine_key(labels, many)
                out[key] = max(out.get(key, value), value)
        return out

    def engine_gauges(self) -> dict[str, dict[str, float]]:
        """:data:`GAUGES` per engine: ``{"kv": {"0": 0.95, "1": 0.86}, "running": ...}``."""
        return {key: per for name, key in GAUGES.items() if (per := self.per_engine(name))}

    def gauges(self) -> dict[str, float]:
        """:data:`GAUGES` folded over engines by :data:`GAUGE_FOLD` (KV: the worst engine)."""
        return fold_gauges(self.engine_gauges())

    def __sub__(self, earlier: "Snapshot") -> "Delta":
        return Delta(earlier, self)

    # -- typed accessors (gauges and config) -------------------------------------------
    def kv_cache_usage(self) -> float | None:
        """``vllm:kv_cache_usage_perc`` of the fullest engine (1.0 = full), or None."""
        return self.gauges().get("kv")

    def kv_cache_usage_per_engine(self) -> dict[str, float]:
        """``vllm:kv_cache_usage_perc`` per engine."""
        return self.per_engine("vllm:kv_cache_usage_perc")

    def running(self) -> float | None:
        """Requests running now (all engines)."""
        return self.gauges().get("running")

    def waiting(self) -> float | None:
        """Requests queued now (all engines)."""
        return self.gauges().get("waiting")

    def cache_config(self) -> dict[str, str]:
        """Labels of ``vllm:cache_config_info`` (live cache configuration), or ``{}``."""
        found = self.series("vllm:cache_config_info")
        if not found:
            return {}
        labels = dict(found[0][0])
        labels.pop("model_name", None)
        labels.pop("engine", None)
        return labels

    def prefix_caching_enabled(self) -> bool | None:
        """The live ``enable_prefix_caching`` flag, if the server reports its config."""
        flag = self.cache_config().get("enable_prefix_caching")
        return None if flag is None else flag.strip().lower() == "true"


def target(labels: Mapping[str, str]) -> str:
    """The scrape target a series came from through Prometheus (``job@instance``), ``""``
    for a page read directly."""
    job, instance = labels.get("job", ""), labels.get("instance", "")
    return f"{job}@{instance}" if job or instance else ""


def engine_key(labels: Mapping[str, str], by_target: bool = False) -> str:
    """The engine a series belongs to: its ``engine`` label (``""`` without one), prefixed
    by its :func:`target` when series of several scrape targets are mixed (a Prometheus
    holding more than one server, each with its own engine "0": scope it with a selector)."""
    engine = labels.get(ENGINE_LABEL, "")
    return f"{target(labels)}/{engine}" if by_target else engine


@dataclass(frozen=True)
class Delta:
    """Counter increases between two snapshots of the same server."""

    earlier: Snapshot
    later: Snapshot

    @property
    def seconds(self) -> float:
        return self.later.at - self.earlier.at

    def increase(self, name: str, **match: str) -> float:
        """Increase of a counter (summed over matching series, so over engines; a reset
        counts from 0); 0 when the counter does not exist (see :meth:`known`)."""
        total = 0.0
        before = {tuple(sorted(lbl.items())): v for lbl, v in self.earlier.series(name, **match)}
        for labels, value in self.later.series(name, **match):
            prev = before.get(tuple(sorted(labels.items())), 0.0)
            if math.isnan(value) or value < 0:
                continue
            prev = 0.0 if math.isnan(prev) or prev < 0 else prev
            step = value - prev if value >= prev else value
            if math.isfinite(step):
                total += step
        return total if math.isfinite(total) else math.nan

    def known(self, name: str) -> float | None:
        """:meth:`increase`, or None when the server does not export ``name`` (unknown,
        not zero)."""
        return self.increase(name) if self.later.has(name) else None

    def per_engine(self, name: str) -> dict[str, float]:
        """Increase of a counter per engine (:func:`engine_key`)."""
        labels = [lbl for lbl, _ in self.later.series(name)]
        many = len({target(lbl) for lbl in labels}) > 1
        out: dict[str, float] = {}
        for lbl in labels:
            key = engine_key(lbl, many)
            if key not in out:
                match = {k: lbl[k] for k in (ENGINE_LABEL, "job", "instance") if k in lbl}
                out[key] = self.increase(name, **match)
        return out

    def prompt_tokens(self) -> float | None:
        return self.known("vllm:prompt_tokens_total")

    def generation_tokens(self) -> float | None:
        return self.known("vllm:generation_tokens_total")

    def preemptions(self) -> float | None:
        return self.known("vllm:num_preemptions_total")

    def prefix_cache_queries(self) -> float | None:
        return self.known("vllm:prefix_cache_queries_total")

    def prefix_cache_hits(self) -> float | None:
        return self.known("vllm:prefix_cache_hits_total")

    def prefix_cache_hit_rate(self) -> float | None:
        """hits / queries over the interval (tokens), or None when nothing was queried or
        either counter is not exported."""
        queries, hits = self.prefix_cache_queries(), self.prefix_cache_hits()
        return hits / queries if queries and hits is not None else None

    def successes(self) -> dict[str, float]:
        """``vllm:request_success_total`` increase per ``finished_reason``."""
        out: dict[str, float] = {}
        for labels, _ in self.later.series("vllm:request_success_total"):
            reason = labels.get("finished_reason", "")
            if reason not in out:
                out[reason] = self.increase("vllm:request_success_total",
                                            finished_reason=reason)
        return out

    def histogram(self, name: str) -> tuple[float, float]:
        """(sum, count) increase of a histogram, e.g. ``vllm:time_to_first_token_seconds``
        (merged over engines)."""
        return self.increase(f"{name}_sum"), self.increase(f"{name}_count")

    def histogram_over(self, name: str, bound: float) -> float | None:
        """How many observations of histogram ``name`` were above ``bound`` over the delta
        (count increase minus the ``le=bound`` bucket's); None when no such bucket exists."""
        les = {lbl.get("le") for lbl, _ in self.later.series(f"{name}_bucket")}
        le = next((x for x in les if x is not None and number(x) == bound), None)
        if le is None:
            return None
        return max(0.0, self.increase(f"{name}_count") - self.increase(f"{name}_bucket", le=le))

    def histogram_mean(self, name: str) -> float | None:
        total, count = self.histogram(name)
        return total / count if count else None

    def missing(self) -> list[str]:
        """The families of :data:`RECORDED` this server does not export (unknown figures;
        one the page declares with the wrong type is in ``problems`` instead)."""
        names = [re.sub(r"_(total|sum)$", "", n) for n in self.later.missing(RECORDED)]
        return [n for n in names if n not in self.later.problems]

    def as_dict(self) -> dict[str, Any]:
        """The figures an acceptance record keeps (None: not exported, see ``missing``)."""
        queue = "vllm:request_queue_time_seconds"
        return {
            "seconds": self.seconds,
            "prompt_tokens": self.prompt_tokens(),
            "generation_tokens": self.generation_tokens(),
            "preemptions": self.preemptions(),
            "prefix_cache_queries": self.prefix_cache_queries(),
            "prefix_cache_hits": self.prefix_cache_hits(),
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate(),
            "successes": self.successes(),
            "queue_time_sum": self.known(f"{queue}_sum"),
            "ttft_mean": self.histogram_mean("vllm:time_to_first_token_seconds"),
            "e2e_mean": self.histogram_mean("vllm:e2e_request_latency_seconds"),
            "missing": self.missing(),
            "aliased": dict(self.later.aliased),
            "problems": {**self.earlier.problems, **self.later.problems},
        }


def not_exported(families: Iterable[str], version: str | None = None) -> str:
    """The sentence for figures that are unknown because the server does not export their
    families (``as_dict()["missing"]``), e.g. "vllm:prefix_cache_hits not exported by this
    server (vLLM 0.32.0): unknown, not zero"; ``""`` when none is missing."""
    names = ", ".join(families)
    if not names:
        return ""
    return (f"{names} not exported by this server (vLLM {version or 'version unknown'}): "
            "unknown, not zero")


#: the families :meth:`Delta.as_dict` records (sample names)
RECORDED = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total", "vllm:request_success_total",
            "vllm:request_queue_time_seconds_sum", "vllm:time_to_first_token_seconds_sum",
            "vllm:e2e_request_latency_seconds_sum", "vllm:inter_token_latency_seconds_sum")


def parse_many(texts: Iterable[str]) -> list[Snapshot]:
    return [Snapshot.parse(t) for t in texts]


def number(text: str | None) -> float | None:
    """A number written as text (a label value, a ``cache_config_info`` field; thousands
    separators allowed), or None when absent or not a number."""
    try:
        return None if text is None else float(text.replace(",", ""))
    except ValueError:
        return None


#: the gauges a sampler reads often, and the short names :func:`scan_gauges` gives them
GAUGES = {"vllm:kv_cache_usage_perc": "kv", "vllm:num_requests_running": "running",
          "vllm:num_requests_waiting": "waiting"}
#: how a gauge's per-engine values make the server's figure: the fullest engine's KV usage
#: (a fraction), the sum of running / waiting requests (counts)
GAUGE_FOLD: dict[str, Callable[[Iterable[float]], float]] = {
    "kv": max, "running": sum, "waiting": sum}
#: the names a line scan knows: current and older names, with ``:`` or escaped as ``_``
_SCAN = {alias: (key, name != current) for current, key in GAUGES.items()
         for name in (current, *(o for o, n in RENAMED.items() if n == current))
         for alias in (name, name.replace(":", "_"))}
_SCAN_PREFIXES = tuple(_SCAN)
_ENGINE = re.compile(r'(?:^|[{,])\s*engine="([^"]*)"')


def fold_gauges(per_engine: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``{"kv": {engine: v}, ...}`` -> ``{"kv": worst, "running": total, ...}``."""
    return {key: GAUGE_FOLD[key](values.values()) for key, values in per_engine.items()
            if values and key in GAUGE_FOLD}


def scan_engine_gauges(text: str) -> dict[str, dict[str, float]]:
    """The KV usage / running / waiting gauges (:data:`GAUGES`) per engine from a Prometheus
    text or OpenMetrics page, with a line scan (~0.1 ms for vLLM's page, ~300x cheaper than
    a full parse): ``{"kv": {"0": 0.95, "1": 0.86}, ...}``. Older names count when the
    current one is absent; non-finite values are left out, as in :meth:`Snapshot.value`."""
    current: dict[str, dict[str, float]] = {}
    older: dict[str, dict[str, float]] = {}
    wrong: set[str] = set()  # declared with another type than gauge: unknown, as in parse()
    for line in text.splitlines():
        if line.startswith("# TYPE vllm"):
            parts = line.split()
            if len(parts) >= 4 and parts[2] in _SCAN and parts[3] not in ("gauge", *_ANY_TYPE):
                wrong.add(_SCAN[parts[2]][0])
            continue
        if not line.startswith(_SCAN_PREFIXES):
            continue
        brace = line.find("{")
        name = line[:brace] if brace >= 0 else line.split(" ", 1)[0]
        found = _SCAN.get(name)
        if found is None or found[0] in wrong:
            continue
        close = line.rfind("}") if brace >= 0 else -1
        rest = line[close + 1:] if brace >= 0 else line[len(name):]
        try:
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            continue
        if not math.isfinite(value):
            continue
        match = _ENGINE.search(line[brace:close]) if brace >= 0 else None
        engine = match.group(1) if match else ""
        per = (older if found[1] else current).setdefault(found[0], {})
        per[engine] = max(per.get(engine, value), value)
    return {**older, **current}


def scan_gauges(text: str) -> dict[str, float]:
    """:func:`scan_engine_gauges` folded over engines (:data:`GAUGE_FOLD`)."""
    return fold_gauges(scan_engine_gauges(text))


class MetricsScraper:
    """Scrapes ``{base_url}/metrics``; sync and async variants share the parsing.

    Synchronous reads go through one ``httpx.Client`` kept by the scraper (made on first
    use): a new client per read builds an SSL context each time, ~30 ms of CPU that made a
    0.5 s gauge sampler cost 7 % of a core. :meth:`close` releases it (also on garbage
    collection); the scraper can be used again after it.
    """

    def __init__(self, base_url: str, *, headers: Mapping[str, str] | None = None,
                 timeout: float = 10.0) -> None:
        self.url = f"{base_url.rstrip('/')}/metrics"
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._http: Any = None

    def close(self) -> None:
        """Close the kept synchronous client, if one was made."""
        http, self._http = self._http, None
        if http is not None:
            http.close()

    def __enter__(self) -> "MetricsScraper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, status: int, text: str, content_type: str | None = None) -> Snapshot:
        if status == 404:
            raise MetricsUnavailable(f"{self.url} answered 404: not available from this "
                                     "server (not vLLM, or metrics disabled)")
        if status in (401, 403):
            raise MetricsUnavailable(f"{self.url} answered HTTP {status}: the metrics need "
                                     "an API key the plugin does not have or that was "
                                     "rejected; not available from this server with this key")
        if status != 200:
            raise MetricsUnavailable(f"{self.url} answered HTTP {status}: not available "
                                     "from this server right now (is it healthy?)")
        if len(text) > MAX_METRICS_BODY:
            raise MetricsUnavailable(f"{self.url} returned more than "
                                     f"{MAX_METRICS_BODY // 2**20} MiB; not a vLLM metrics "
                                     "page, not read")
        try:
            snap = Snapshot.parse(text, content_type=content_type)
        except ValueError as exc:
            kind = ("OpenMetrics" if is_openmetrics(text, content_type)
                    else "Prometheus exposition format")
            raise MetricsUnavailable(f"{self.url} returned text that is not {kind}: "
                                     f"{exc}") from None
        if not snap.has_vllm:
            raise MetricsUnavailable(f"{self.url} exposes no vLLM engine statistics (no vllm: "
                                     "series such as vllm:num_requests_running): not "
                                     "available from this server (started with "
                                     "--disable-log-stats, or not a vLLM server)")
        return snap

    def _fetch(self) -> tuple[int, str, str | None]:
        """Status, text and content type of one GET, read up to just past
        :data:`MAX_METRICS_BODY`."""
        http = self._http
        if http is None:
            import httpx

            http = self._http = httpx.Client(headers=self.headers, timeout=self.timeout)
        with http.stream("GET", self.url) as resp:
            raw = bytearray()  # appended in place: += on bytes copies the page each chunk
            for chunk in resp.iter_bytes():
                raw += chunk
                if len(raw) > MAX_METRICS_BODY:
                    break
        return (resp.status_code, raw.decode("utf-8", "replace"),
                resp.headers.get("content-type"))

    def scrape(self) -> Snapshot:
        """One synchronous scrape."""
        try:
            status, text, ctype = self._fetch()
        except Exception as exc:  # noqa: BLE001 - any transport failure: not available
            raise MetricsUnavailable(self._unreachable(exc)) from None
        return self._check(status, text, ctype)

    def engine_gauges(self) -> dict[str, dict[str, float]]:
        """One cheap synchronous sample of :data:`GAUGES` per engine (line scan, no full
        parse); empty when the page cannot be read or holds none of them."""
        try:
            status, text, _ = self._fetch()
        except Exception:  # noqa: BLE001 - a sample may fail under load
            return {}
        if status != 200 or len(text) > MAX_METRICS_BODY:
            return {}
        return scan_engine_gauges(text)

    def gauges(self) -> dict[str, float]:
        """:meth:`engine_gauges` folded over engines (KV usage: the fullest engine)."""
        return fold_gauges(self.engine_gauges())

    def _unreachable(self, exc: Exception) -> str:
        name = type(exc).__name__
        why = ("connection refused or host unreachable" if "ConnectError" in name
               else f"no answer within {self.timeout:g} s" if "Timeout" in name else name)
        return (f"cannot scrape {self.url}: {why}; metrics are not available (is the server "
                "still up?)")

    async def afetch(self, http: Any) -> tuple[int, str, str | None]:
        """Status, text and content type of one GET through an ``httpx.AsyncClient``, read
        up to just past :data:`MAX_METRICS_BODY` (a huge page is never held whole)."""
        raw = bytearray()
        async with http.stream("GET", self.url, headers=self.headers) as resp:
            async for chunk in resp.aiter_bytes():
                raw += chunk
                if len(raw) > MAX_METRICS_BODY:
                    break
        return (resp.status_code, raw.decode("utf-8", "replace"),
                resp.headers.get("content-type"))

    async def ascrape(self, http: Any = None) -> Snapshot:
        """One asynchronous scrape (optionally through an existing ``httpx.AsyncClient``)."""
        import httpx

        try:
            if http is None:
                async with httpx.AsyncClient(headers=self.headers, timeout=self.timeout) as c:
                    status, text, ctype = await self.afetch(c)
            else:
                status, text, ctype = await self.afetch(http)
        except Exception as exc:  # noqa: BLE001 - any transport failure: not available
            raise MetricsUnavailable(self._unreachable(exc)) from None
        return self._check(status, text, ctype)
