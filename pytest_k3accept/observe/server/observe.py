"""One observed server: its log followed into a timeline, the plugin's HTTP observations, the
classification of its life, and a terminal rendering. No pytest import.

Two modes: ``launch`` (the plugin started the process; ``process`` is its
:class:`~pytest_k3accept.observe.server.launch.ServerProcess`) and ``log`` (an externally started
server's log file, read as it grows).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .classify import Classification, HttpObservations, classify
from .logread import LogFollower, LogReader
from .timeline import EVENTS, Event, Timeline

__all__ = ["HttpRecord", "ServerWatch", "probe_first_response"]


@dataclass
class HttpRecord:
    """What the plugin's own client saw (filled in as requests complete)."""

    ready: bool | None = None
    first_success_at: float | None = None
    first_success_detail: str = ""
    server_errors: list[str] = field(default_factory=list)
    health_status: int | None = None
    connection_errors: list[str] = field(default_factory=list)

    def frozen(self) -> HttpObservations:
        """An immutable copy for :func:`~pytest_k3accept.observe.server.classify.classify`."""
        return HttpObservations(self.ready, self.first_success_at, tuple(self.server_errors[:10]),
                                self.health_status, tuple(self.connection_errors[:10]))


class ServerWatch:
    """A followed server log plus what the plugin knows about the process and its answers."""

    def __init__(self, log_path: str | Path, *, mode: str = "log", offset: int = 0,
                 http: HttpRecord | None = None, process: Any = None,
                 base_url: str | None = None, command: str | None = None,
                 interval: float = 0.2) -> None:
        self.mode = mode
        self.log_path = Path(log_path)
        self.process = process
        self.base_url = base_url
        self.command = command
        self.http = http if http is not None else HttpRecord()
        self.timeline = Timeline()
        self.error: str | None = None
        self.ready_at: float | None = None
        self.exit_code: int | None = None  # set when the process ended on its own
        self.final: Classification | None = None
        self._stopping = False
        # the last log line read before the plugin began stopping its own server: what the
        # server writes while it shuts down (an engine core that got SIGTERM first makes the
        # API server log EngineDeadError) is not evidence about the deployment
        self.shutdown_after: int | None = None
        self.follower = LogFollower(LogReader(self.log_path, offset=offset),
                                    interval=interval, callbacks=[self._feed])
        self._lock = self.follower.lock  # one lock for lines and timeline: no lock-order races

    def _feed(self, line: Any) -> None:
        with self._lock:
            self.timeline.feed(line)

    def start(self, process_started_at: float | None = None) -> "ServerWatch":
        """Begin following the log; ``process_started_at`` is the spawn time, if known."""
        if process_started_at is not None:
            self.timeline.set_process_start(process_started_at)
        if self.http.first_success_at is not None:
            self.record_first_response(self.http.first_success_at, self.http.first_success_detail)
        self.follower.start()
        return self

    @property
    def notes(self) -> list[str]:
        """Sentences about the log file itself (missing, truncated, rotated, not UTF-8 ...)."""
        return list(self.follower.reader.notes) + list(self.follower.errors)

    def refresh(self) -> None:
        """Read what the log has now (the follower does this every interval anyway)."""
        self.follower.poll()
        if self.process is not None and self.exit_code is None and not self._stopping:
            self.exit_code = self.process.returncode

    def record_first_response(self, at: float, detail: str = "") -> None:
        """The plugin's client got a successful response at ``at`` (epoch seconds)."""
        with self._lock:
            self.timeline.record_first_response(at, "plugin client", detail)

    def classify(self) -> Classification:
        """Classify the server's life as observed so far (or at stop, once stopped)."""
        if self.final is not None:
            return self.final
        self.refresh()
        with self._lock:
            lines = self.follower.lines()
            cut = self.shutdown_after
            if cut is not None:
                lines = [ln for ln in lines if ln.lineno <= cut]
            result = classify(lines, exit_code=self.exit_code, http=self.http.frozen(),
                              timeline=self.timeline)
            shutdown = self.follower.reader.lines_read - cut if cut is not None else 0
        if shutdown > 0:
            result = replace(result, notes=result.notes + (
                f"{shutdown} log line(s) written while the plugin stopped the server were "
                "not considered (shutdown, not the deployment)",))
        return result

    def stop(self) -> Classification:
        """Stop a launched process (its own exit code is kept), read the rest of the log and
        return the final classification (idempotent)."""
        if self.final is not None:
            return self.final
        if self.process is not None:
            if self.exit_code is None:
                self.exit_code = self.process.returncode  # None: still running, ours to stop
            if self.exit_code is None:
                self.follower.poll()  # everything written before the stop signal counts
                self.shutdown_after = self.follower.reader.lines_read
            self._stopping = True
            self.process.stop()
        self.follower.stop()
        self.final = self.classify()
        return self.final

    def timeline_data(self) -> dict[str, Any]:
        """The timeline as plain data, with the log path, mode and file notes."""
        with self._lock:
            data = self.timeline.as_dict()
        data.update({"mode": self.mode, "log": str(self.log_path), "notes": self.notes,
                     "lines_dropped": self.follower.dropped, "error": self.error})
        return data

    def failure_message(self, cls: Classification) -> str:
        """What to tell a test whose server failed: what happened, category, quote, log."""
        what = self.error.split("; last log lines:")[0].splitlines()[0] if self.error \
            else "the server failed"
        return f"{what}; classified as {cls.summary()}. {cls.advice} (log: {self.log_path})"

    def render(self) -> list[str]:
        """Terminal lines: one per startup event (missing ones marked), then the verdict."""
        with self._lock:
            events = dict(self.timeline.events)
        origin = events.get("process_start")
        t0 = origin.at if origin is not None else None
        head = f"mode: {'launched by the plugin' if self.mode == 'launch' else 'observed log'}; " \
               f"log: {self.log_path}"
        out = [head]
        for key, label in EVENTS:
            ev = events.get(key)
            if ev is None:
                out.append(f"  {label:<30} MISSING (not observed)")
                continue
            out.append(f"  {label:<30} {_clock(ev.at):<13} {_offset(ev.at, t0):>9}  "
                       f"{_detail(ev)}[{ev.source}]")
        cls = self.final or self.classify()
        out.append(f"classification: {cls.category} ({cls.phase}; rule {cls.rule}, "
                   f"{cls.confidence})")
        for quote in cls.evidence:
            out.append(f"  evidence {quote}")
        if cls.failed:
            out.append(f"  advice: {cls.advice}")
        out.extend(f"  note: {n}" for n in self.notes + list(cls.notes))
        return out


