"""The startup timeline of a vLLM server, built from its log lines (and the plugin's own events).

Events, in the order a healthy start produces them (:data:`EVENTS`): process start, model
load start, weights loaded, KV cache sized (tokens and maximum concurrency), engine init
done (with the duration vLLM logs), API server listening, application startup complete,
and the first successful response. Each is a separate :class:`Event` with a timestamp and
where that timestamp came from; an event that was not observed is listed by
:meth:`Timeline.missing`, never filled in by guessing.

Log lines checked against vLLM 0.32.0 (installed source and a live CPU server), and the
wording of older releases found in public sources: 0.4-0.6 (V0 ``# GPU blocks``,
``Starting vLLM API server on``), 0.8-0.10 (separate ``GPU KV cache size`` and ``Maximum
concurrency`` lines, ``took N seconds``), 0.11+ (merged capacity line).

Timestamps: a vLLM line carries ``LEVEL MM-DD HH:MM:SS`` (local time, no year, whole
seconds); uvicorn lines carry none. A line read while the log was being followed is dated
by when it was read (within a poll interval of when it was written); a backlog line by its
own timestamp; a backlog line without one has no time (``at`` is None). A line may also
start with an RFC 3339 timestamp (``kubectl logs --timestamps``), which is used as is.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from .logread import LogLine, split_lines

__all__ = ["EVENTS", "Event", "Timeline", "line_time", "log_level"]

#: (key, label) of every startup event, in the order a healthy start logs them
EVENTS: tuple[tuple[str, str], ...] = (
    ("process_start", "process start"),
    ("load_start", "model load start"),
    ("weights_loaded", "weights loaded"),
    ("kv_cache_sized", "KV cache sized"),
    ("engine_init_done", "engine init done"),
    ("api_listening", "API server listening"),
    ("app_startup_complete", "application startup complete"),
    ("first_response", "first successful response"),
)
LABELS = dict(EVENTS)

_VLLM_STAMP = re.compile(
    r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(\d{2})-(\d{2})\s+(\d{2}):(\d{2}):(\d{2})"
    r"(?:[.,](\d+))?")
_RFC3339 = re.compile(
    r"^\s*(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"(Z|[+-]\d{2}:?\d{2})?")
_NUM = r"(\d[\d,_]*(?:\.\d+)?)"

#: event key -> patterns (loose: case-insensitive, tolerant of small wording changes)
_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "process_start": (re.compile(r"non-default args:", re.I),
                      re.compile(r"vLLM API server version\s+(\S+)", re.I)),
    "load_start": (re.compile(r"Starting to load model\s+(.*?)(?:\.\.\.)?\s*$", re.I),),
    "weights_loaded": (re.compile(r"Loading (?:model )?weights took\s+" + _NUM + r"\s*(s|sec|"
                                  r"seconds|GiB|GB)\b", re.I),
                       re.compile(r"Model loading took\s+" + _NUM + r"\s*(GiB|GB)", re.I)),
    "kv_cache_sized": (re.compile(r"KV cache size:\s*" + _NUM + r"\s*tokens", re.I),
                       re.compile(r"#\s*GPU blocks:\s*" + _NUM, re.I)),
    "engine_init_done": (re.compile(r"init engine\b.*?\btook\s+" + _NUM + r"\s*s", re.I),),
    "api_listening": (re.compile(r"Starting vLLM (?:API )?server(?:\s+\d+)?"
                                 r"(?:\s+\([^)]*\))?\s+on\s+(\S+)", re.I),
                      re.compile(r"Uvicorn running on\s+(\S+)", re.I)),
    "app_startup_complete": (re.compile(r"Application startup complete", re.I),),
}
_CONCURRENCY = re.compile(r"Maximum concurrency for\s+" + _NUM + r"\s*tokens per request:\s*"
                          + _NUM + r"\s*x", re.I)
_KV_MEMORY = re.compile(r"(?:Available KV cache memory:\s*" + _NUM + r"\s*GiB|Explicitly set \("
                        + _NUM + r"\s*/\s*" + _NUM + r"\)\s*GiB for KV cache)", re.I)
_VERSION = re.compile(r"(?:vLLM API server version|LLM engine \(v|[\u2580-\u259f]\s+version)\s*"
                      r"(\d+\.\d+\.\d+[\w.+-]*)")
_ACCESS_OK = re.compile(r'"POST\s+(/v1/(?:chat/)?completions|/v1/responses|/v1/messages|'
                        r'/inference/v1/generate)\S*\s+HTTP/[\d.]+"\s+200\b')
#: a line without one of these words cannot match any pattern above (a cheap first test: most
#: lines of a long log are request and stats lines)
_ANY = ("non-default args", "version", "load model", "weights took", "loading took", "kv cache",
        "gpu blocks", "init engine", "starting vllm", "uvicorn running", "startup complete",
        "maximum concurrency", "engine (v")
#: repeated by every worker: keep the latest occurrence until the next phase begins
_LATEST_UNTIL = {"weights_loaded": "kv_cache_sized", "engine_init_done": "api_listening"}


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("_", ""))


def log_level(text: str) -> str | None:
    """The level of a vLLM-formatted line (``INFO``, ``ERROR`` ...), or None."""
    m = _VLLM_STAMP.search(text[:160])
    return m.group(1).upper() if m else None


def line_time(text: str, ref: float) -> float | None:
    """Epoch seconds of a line's own timestamp (vLLM or RFC 3339), or None.

    vLLM stamps have no year: the year that puts the stamp closest to ``ref`` is used.
    """
    m = _RFC3339.match(text)
    if m:
        y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
        frac = float("0." + m.group(7)) if m.group(7) else 0.0
        zone = m.group(8)
        try:
            if zone is None:
                return time.mktime((y, mo, d, h, mi, s, 0, 0, -1)) + frac
            t = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + frac
        except (OverflowError, ValueError):
            return None
        if zone != "Z":
            sign = 1 if zone[0] == "+" else -1
            digits = zone[1:].replace(":", "")
            t -= sign * (int(digits[:2]) * 3600 + int(digits[2:] or 0) * 60)
        return t
    m = _VLLM_STAMP.search(text[:160])
    if not m:
        return None
    mo, d, h, mi, s = (int(g) for g in m.groups()[1:6])
    frac = float("0." + m.group(7)) if m.group(7) else 0.0
    ref = ref if ref > 0 else time.time()
    year = time.localtime(ref).tm_year
    best: float | None = None
    for y in (year - 1, year, year + 1):
        try:
            t = time.mktime((y, mo, d, h, mi, s, 0, 0, -1)) + frac
        except (OverflowError, ValueError):
            continue
        if best is None or abs(t - ref) < abs(best - ref):
            best = t
    return best


@dataclass
class Event:
    """One observed startup event: when, how that time was known, and the line that showed it."""

    key: str
    at: float | None
    source: str
    line: str | None = None
    lineno: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LABELS.get(self.key, self.key)

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "at": self.at, "source": self.source,
                "line": self.line, "lineno": self.lineno, "data": dict(self.data)}


def _dated(line: LogLine) -> tuple[float | None, str]:
    stamp = line_time(line.text, line.seen_at)
    if line.live and (stamp is None or -1.0 <= line.seen_at - stamp <= 3.0):
        return line.seen_at, "log, read as written"
    if stamp is not None:
        return stamp, "log timestamp"
    return None, "log line without a timestamp"


@dataclass
class Timeline:
    """Startup events of the latest start in a log; feed it lines in order.

    A new start in the same log (the API server's ``non-default args`` line after the first
    start) moves the events seen so far to ``earlier_starts``.
    """

    events: dict[str, Event] = field(default_factory=dict)
    earlier_starts: int = 0
    #: start lines stamped before events already seen, with no version banner just above them:
    #: parts of one log pasted out of order (a report template that puts the launch arguments
    #: after the KV sizing), not a restart
    out_of_order_starts: int = 0
    start_lineno: int = 1
    _banner_lineno: int = field(default=-100, repr=False)  # the last version banner line
    vllm_version: str | None = None
    kv_memory_gib: float | None = None

    @classmethod
    def from_lines(cls, lines: Iterable[LogLine] | str | bytes) -> "Timeline":
        """Build a timeline from a whole log (text, bytes or lines)."""
        tl = cls()
        for line in split_lines(lines) if isinstance(lines, (str, bytes)) else lines:
            tl.feed(line)
        return tl

    def feed(self, line: LogLine) -> None:
        """Take one log line into account."""
        text = line.text
        low = text.lower()
        if any(word in low for word in _ANY):
            for key, patterns in _PATTERNS.items():
                for pat in patterns:
                    m = pat.search(text)
                    if m:
                        self._hit(key, m, line)
                        break
            self._extras(line)
        ok = _ACCESS_OK.search(text) if "first_response" not in self.events and \
            "POST" in text else None
        if ok:
            at, source = _dated(line)
            self.events["first_response"] = Event(
                "first_response", at, f"server access log ({source})", text, line.lineno,
                {"route": ok.group(1)})

    def _hit(self, key: str, m: re.Match[str], line: LogLine) -> None:
        if key == "process_start" and self.events.keys() - {"process_start"}:
            stamp = line_time(line.text, line.seen_at)
            seen = [ev.at for ev in self.events.values()
                    if ev.at is not None and ev.source.startswith("log timestamp")]
            if stamp is not None and seen and stamp < max(seen) - 1.0 and \
                    line.lineno - self._banner_lineno > 5:
                # a lone start line (no version banner just above it, which a real start
                # prints first) stamped before what came already: pasted out of order
                self.out_of_order_starts += 1  # (round 18)
                return
            self.earlier_starts += 1  # a new start: forget the previous one
            self.events = {}
            self.start_lineno = line.lineno
            self.kv_memory_gib = None
        old = self.events.get(key)
        if old is not None and (_LATEST_UNTIL.get(key) is None
                                or _LATEST_UNTIL[key] in self.events):
            return  # the first occurrence stands
        at, source = _dated(line)
        if key == "process_start":
            source += ", the API server's first line"
        ev = Event(key, at, source, line.text, line.lineno)
        g = m.groups()
        if key == "load_start" and g and g[0]:
            ev.data["model"] = g[0].strip()
        elif key == "weights_loaded":
            unit = g[1].lower() if len(g) > 1 else "gib"
            ev.data["gib" if unit in ("gib", "gb") else "seconds"] = _number(g[0])
            sec = re.search(r"and\s+" + _NUM + r"\s*s", line.text)
            if sec:
                ev.data["seconds"] = _number(sec.group(1))
        elif key == "kv_cache_sized":
            if "blocks" in m.group(0).lower():
                ev.data["gpu_blocks"] = int(_number(g[0]))
            else:
                ev.data["tokens"] = int(_number(g[0]))
        elif key == "engine_init_done":
            ev.data["seconds"] = _number(g[0])
        elif key == "api_listening" and g:
            ev.data["address"] = g[0].rstrip(".,")
        if old is not None:  # one more worker reported this step: keep the latest, count them
            ev.data = {**old.data, **ev.data, "count": old.data.get("count", 1) + 1}
        self.events[key] = ev

    def _extras(self, line: LogLine) -> None:
        m = _CONCURRENCY.search(line.text)
        if m:
            ev = self.events.get("kv_cache_sized")
            if ev is None:  # older releases log concurrency on a line of its own, sometimes first
                at, source = _dated(line)
                ev = self.events["kv_cache_sized"] = Event("kv_cache_sized", at, source,
                                                           line.text, line.lineno)
            ev.data["max_model_len"] = int(_number(m.group(1)))
            ev.data["max_concurrency"] = _number(m.group(2))
        m = _KV_MEMORY.search(line.text)
        if m:
            self.kv_memory_gib = _number(m.group(1) or m.group(2))
        m = _VERSION.search(line.text)
        if m:
            self._banner_lineno = line.lineno
        if m and self.vllm_version is None:
            self.vllm_version = m.group(1)

    # ------------------------------------------------------------------ plugin events
    def set_process_start(self, at: float, source: str = "plugin (process spawned)") -> None:
        """Record the process start the plugin itself observed (it wins over the log's)."""
        self.events["process_start"] = Event("process_start", at, source,
                                             data=dict(self.events["process_start"].data)
                                             if "process_start" in self.events else {})

    def record_first_response(self, at: float, source: str = "plugin client",
                              detail: str = "") -> bool:
        """Record the first successful response (once; earlier ones win); True if recorded."""
        old = self.events.get("first_response")
        if old is not None and old.source.startswith("plugin") and (old.at or 0) <= at:
            return False
        self.events["first_response"] = Event("first_response", at, source, detail or None)
        return True

    # ------------------------------------------------------------------ questions
    def has(self, key: str) -> bool:
        """True when the event was observed."""
        return key in self.events

    def missing(self) -> list[str]:
        """Keys of the :data:`EVENTS` that were not observed."""
        return [key for key, _ in EVENTS if key not in self.events]

    def init_before_first_response(self) -> bool | None:
        """True/False when both events are ordered by log position or by time; None when that
        cannot be told."""
        init, first = self.events.get("engine_init_done"), self.events.get("first_response")
        if init is None or first is None:
            return None
        if init.lineno is not None and first.lineno is not None:  # both lines of the same log
            return init.lineno < first.lineno
        if init.at is None or first.at is None:
            return None
        return init.at <= first.at

    def init_seconds(self) -> float | None:
        """Wall seconds from process start to engine init done, when both are timed."""
        start, init = self.events.get("process_start"), self.events.get("engine_init_done")
        if start is None or init is None or start.at is None or init.at is None:
            return None
        return init.at - start.at

    def as_dict(self) -> dict[str, Any]:
        """Plain data for evidence and records."""
        kv = self.events.get("kv_cache_sized")
        return {"events": [self.events[k].as_dict() for k, _ in EVENTS if k in self.events],
                "missing": self.missing(), "earlier_starts": self.earlier_starts,
                "init_seconds": self.init_seconds(),
                "engine_init_logged_seconds": self.events["engine_init_done"].data.get("seconds")
                if "engine_init_done" in self.events else None,
                "kv_cache_tokens": kv.data.get("tokens") if kv else None,
                "kv_max_concurrency": kv.data.get("max_concurrency") if kv else None,
                "kv_memory_gib": self.kv_memory_gib, "vllm_version": self.vllm_version,
                "init_before_first_response": self.init_before_first_response()}
