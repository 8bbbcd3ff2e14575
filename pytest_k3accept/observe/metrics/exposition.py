"""The exposition formats: Prometheus text and OpenMetrics parsed into samples, older
family names (:data:`RENAMED`), the types the decisions expect, and the label helpers
(engine, scrape target, numbers written as text). See the package docstring."""

from __future__ import annotations

import math
from typing import Iterable, Mapping

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Mapping[str, str], float]

#: series only vLLM's engine statistics produce (absent with ``--disable-log-stats``)
ENGINE_SERIES = ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:num_preemptions_total")

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
    for family in om(_escape_openmetrics(text)):  # type: ignore[no-untyped-call]
        if _wrong_type(family.name, family.type, problems):
            continue
        for s in family.samples:
            name = "vllm:" + s.name[5:] if s.name.startswith("vllm_") else s.name
            yield name, s.labels, float(s.value)


#: the label the vLLM production-stack router puts on the gauges it re-exports, one series
#: per backend (``vllm:num_requests_running{server="http://10.0.0.11:8000"}``): each backend
#: is an engine of its own, so running / waiting add up over them and KV is the fullest
BACKEND_LABEL = "server"


def target(labels: Mapping[str, str]) -> str:
    """The scrape target a series came from through Prometheus (``job@instance``), ``""``
    for a page read directly."""
    job, instance = labels.get("job", ""), labels.get("instance", "")
    return f"{job}@{instance}" if job or instance else ""


def engine_key(labels: Mapping[str, str], by_target: bool = False) -> str:
    """The engine a series belongs to: its ``engine`` label (``""`` without one), prefixed
    by its :func:`target` when series of several scrape targets are mixed (a Prometheus
    holding more than one server, each with its own engine "0": scope it with a selector)."""
    engine = backend_engine(labels.get(BACKEND_LABEL), labels.get(ENGINE_LABEL, ""))
    return f"{target(labels)}/{engine}" if by_target else engine


def backend_engine(backend: str | None, engine: str) -> str:
    """An engine's key on a router's page (:data:`BACKEND_LABEL`: ``backend/engine``, or
    the backend alone), the engine's own elsewhere."""
    if not backend:
        return engine
    return f"{backend}/{engine}" if engine else backend


def number(text: str | None) -> float | None:
    """A number written as text (a label value, a ``cache_config_info`` field; thousands
    separators allowed), or None when absent or not a number."""
    try:
        return None if text is None else float(text.replace(",", ""))
    except ValueError:
        return None
