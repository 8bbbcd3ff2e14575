"""Snapshots of one scrape and the counter deltas between two (see the package
docstring)."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Mapping

from .exposition import (_SUFFIXES, ENGINE_LABEL, ENGINE_SERIES, RENAMED, Labels, Sample,
                         _families, _finite, _renamed, engine_key, is_openmetrics, number,
                         target)
from .gauges import GAUGES, fold_gauges
from .histograms import bucket_quantile


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
        # which current families each scrape target exports (a PromQL answer may mix
        # releases: one replica still on the old name during a rolling upgrade)
        names: dict[str, set[str]] = {}
        for name, labels, _ in rows:
            names.setdefault(target(dict(labels)), set()).add(name)
        present = {where: {fam for fam in RENAMED.values()
                           if any(fam + suffix in got for suffix in _SUFFIXES)}
                   for where, got in names.items()}
        aliased: dict[str, str] = {}
        said = dict(problems or {})
        out: dict[tuple[str, Labels], float] = {}
        for name, labels, value in rows:
            old = _renamed(name)
            if old is not None:
                family, name = old
                if RENAMED[family] in present[target(dict(labels))]:
                    continue  # this server exports the current family too: read only that
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
        """:meth:`increase`, or None when the server does not export ``name`` or the two
        pages are not one server lifetime (:meth:`lifetime_changed`): unknown, not zero."""
        if not self.later.has(name) or self.lifetime_changed():
            return None
        return self.increase(name)

    def lifetime_changed(self) -> str | None:
        """Why the two pages do not come from one lifetime of one server process (counter
        increases between them then mean nothing), or None when nothing says so.

        Read from what vLLM's pages carry: ``process_start_time_seconds`` changed (a restart
        between the scrapes: an OOM kill, a rescheduled pod); a counter's ``_created``
        changed for the same series (a restarted engine, another pod behind the same
        Service URL); a counter series of the earlier page is gone from the later one
        (another API server or data-parallel rank answered: counters never disappear within
        a lifetime). Pages without these series (several API servers in one pod export no
        ``_created``) cannot tell, and are taken as one lifetime."""
        return self._lifetime or None

    @cached_property
    def _lifetime(self) -> str:
        """:func:`_lifetime_change` of the two pages, read once (``""``: one lifetime)."""
        return _lifetime_change(self.earlier, self.later)

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
        """``vllm:request_success_total`` increase per ``finished_reason`` (empty when the
        pages are not one lifetime: unknown)."""
        out: dict[str, float] = {}
        if self.lifetime_changed():
            return out
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
        (count increase minus the ``le=bound`` bucket's); None when no such bucket exists
        or the pages are not one lifetime."""
        les = {lbl.get("le") for lbl, _ in self.later.series(f"{name}_bucket")}
        le = next((x for x in les if x is not None and number(x) == bound), None)
        if le is None or self.lifetime_changed():
            return None
        return max(0.0, self.increase(f"{name}_count") - self.increase(f"{name}_bucket", le=le))

    def histogram_mean(self, name: str) -> float | None:
        if self.lifetime_changed():
            return None
        total, count = self.histogram(name)
        return total / count if count else None

    def histogram_quantile(self, name: str, q: float) -> float | None:
        """The ``q`` quantile (0..1) of histogram ``name``'s observations over the delta,
        from its buckets' increases merged over engines (the same ``le`` added up),
        interpolated as PromQL's ``histogram_quantile``; None without buckets or
        observations."""
        if self.lifetime_changed():
            return None
        les = {lbl["le"] for lbl, _ in self.later.series(f"{name}_bucket") if "le" in lbl}
        buckets = {bound: self.increase(f"{name}_bucket", le=le) for le in les
                   if (bound := number(le)) is not None}
        return bucket_quantile(q, buckets)

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
            "problems": {**self.earlier.problems, **self.later.problems,
                         **({"lifetime": changed} if (changed := self.lifetime_changed())
                            else {})},
        }


#: a counter series whose increase is read: its family's ``_created`` tells its lifetime
_COUNTED = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions",
            "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:request_success",
            "vllm:request_queue_time_seconds", "vllm:time_to_first_token_seconds",
            "vllm:e2e_request_latency_seconds")


def _lifetime_change(earlier: Snapshot, later: Snapshot) -> str:
    """:meth:`Delta.lifetime_changed`'s reason, ``""`` when none."""
    start_a = earlier.value("process_start_time_seconds")
    start_b = later.value("process_start_time_seconds")
    if start_a is not None and start_b is not None and start_a != start_b:
        return (f"the server process restarted between the two scrapes "
                f"(process_start_time_seconds {start_a:.2f} -> {start_b:.2f}): counter "
                "increases over the run are unknown")
    for family in _COUNTED:
        before = {tuple(sorted(lbl.items())): v
                  for lbl, v in earlier.series(f"{family}_created")}
        for lbl, v in later.series(f"{family}_created"):
            was = before.get(tuple(sorted(lbl.items())))
            if was is not None and was != v:
                return (f"{family}_created changed between the two scrapes "
                        f"({_labels(lbl)}: {was:.3f} -> {v:.3f}): another server lifetime "
                        "(a restart, or another pod behind the same URL) answered; counter "
                        "increases over the run are unknown")
        name = family + ("_count" if family.endswith("_seconds") else "_total")
        after = {tuple(sorted(lbl.items())) for lbl, _ in later.series(name)}
        for lbl, _ in earlier.series(name):
            if tuple(sorted(lbl.items())) not in after:
                return (f"{name} {{{_labels(lbl)}}} of the first scrape is gone from the "
                        "second: another API server, data-parallel rank or pod answered; "
                        "counter increases over the run are unknown")
    return ""


def _labels(lbl: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(lbl.items()))


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
