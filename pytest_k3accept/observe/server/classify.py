"""Where and why a server failed: log text + exit code + HTTP observations -> :class:`Classification`.

A pure function (:func:`classify`) with the evidence lines quoted; it reads its log as a
stream (an iterable of lines is consumed once, with bounded memory: see
:mod:`.triage.scan`). Categories (:data:`CATEGORIES`):

* ``environment`` - driver / CUDA runtime / image mismatch; nothing else is worth tuning
* ``config`` - the server rejected its arguments or could not find its model
* ``loading`` - out of memory before or while the weights were loaded (not capacity evidence)
* ``kv-capacity-at-init`` - weights loaded, but the KV cache cannot be sized for max-model-len
* ``serving`` - the engine died after init completed (at or after the first request)
* ``serving-oom`` - accelerator out of memory inside a step after init completed
* ``host-oom`` - host RAM ran out: the kernel's OOM killer, a container OOMKilled, Ray's memory
  monitor (any phase; the phase is reported)
* ``connection`` - NCCL / RDMA / all-to-all / RPC between engine processes / client connections
* ``killed`` - SIGKILL / exit 137 with no out-of-memory evidence: killed from outside
* ``unknown`` - a failure whose cause is not recognised (the last error lines are quoted)
* ``none`` - no failure observed

The phase (:data:`~.triage.patterns.STAGES`) is the furthest stage the log shows before the
deciding line: startup events of V0 and V1 wordings, serving activity (request lines,
periodic stats, ``Dumping scheduler output``) and the outermost recognised frame of the
traceback that follows it (``load_model``, ``profile_run``, ``run_busy_loop`` ...). A root
cause (tier 1: out of memory, a device fault, a driver, argument or KV-sizing error) wins over
a consequence (tier 2: a collective timing out, a killed worker; tier 3: "EngineCore
encountered a fatal error", ``EngineDeadError``; tier 4: the dump of a step that raised),
and among equals the earliest line wins.
Lines that vLLM logged at DEBUG/INFO/WARNING level are never failure evidence, and neither is
Ray's list of possible reasons for a dead worker ("may have been killed by the OOM killer").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from . import enginecore
from .logread import LogLine, clean, split_lines
from .timeline import Timeline, line_time
from .triage.patterns import AFTER_INIT, BEFORE, FRAME, KV, LOADING, SERVING, STAGES, TRACEBACK, \
    unwrap
from .triage.scan import ACCESS_5XX, FOLLOW, Hit, Scanner

__all__ = ["CATEGORIES", "ADVICE", "Quote", "HttpObservations", "Classification", "classify",
           "decide"]

CATEGORIES = ("environment", "loading", "kv-capacity-at-init", "serving", "serving-oom",
              "host-oom", "connection", "killed", "config", "unknown", "none")

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
    "host-oom": (
        "The host ran out of RAM: the kernel's OOM killer, the container's memory limit "
        "(OOMKilled) or Ray's memory monitor killed a process. This is host memory, not "
        "accelerator memory: give the node or container more RAM, or lower what takes it "
        "(--swap-space, CPU offload, CPU KV cache, processes per node). Lowering GPU memory "
        "use, context length or concurrency does not address it."),
    "killed": (
        "The process was killed from outside (SIGKILL / exit 137, or a SIGTERM / SIGINT it "
        "did not send itself) and the log shows no out-of-memory line: check the kernel log "
        "(dmesg) for the OOM killer and the container's state (OOMKilled), then whatever "
        "supervises the server (a probe, an eviction or rollout, a timeout, an operator). "
        "This is not evidence about the network, the environment or capacity."),
    "unknown": (
        "The server failed, but the cause is not one of the known patterns: read the quoted "
        "last error lines. No conclusion about memory, capacity, the network or the "
        "environment can be drawn from this run."),
    "none": "No failure observed.",
}
_PREFIX = re.compile(r"^\s*(?:[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\s*"
                     r"(?:\[?[\w./-]+:\d+\]\s*)?)?")
_PHASES = ("before weight loading", "while loading weights",
           "KV-cache sizing / profiling (weights loaded, init not done)",
           "after init, before any successful response", "while serving (requests in the log)")
_FIRST_OK = "after the first successful response"
_UNPLACED = "not shown (no startup or serving line before it)"
#: a worker's exit by a signal the CPU raises (triage.patterns' device-fault rule) and its name
_SIGNAL_EXIT = re.compile(r"exit code:? -(4|7|8|11)\b")
_CRASH_SIGNALS = {"4": "SIGILL (an illegal instruction: code built for a CPU or GPU feature "
                       "this machine lacks, or a trap)", "7": "SIGBUS (a bus error)",
                  "8": "SIGFPE (an arithmetic fault)", "11": "SIGSEGV (a segmentation fault)"}
_UNPLACED_CUT = "not shown (lines were cut out of the log before it)"
#: the phase when nothing in the log shows how far the server got (a failure line alone)
_NOT_SHOWN = "not shown (no startup, init or serving line)"
_KILLED_EXIT = (-9, 137)

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
    stage: str = ""  # one of triage.patterns.STAGES ("" when nothing was observed)
    consequences: tuple[Quote, ...] = ()  # failure lines after the deciding one

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
                "root_cause": self.root_cause.as_dict() if self.root_cause else None,
                "stage": self.stage,
                "consequences": [q.as_dict() for q in self.consequences]}


#: the advice of a start-up wait that gave up (round 23's startup-handshake / startup-wait
#: rules): the generic connection advice names the interconnect, but a peer that never
#: answered at start-up is as often a process or node that did not start, or one still loading
STARTUP_WAIT_ADVICE = (
    "A process waited at start-up for a peer that never answered (an engine core for its API "
    "server, a rank at vLLM's barrier, Ray's GCS or raylet for the executor). Look for the "
    "peer's own error above this line or in its node's log, and check that every node and "
    "process started and can reach the others (VLLM_HOST_IP, the Ray cluster's addresses, "
    "ports, firewalls). If the peers were only slow (weights still loading, a long warm-up), "
    "raise the wait: VLLM_ENGINE_READY_TIMEOUT_S for the API server's wait for its engines. "
    "This is not a memory problem: do not tune memory for it.")


def _tl_stage(tl: Timeline, lineno: int | None, http: HttpObservations) -> int:
    """The stage the timeline's startup events show before ``lineno`` (None: the end)."""
    def before(key: str) -> bool:
        ev = tl.events.get(key)
        return ev is not None and (lineno is None or ev.lineno is None or ev.lineno < lineno)

    first = tl.events.get("first_response")
    if first is not None and (first.lineno is None or lineno is None or first.lineno < lineno):
        return SERVING
    if before("engine_init_done") or before("api_listening") or before("app_startup_complete"):
        return AFTER_INIT
    if before("kv_cache_sized") or before("weights_loaded"):
        return KV
    return LOADING if before("load_start") else BEFORE


