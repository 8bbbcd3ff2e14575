"""Where and why a server failed: log text + exit code + HTTP observations -> :class:`Classification`.

A pure function (:func:`classify`) with the evidence lines quoted. Categories:

* ``environment`` - driver / CUDA runtime / image mismatch; nothing else is worth tuning
* ``config`` - the server rejected its arguments or could not find its model
* ``loading`` - out of memory before or while the weights were loaded (not capacity evidence)
* ``kv-capacity-at-init`` - weights loaded, but the KV cache cannot be sized for max-model-len
* ``serving`` - the engine died after init completed (at or after the first request)
* ``serving-oom`` - out of memory inside a step after init completed
* ``connection`` - NCCL / RDMA / all-to-all / distributed-store / client connection failures
* ``none`` - no failure observed

The phase of an out-of-memory line is told by the startup events logged before it
(``Starting to load model``, weights loaded, KV cache sized, ``init engine ... took``), so
the same OOM string is ``loading`` before init and ``serving-oom`` after it. Decisive
patterns win over generic ones (``EngineCore encountered a fatal error``, ``Engine core
initialization failed``); among decisive ones the earliest line wins, because later lines
are usually consequences. Lines that vLLM itself logged at DEBUG/INFO/WARNING level are
never failure evidence (the ``ulimit`` warning mentions "Too many open files").

Strings checked against vLLM 0.32.0 (installed source and real failures on the CPU
testbed) and public sources of older releases (V0 ``The model's max seq len ... is larger
than the maximum number of tokens that can be stored in KV cache``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .logread import LogLine, clean, split_lines
from .timeline import Timeline, line_time, log_level

__all__ = ["CATEGORIES", "ADVICE", "Quote", "HttpObservations", "Classification", "classify"]

CATEGORIES = ("environment", "loading", "kv-capacity-at-init", "serving", "serving-oom",
              "connection", "config", "none")

ADVICE: dict[str, str] = {
    "environment": (
        "The environment is wrong (host driver / CUDA runtime / image mismatch). Fix the layer "
        "that is wrong (host driver R580+ for the CUDA 13 image, or the image built for this "
        "driver) before any tuning; lowering concurrency or context length will not help and "
        "this is not capacity evidence. If only the container can be changed here, that is a "
        "stop-and-move condition."),
    "config": (
        "The server rejected its arguments or configuration, or could not find its model. Fix "
        "the launch command (the quoted line names what is wrong); nothing about memory or "
        "capacity can be concluded from this run."),
    "loading": (
        "Out of memory before or while loading the weights: the model does not fit this "
        "hardware / parallel topology. Lowering concurrency (or context length) will not help, "
        "and this result is not capacity evidence. Check GPU count and TP/EP/DP against the "
        "official recipe, or move to an environment with enough accelerator memory before "
        "tuning; repeated OOM before weight mapping is a stop-and-move condition."),
    "kv-capacity-at-init": (
        "The weights loaded, but the KV cache cannot be sized for the requested context at "
        "init. Lower --max-model-len (the target context) or give the KV cache more memory "
        "(--gpu-memory-utilization, --kv-cache-memory-bytes); lowering concurrency does not "
        "help at this stage. Record it as a capacity limit at init, not as a loading failure."),
    "serving": (
        "The engine died after init completed (at or after a request). Init completed, so this "
        "is neither a loading failure nor a capacity shortage at init: fix the quoted root "
        "cause (an unsupported kernel or configuration, a bug) and retest with the same "
        "request set; client connection errors after this are consequences, not causes."),
    "serving-oom": (
        "Out of memory while serving (after init). Tune in order, one variable at a time on the "
        "same request set: context length first, then concurrency, then prefix caching. If the "
        "target load leaves no headroom, the answer is scaling, not tuning."),
    "connection": (
        "A communication failure (NCCL / RDMA / all-to-all / network). Check the interconnect "
        "and the official all-to-all setting for this topology; connection errors and OOM are "
        "different events, so do not tune memory for this."),
    "none": "No failure observed.",
}

_I = re.I
#: (rule name, category or "oom"/"fatal"/"init-failed", tier, pattern); lower tier decides first
_RULES: tuple[tuple[str, str, int, re.Pattern[str]], ...] = (
    ("cuda-driver-too-old", "environment", 1, re.compile(
        r"CUDA driver version is insufficient|driver on your system is too old|"
        r"cudaErrorInsufficientDriver|unsupported display driver", _I)),
    ("no-kernel-image", "environment", 1, re.compile(
        r"no kernel image is available|forward compatibility was attempted", _I)),
    ("no-driver", "environment", 1, re.compile(
        r"Found no NVIDIA driver|No CUDA GPUs are available|libcuda\.so[.\d]*: cannot open|"
        r"system not yet initialized|Failed to infer device type|"
        r"operator torchvision::nms does not exist", _I)),
    ("bad-arguments", "config", 1, re.compile(
        r"(?:^|\s)[\w./-]+: error: (?:unrecognized arguments|argument |the following arguments)|"
        r"^\S*\s*error: unrecognized arguments|validation errors? for \w*(?:Config|Args)\b|"
        r"User-specified max_model_len|must be divisible by|Address already in use|"
        r"is not a valid model identifier|Invalid repository ID or local directory|"
        r"does not appear to have a file named|command not found|can't open file|"
        r"\[Errno 2\] No such file or directory", _I)),
    ("kv-cache-too-small", "kv-capacity-at-init", 1, re.compile(
        r"To serve at least one request with the model'?s max seq len|"
        r"No available memory for the cache blocks|Cannot auto-fit max_model_len|"
        r"less than requested memory for kv|"
        r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored", _I)),
    ("load-oom", "loading", 1, re.compile(r"Failed to load model\W+not enough \w* ?memory", _I)),
    ("out-of-memory", "oom", 1, re.compile(
        r"can'?t allocate memory|(?:CUDA|HIP|XPU|NPU) out of memory|OutOfMemoryError|"
        r"Cannot allocate memory|RESOURCE_EXHAUSTED", _I)),
    ("interconnect", "connection", 2, re.compile(
        r"\bNCCL (?:error|WARN)|nccl\w*Error|NCCL_ERROR|Watchdog caught collective operation|"
        r"DistBackendError|\b(?:ibv_\w+|RDMA|mlx5\w*)\b.*\b(?:fail\w*|error)|"
        r"(?:DeepEP|pplx|nvshmem|all2all|all-to-all|alltoall)\b.*\b(?:fail\w*|error|timed? ?out)|"
        r"Gloo connectFullMesh failed|(?:TCPStore|c10d|rendezvous)\b.*\b(?:timed out|failed|"
        r"refused)", _I)),
    ("import-error", "environment", 2, re.compile(
        r"^(?:.*\s)?(?:ImportError|ModuleNotFoundError): |undefined symbol: ", _I)),
    ("engine-dead", "fatal", 3, re.compile(
        r"EngineCore encountered (?:a fatal error|an issue)|EngineDeadError|died unexpectedly|"
        r"Worker failed with error|Engine loop has died", _I)),
    ("init-failed", "init-failed", 3, re.compile(
        r"Engine core initialization failed|Frontend process failed during engine core", _I)),
)
_EXCEPTION = re.compile(r"(?:^|\]\s|\s)((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)): \S")
_ACCESS_5XX = re.compile(r'"(?:POST|GET)\s+\S+\s+HTTP/[\d.]+"\s+5\d\d\b')
_QUIET_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN")
_PREFIX = re.compile(r"^\s*(?:\(\S+ pid=\d+\)\s*)?(?:[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d"
                     r"(?:[.,]\d+)?\s*(?:\[?[\w./-]+:\d+\]\s*)?)?")


@dataclass(frozen=True)
class Quote:
    """A quoted evidence line: line number in the log, text, and its time if known."""

    text: str
    lineno: int | None = None
    at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "lineno": self.lineno, "at": self.at}

    def __str__(self) -> str:
        return f"line {self.lineno}: {self.text}" if self.lineno else self.text


@dataclass(frozen=True)
class HttpObservations:
    """What the plugin saw over HTTP: readiness, first success, 5xx messages, /health, refusals."""

    ready: bool | None = None
    first_success_at: float | None = None
    server_errors: tuple[str, ...] = ()
    health_status: int | None = None
    connection_errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Classification:
    """The verdict on a server's life: category, phase, quoted evidence and the seed's advice."""

    category: str
    phase: str
    evidence: tuple[Quote, ...] = ()
    advice: str = ADVICE["none"]
    rule: str = "no-failure"
    confidence: str = "matched"  # "matched": a known line; "inferred": from phase/exit/HTTP only
    exit_code: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    root_cause: Quote | None = None  # the first exception line, when a generic line decided

    @property
    def failed(self) -> bool:
        return self.category != "none"

    def summary(self) -> str:
        """One line: category, phase and the first evidence line."""
        if not self.failed:
            return "none: no failure observed"
        quote = f': "{self.evidence[0].text}"' if self.evidence else ""
        cause = f'; root cause: "{self.root_cause.text}"' if self.root_cause else ""
        return f"{self.category} ({self.phase}){quote}{cause}"

    def as_dict(self) -> dict[str, Any]:
        return {"category": self.category, "phase": self.phase, "rule": self.rule,
                "confidence": self.confidence, "advice": self.advice,
                "evidence": [q.as_dict() for q in self.evidence],
                "evidence_lines": [q.text for q in self.evidence],
                "exit_code": self.exit_code, "notes": list(self.notes),
                "root_cause": self.root_cause.as_dict() if self.root_cause else None}


def _phase(tl: Timeline, lineno: int | None, http: HttpObservations) -> str:
    """The startup stage reached before ``lineno`` (None: the end of the log)."""
    def before(key: str) -> bool:
        ev = tl.events.get(key)
        return ev is not None and (lineno is None or ev.lineno is None or ev.lineno < lineno)

    first = tl.events.get("first_response")
    if first is not None and (first.lineno is None or lineno is None or first.lineno < lineno):
        return "after the first successful response"
    if before("engine_init_done"):
        return "after init, before any successful response" if first is None and \
            http.first_success_at is None else "after the first successful response"
    if before("kv_cache_sized") or before("weights_loaded"):
        return "KV-cache sizing / profiling (weights loaded, init not done)"
    if before("load_start"):
        return "while loading weights"
    return "before weight loading"


def _quote(line: LogLine) -> Quote:
    text = _PREFIX.sub("", line.text, count=1).strip() or line.text.strip()
    return Quote(text[:500], line.lineno, line_time(line.text, line.seen_at))


def classify(log: Iterable[LogLine] | str | bytes, *, exit_code: int | None = None,
             http: HttpObservations | None = None,
             timeline: Timeline | None = None) -> Classification:
    """Classify a server's life from its log, exit code (None: still running / unknown) and
    HTTP observations. ``timeline`` (built from the whole log) may be passed when ``log``
    holds only part of it; by default it is built from ``log``."""
    lines = split_lines(log) if isinstance(log, (str, bytes)) else list(log)
    tl = timeline if timeline is not None else Timeline.from_lines(lines)
    http = http or HttpObservations()
    lines = [ln for ln in lines if ln.lineno >= tl.start_lineno]  # the latest start only
    hits: list[tuple[int, int, str, str, LogLine]] = []  # (tier, order, rule, kind, line)
    exceptions: list[LogLine] = []
    for order, line in enumerate(lines):
        if log_level(line.text) in _QUIET_LEVELS:
            continue
        for rule, kind, tier, pat in _RULES:
            if pat.search(line.text):
                hits.append((tier, order, rule, kind, line))
                break
        if _EXCEPTION.search(line.text):
            exceptions.append(line)
    notes = (f"{tl.earlier_starts} earlier start(s) in this log were not considered",) \
        if tl.earlier_starts else ()
    if hits:
        tier, _, rule, kind, line = min(hits, key=lambda h: (h[0], h[1]))
        phase = _phase(tl, line.lineno, http)
        category = kind
        if kind == "oom":
            category = ("serving-oom" if phase.startswith("after") else "kv-capacity-at-init"
                        if phase.startswith("KV") else "loading")
        elif kind in ("fatal", "init-failed"):
            category = "serving" if phase.startswith("after") else "loading"
        inferred = kind == "init-failed" or (kind == "fatal" and category == "loading")
        quotes = [_quote(line)]
        root: Quote | None = None
        if tier > 1:  # a generic line decided: quote the first exception since the last milestone
            floor = max((ev.lineno or 0 for ev in tl.events.values()
                         if ev.lineno is not None and ev.lineno < line.lineno), default=0)
            found = [ex for ex in exceptions if ex.lineno > floor] or exceptions
            root = _quote(found[0]) if found else None
        extra = [_quote(h[4]) for h in sorted(hits, key=lambda h: h[1]) if h[4] is not line]
        for q in ([root] if root else []) + extra:
            if q.text not in {x.text for x in quotes} and len(quotes) < 4:
                quotes.append(q)
        advice = ADVICE[category]
        if inferred:
            advice = ("The engine failed before init completed and the cause is not one of the "
                      "known patterns: read the quoted lines. " + advice)
        return Classification(category, phase, tuple(quotes), advice, rule,
                              "inferred" if inferred else "matched", exit_code, notes,
                              root if root and root.text != quotes[0].text else None)
    return _without_log_evidence(tl, lines, exit_code, http, notes)


def _without_log_evidence(tl: Timeline, lines: Sequence[LogLine], exit_code: int | None,
                          http: HttpObservations, notes: tuple[str, ...]) -> Classification:
    """Decide from the access log, HTTP observations and the exit code alone."""
    phase = _phase(tl, None, http)
    after_init = phase.startswith("after")
    access = [ln for ln in lines if _ACCESS_5XX.search(ln.text)]
    quotes: list[Quote] = [_quote(ln) for ln in access[:1]]
    quotes += [Quote(clean(f"HTTP {msg}")[:500]) for msg in http.server_errors[:2]]
    if http.health_status is not None and http.health_status >= 500:
        quotes.append(Quote(f"GET /health -> {http.health_status}"))
    if exit_code is not None and exit_code != 0:
        killed = exit_code in (-9, 137)
        quotes.append(Quote(f"process exit code {exit_code}" + (
            " (SIGKILL from outside: an operator, a supervisor, or the kernel OOM killer - "
            "check dmesg)" if killed else "")))
        if after_init:
            # no out-of-memory line in the log: a killed server is a lost connection for the
            # clients, never OOM evidence by itself
            category = "connection" if killed else "serving"
        elif exit_code in (126, 127) or not (killed or tl.has("load_start")):
            category = "config"  # ended before it began loading: the command itself failed
        else:
            category = "loading"
        advice = ("The cause is not one of the known patterns (read the log); decided from the "
                  "exit code and the startup stage reached. " + ADVICE[category])
        return Classification(category, phase, tuple(quotes), advice,
                              "exit-code", "inferred", exit_code, notes)
    if after_init and (http.server_errors or access) and (
            http.health_status is None or http.health_status >= 500 or exit_code is not None):
        return Classification("serving", phase, tuple(quotes), ADVICE["serving"], "http-5xx",
                              "inferred", exit_code, notes)
    if http.connection_errors and not http.server_errors:
        quotes = [Quote(clean(f"client: {msg}")[:500]) for msg in http.connection_errors[:2]]
        return Classification("connection", phase, tuple(quotes), ADVICE["connection"],
                              "client-connection", "inferred", exit_code, notes)
    return Classification("none", phase if tl.events else "no startup observed", (),
                          ADVICE["none"], "no-failure", "matched", exit_code, notes)