def _clock(at: float | None) -> str:
    if at is None:
        return "time unknown"
    return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at % 1 * 1000):03d}"


def _offset(at: float | None, t0: float | None) -> str:
    return "" if at is None or t0 is None else f"+{at - t0:.1f} s"


def _detail(ev: Event) -> str:
    d = ev.data
    if ev.key == "kv_cache_sized" and "tokens" in d:
        conc = (f", max concurrency {d['max_concurrency']:.2f}x at {d['max_model_len']:,} "
                "tokens") if "max_concurrency" in d else ""
        return f"{d['tokens']:,} tokens{conc} "
    if ev.key in ("engine_init_done", "weights_loaded") and "seconds" in d:
        return f"took {d['seconds']:.2f} s " + (f"({d['gib']} GiB) " if "gib" in d else "")
    if ev.key == "api_listening" and "address" in d:
        return f"{d['address']} "
    if ev.key == "first_response" and ev.line:
        return f"{ev.line[:80]} "
    return ""


def probe_first_response(base_url: str, model: str, *, api_key: str | None = None,
                         timeout: float = 60.0) -> tuple[bool, float, str]:
    """Send one tiny completion (max_tokens 1); return (ok, time.time() at the answer, detail).

    The detail is the HTTP status and error message, or the connection error.
    """
    import httpx

    from ..endpoint.auth import auth_headers

    body = {"model": model, "prompt": "Hello", "max_tokens": 1}
    try:
        resp = httpx.post(base_url.rstrip("/") + "/v1/completions", json=body,
                          headers=auth_headers(api_key), timeout=timeout)
    except httpx.HTTPError as exc:
        return False, time.time(), f"{type(exc).__name__}: {exc}"
    at = time.time()
    if resp.status_code >= 400:
        try:
            err = resp.json().get("error", "")
            message = str(err.get("message", err) if isinstance(err, dict) else err)
        except (ValueError, AttributeError):
            message = resp.text[:200]
        return False, at, f"{resp.status_code}: {message}"
    return True, at, f"POST /v1/completions (k3_startup probe) HTTP {resp.status_code}"