def _phase_text(stage: int, tl: Timeline, http: HttpObservations) -> str:
    if stage >= AFTER_INIT and (http.first_success_at is not None
                                or "first_response" in tl.events):
        return _FIRST_OK
    if stage == SERVING and "engine_init_done" in tl.events:
        return _PHASES[AFTER_INIT]  # init seen, no response yet: the first request's step
    return _PHASES[stage]


def _phase_and_stage(scan: Scanner, stage: int, http: HttpObservations) -> tuple[str, str]:
    """The phase text and stage key for ``stage``: "not shown" and "" when the log shows no
    stage at all (then ``before-loading`` would only be the scanner's default)."""
    if stage == BEFORE and not scan.shown() and http.first_success_at is None:
        return _NOT_SHOWN, ""
    return _phase_text(stage, scan.timeline, http), STAGES[stage]


def _quote(line: LogLine, text: str | None = None) -> Quote:
    raw = text if text is not None else unwrap(line.text)
    body = _PREFIX.sub("", raw, count=1).strip() or raw.strip()
    return Quote(body[:500], line.lineno, line_time(line.text, line.seen_at))


def _category(kind: str, stage: int) -> str:
    if kind == "oom":
        return "serving-oom" if stage >= AFTER_INIT else "kv-capacity-at-init" \
            if stage == KV else "loading"
    if kind in ("fault", "fatal"):
        return "serving" if stage >= AFTER_INIT else "unknown"
    return kind


def _input_notes(scan: Scanner) -> tuple[str, ...]:
    notes: list[str] = []
    if scan.timeline.earlier_starts:
        notes.append(f"{scan.timeline.earlier_starts} earlier start(s) in this log were not "
                     f"considered: the last start (from line {scan.timeline.start_lineno}) "
                     "was judged")
    if scan.total_lines == 0:
        notes.append("the log is empty")
    elif scan.unreadable_lines * 2 > scan.total_lines:
        notes.append(f"{scan.unreadable_lines} of {scan.total_lines} lines are not readable "
                     "text (a binary file?)")
    elif scan.vllm_lines == 0:
        notes.append("no line of this log looks like a vLLM server's")
    return tuple(notes)


def classify(log: Iterable[LogLine] | str | bytes, *, exit_code: int | None = None,
             http: HttpObservations | None = None, timeline: Timeline | None = None,
             ended: bool = False) -> Classification:
    """Classify a server's life from its log, exit code (None: still running / unknown) and
    HTTP observations. ``timeline`` (built from the whole log) may be passed when ``log``
    holds only part of it; by default it is built from ``log``. ``ended``: the log is complete
    (the server is gone), so a log that ends in a traceback is a failure (``unknown`` when
    its cause is not recognised). ``log`` is read once, line by line."""
    scan = Scanner.over(timeline)
    for line in split_lines(log) if isinstance(log, (str, bytes)) else log:
        scan.feed(line)
    return decide(scan, exit_code=exit_code, http=http, ended=ended)


def decide(scan: Scanner, *, exit_code: int | None = None,
           http: HttpObservations | None = None, ended: bool = False) -> Classification:
    """The classification of what a :class:`~.triage.scan.Scanner` has read."""
    scan.settle()
    http = http or HttpObservations()
    notes = _input_notes(scan)
    hits = scan.all_hits()
    if hits:
        hit = min(hits, key=lambda h: (h.tier, h.order))
        if hit.tier >= 3 and exit_code in _KILLED_EXIT and not scan.self_killed:
            # an engine's death with no cause, killed from outside
            return _killed(scan, http, exit_code, notes)
        if hit.rule == "engine-dead" and exit_code in (None, 0) and \
                enginecore.killed_from_outside(
                [h.line for h in hits] + list(scan.all_exceptions()),
                [ev.line or "" for ev in scan.timeline.events.values()]):
            stage = max(_stage_at(scan, hit, http), _tl_stage(scan.timeline, None, http))
            phase, key = _phase_and_stage(scan, stage, http)
            return Classification("killed", phase,
                                  (Quote(enginecore.KILLED), _quote(hit.line, hit.text)),
                                  enginecore.ADVICE, "engine-core-killed", "matched",
                                  exit_code, notes, stage=key)
        return _from_hit(scan, hit, hits, exit_code, http, notes)
    return _without_log_evidence(scan, exit_code, http, notes, ended)


def _stage_at(scan: Scanner, hit: Hit, http: HttpObservations) -> int:
    # lines raised only while the KV cache is sized, or only while the weights are read
    # ("Failed to load model - not enough GPU memory"; round 22)
    floor = KV if hit.kind == "kv-capacity-at-init" else LOADING if hit.kind == "loading" \
        else BEFORE
    if hit.kind == "oom" and scan.sampler_frame and scan.startup_failed and hit.stage < KV:
        floor = KV  # the sampler before init is done: the KV-sizing run's (round 18)
    return max(hit.stage, floor, _tl_stage(scan.timeline, hit.line.lineno, http))


def _from_hit(scan: Scanner, hit: Hit, hits: list[Hit], exit_code: int | None,
              http: HttpObservations, notes: tuple[str, ...]) -> Classification:
    stage = _stage_at(scan, hit, http)
    if hit.kind in ("fault", "oom") and stage == AFTER_INIT and not scan.waking:
        # once init is done the device runs kernels and allocates only for the engine's steps
        # (sleep mode's wake_up aside): a fault or an OOM there is the first request's step
        # (round 19; the OOM too since round 20)
        stage = SERVING
    category = _category(hit.kind, stage)
    phase, stage_key = _phase_and_stage(scan, stage, http)
    if hit.kind == "oom" and stage < AFTER_INIT and hit.cut:
        # lines were cut between the last one that showed the stage and the OOM (a posted
        # excerpt): loading, KV sizing and serving may lie in the cut; no guess
        category, phase, stage_key = "unknown", _UNPLACED_CUT, "unknown"
        notes += ("out of memory after lines cut from the log ([...]) that could have shown "
                  "loading, KV sizing or serving: triage the whole log",)
    elif hit.kind == "oom" and stage == BEFORE and not scan.timeline.events:
        # an excerpt that starts at the error: loading and serving look the same here, and
        # guessing "loading" (move the environment) for a serving OOM is the costly mistake
        category, phase, stage_key = "unknown", _UNPLACED, "unknown"
        notes += ("out of memory, but the log shows no startup or serving line before it: "
                  "loading, KV sizing and serving cannot be told apart; triage the whole log",)
    signal = _SIGNAL_EXIT.search(hit.text) if hit.kind == "fault" else None
    if signal:
        notes += (f"exit code -{signal.group(1)}: the process was ended by "
                  f"{_CRASH_SIGNALS[signal.group(1)]}, raised by the CPU for the code it ran "
                  "(a native crash in a kernel or library); its core dump or a faulthandler "
                  "trace (PYTHONFAULTHANDLER=1) shows where",)
    quotes = [_quote(hit.line, hit.text)]
    root: Quote | None = None
    if hit.tier > 1:  # a consequence decided: quote the first exception since the last milestone
        events = scan.timeline.events.values()
        floor = max((ev.lineno or 0 for ev in events
                     if ev.lineno is not None and ev.lineno < hit.line.lineno), default=0)
        excs = [ex for ex in scan.all_exceptions() if ex.lineno <= hit.line.lineno + FOLLOW]
        found = [ex for ex in excs if ex.lineno > floor] or excs
        root = _quote(found[0]) if found else None
    later = [_quote(h.line, h.text) for h in hits if h.order > hit.order]
    extra = [_quote(h.line, h.text) for h in hits if h is not hit]
    for q in ([root] if root else []) + extra:
        if q.text not in {x.text for x in quotes} and len(quotes) < 4:
            quotes.append(q)
    inferred = category == "unknown"
    advice = ADVICE[category]
    if category == "host-oom":
        advice = f"Host out of memory ({phase}). " + advice if not stage_key else \
            f"Host out of memory {phase}. " + advice
    elif hit.rule in ("startup-handshake", "startup-wait"):
        advice = STARTUP_WAIT_ADVICE
    consequences = tuple(q for q in later if q.text != quotes[0].text)[:3]
    return Classification(category, phase, tuple(quotes), advice, hit.rule,
                          "inferred" if inferred else "matched", exit_code, notes,
                          root if root and root.text != quotes[0].text else None, stage_key,
                          consequences)


def _last_errors(scan: Scanner) -> list[Quote]:
    tail = list(scan.tail)
    return [_quote(ln) for ln in tail[-3:]]


def _killed(scan: Scanner, http: HttpObservations, exit_code: int | None,
            notes: tuple[str, ...]) -> Classification:
    stage = max(scan.stage, _tl_stage(scan.timeline, None, http))
    quotes = _last_errors(scan)[-2:] + [Quote(
        f"process exit code {exit_code} (SIGKILL from outside: an operator, a supervisor, or "
        "the kernel OOM killer - check dmesg)")]
    phase, key = _phase_and_stage(scan, stage, http)
    return Classification("killed", phase, tuple(quotes),
                          ADVICE["killed"], "exit-code", "inferred", exit_code, notes,
                          stage=key)


def _without_log_evidence(scan: Scanner, exit_code: int | None, http: HttpObservations,
                          notes: tuple[str, ...], ended: bool) -> Classification:
    """Decide from the HTTP observations, the exit code and how the log ends."""
    tl = scan.timeline
    stage = max(scan.stage, _tl_stage(tl, None, http))
    phase, key = _phase_and_stage(scan, stage, http)
    access = [ln for ln in scan.tail if ACCESS_5XX.search(ln.text)]
    quotes: list[Quote] = [_quote(ln) for ln in access[:1]]
    quotes += [Quote(clean(f"HTTP {msg}")[:500]) for msg in http.server_errors[:2]]
    if http.health_status is not None and http.health_status >= 500:
        quotes.append(Quote(f"GET /health -> {http.health_status}"))
    if exit_code in _KILLED_EXIT:
        return _killed(scan, http, exit_code, notes)
    if exit_code is not None and exit_code != 0:
        if exit_code in (126, 127) or (scan.lines == 0 and not tl.events):
            category, prefix = "config", ("The command itself failed (it ended before the "
                                          "server logged anything). ")
            phase, key = _PHASES[BEFORE], STAGES[BEFORE]  # it never started: that is shown
        elif stage >= AFTER_INIT and (http.server_errors or access):
            category, prefix = "serving", ""
        else:
            category, prefix = "unknown", ""
        quotes = _last_errors(scan)[-3:] + quotes + [Quote(f"process exit code {exit_code}")]
        return Classification(category, phase, tuple(quotes), prefix + ADVICE[category],
                              "exit-code", "inferred", exit_code, notes, stage=key)
    if stage >= AFTER_INIT and (http.server_errors or access) and (
            http.health_status is None or http.health_status >= 500 or exit_code is not None):
        return Classification("serving", phase, tuple(quotes), ADVICE["serving"], "http-5xx",
                              "inferred", exit_code, notes, stage=key)
    if http.connection_errors and not http.server_errors:
        quotes = [Quote(clean(f"client: {msg}")[:500]) for msg in http.connection_errors[:2]]
        return Classification("connection", phase, tuple(quotes), ADVICE["connection"],
                              "client-connection", "inferred", exit_code, notes, stage=key)
    if ended and exit_code is None and scan.tail and scan.tail[-1].lineno >= scan.last_activity:
        # a traceback after init (its message cut off): the engine failed while serving, cause
        # not shown; before init the same tail could be any of loading, KV sizing or a bug, and
        # a traceback through sleep mode's wake_up is no request's step either (round 17)
        raised = stage >= AFTER_INIT and not scan.waking and any(
            TRACEBACK.search(ln.text) or FRAME.match(unwrap(ln.text)) for ln in scan.tail)
        category = "serving" if raised else "unknown"
        return Classification(category, phase, tuple(_last_errors(scan)), ADVICE[category],
                              "traceback-after-init" if raised else "log-ends-in-error",
                              "inferred", exit_code, notes, stage=key)
    return Classification("none", phase if key else "no startup observed", (),
                          ADVICE["none"], "no-failure", "matched", exit_code, notes, stage=key)
