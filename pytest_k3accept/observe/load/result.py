"""The result of a load run: per-request records, summaries and server-side figures.

A run keeps one :class:`RunRecord` per request: the numbers its summary, SLO and goodput
checks read (status, error class and message, TTFT, e2e, token counts) and its inter-token
gaps as a packed ``array('d')`` (8 bytes a gap, the exact floats), never the answer's text,
tool calls or error body. :class:`LoadResult` holds them in a
:class:`~.store.RecordStore`, a list while small and spilled to disk beyond a few thousand,
so a soak's client memory is the in-flight requests, not the run's length (see
docs/load.md, "Long runs").
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from .peak import unmeasured_peak
from .profile import LoadProfile

if TYPE_CHECKING:  # pragma: no cover
    from ...evidence.kinds import LoadRun
    from .store import RecordStore


#: error messages kept once however many records share them (bounded: see :func:`_shared`)
_MESSAGES: dict[str, str] = {}
_MAX_MESSAGES = 4096


def _shared(text: str | None) -> str | None:
    """One string object per distinct error message (many failed requests of a soak say
    the same thing), for the first :data:`_MAX_MESSAGES` distinct ones."""
    if text is None:
        return None
    kept = _MESSAGES.get(text)
    if kept is not None:
        return kept
    if len(_MESSAGES) < _MAX_MESSAGES:
        _MESSAGES[text] = text
    return text


class RunRecord:
    """What a run keeps of one request: a ``RequestResult`` without its text, tool calls
    and error body, its inter-token gaps packed (same floats, exact percentiles)."""

    __slots__ = ("ok", "status", "error", "error_kind", "started_at", "ttft", "itl", "e2e",
                 "prompt_tokens", "completion_tokens", "cached_tokens", "finish_reason",
                 "chunks", "stream", "proxy")

    def __init__(self, ok: bool, *, status: int | None = None, error: str | None = None,
                 error_kind: str | None = None, started_at: float = 0.0,
                 ttft: float | None = None, itl: Any = (), e2e: float | None = None,
                 prompt_tokens: int | None = None, completion_tokens: int | None = None,
                 cached_tokens: int | None = None, finish_reason: str | None = None,
                 chunks: int = 0, stream: bool = False, proxy: str | None = None) -> None:
        self.ok, self.status, self.error_kind = ok, status, error_kind
        self.error = _shared(error)
        self.started_at, self.ttft, self.e2e = started_at, ttft, e2e
        self.itl = array("d", itl)
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens
        self.cached_tokens, self.finish_reason = cached_tokens, _shared(finish_reason)
        self.chunks, self.stream, self.proxy = chunks, stream, _shared(proxy)

    @classmethod
    def of(cls, r: Any) -> "RunRecord":
        """The kept part of a ``RequestResult`` (or of any object with its fields)."""
        return cls(r.ok, status=r.status, error=r.error, error_kind=r.error_kind,
                   started_at=r.started_at, ttft=r.ttft, itl=r.itl, e2e=r.e2e,
                   prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
                   cached_tokens=r.cached_tokens, finish_reason=r.finish_reason,
                   chunks=getattr(r, "chunks", 0), stream=getattr(r, "stream", False),
                   proxy=getattr(r, "proxy", None))

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first (``RequestResult.tpot``'s rule)."""
        from ..endpoint.client import RequestResult

        rule: Any = RequestResult.__dict__["tpot"].fget  # the property's own function
        value: float | None = rule(self)  # it reads only fields a RunRecord has
        return value

    def __repr__(self) -> str:
        return (f"RunRecord(ok={self.ok}, status={self.status}, error_kind={self.error_kind}, "
                f"ttft={self.ttft}, e2e={self.e2e}, gaps={len(self.itl)})")


@dataclass(frozen=True)
class Progress:
    """A live view of a run for progress lines."""

    done: int
    errors: int
    in_flight: int
    total: int
    elapsed: float

    def line(self) -> str:
        """One human progress line."""
        return (f"{self.done}/{self.total} requests done, {self.errors} errors, "
                f"{self.in_flight} in flight, {self.elapsed:.1f} s")


@dataclass
class LoadResult:
    """A finished run: per-request records, summaries and server-side figures.

    ``records`` is a :class:`~.store.RecordStore` (a list given is wrapped in one: the same
    objects, in memory); :meth:`close` drops them and deletes a spill file."""

    profile: LoadProfile
    records: "RecordStore"
    elapsed: float
    started_at: float
    stopped_by: str
    not_sent: int
    summary: dict[str, Any]
    achieved_concurrency: dict[str, float]
    endpoint: str
    mode: str
    request_set: dict[str, Any]
    server: dict[str, Any] | None = None
    server_error: str | None = None
    gpu: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        from .store import RecordStore

        if not isinstance(self.records, RecordStore):
            self.records = RecordStore(self.records)

    def close(self) -> None:
        """Drop the per-request records and delete their spill file, if any (the summary
        and every other figure stay)."""
        self.records.close()

    def __enter__(self) -> "LoadResult":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def spill_error(self) -> str | None:
        """Why the records stayed in memory although the run was long (None: they did
        not, or the run was short)."""
        return self.records.spill_error

    @property
    def error_rate(self) -> float:
        """Failed requests / all requests sent."""
        return float(self.summary["error_rate"])

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of successful requests (from the server's ``usage``)."""
        return int(self.summary["prompt_tokens"])

    @property
    def completion_tokens(self) -> int:
        """Generated tokens of successful requests (from the server's ``usage``)."""
        return int(self.summary["completion_tokens"])

    @property
    def peak_kv_usage(self) -> float | None:
        """Highest ``vllm:kv_cache_usage_perc`` sampled during the run (None: no metrics)."""
        return None if self.server is None else self.server.get("peak_kv_usage")

    @property
    def preemptions(self) -> float | None:
        """``vllm:num_preemptions_total`` increase over the run (None: no metrics)."""
        return None if self.server is None else self.server.get("preemptions")

    @property
    def other_clients(self) -> dict[str, Any]:
        """The server's work over the run against what the run sent (:mod:`.shared`)."""
        found = (self.server or {}).get("other_clients")
        return dict(found) if isinstance(found, dict) else {"shared": None,
                                                             "other_requests": None}

    @property
    def shared(self) -> bool | None:
        """True when the server served other clients during the run (its figures include
        their traffic), False when it served only this run, None when unknown."""
        return self.other_clients.get("shared")

    @property
    def context_tokens(self) -> int | None:
        """Prompt length of the load: the synthetic target, else the longest prompt sent."""
        if self.request_set.get("synthetic"):
            return self.profile.context_tokens
        return max(_prompts(self.records), default=None)

    @property
    def measured_context(self) -> tuple[int | None, float | None]:
        """(longest, median) prompt of the successful requests, in the server's ``usage``
        tokens; (None, None) when no request reported usage."""
        from .stats import order_statistics
        from .store import FloatColumn

        lengths = FloatColumn(_prompts(self.records))  # ints, exact as floats below 2**53
        try:
            n = len(lengths)
            if not n:
                return None, None
            mid = n // 2
            found = order_statistics(lengths, {mid - 1, mid, n - 1})
            top, at = int(found[n - 1]), int(found[mid])
            median = at if n % 2 else (int(found[mid - 1]) + at) / 2
            return top, float(median)
        finally:
            lengths.close()

    def evidence(self, run_id: str, target_source: str, *, failover: bool = False,
                 load_factor: float = 1.0, target: bool | None = None) -> "LoadRun":
        """This run as typed evidence (:class:`~pytest_k3accept.evidence.kinds.LoadRun`).

        The context is the measured one (longest prompt in ``usage``); the peak KV usage is
        unknown (None) when no gauge sample was taken *during* the run (the snapshot after
        it shows an idle server) or none caught the server at work
        (:func:`~.peak.unmeasured_peak`), unless preemptions proved the cache full.
        """
        from ...evidence.kinds import LoadRun

        srv = self.server or {}
        longest, median = self.measured_context
        samples, busy = srv.get("gauge_samples"), srv.get("gauge_busy_samples")
        peak = None if unmeasured_peak(srv) else srv.get("peak_kv_usage")
        s = self.summary
        return LoadRun(
            run_id=run_id, profile_name=self.profile.name, concurrency=self.profile.concurrency,
            context_tokens=longest, requests=int(s["requests"]), ok=int(s["ok"]),
            errors=int(s["errors"]),
            errors_by_kind={str(k): int(n) for k, n in (s.get("errors_by_kind") or {}).items()},
            prompt_tokens_p50=median, prompt_tokens_max=longest,
            preemptions=(None if srv.get("preemptions") is None
                         else float(srv["preemptions"])),
            peak_kv=None if peak is None else float(peak), peak_kv_from=srv.get("peak_kv_from"),
            gauge_samples=None if samples is None else int(samples),
            gauge_busy_samples=None if busy is None else int(busy),
            sustained_waiting=(None if srv.get("sustained_waiting") is None
                               else float(srv["sustained_waiting"])),
            target_source=target_source, target=target, failover=failover, load_factor=float(load_factor),
            endpoint=self.endpoint, shared=self.shared,
            latency_unreliable=s.get("latency_unreliable"),
            client_limited=s.get("client_limited"),
            client_loop_lag=(float(s["client_loop_lag"]["max"]) if s.get("client_loop_lag")
                             else None),
            other_requests=self.other_clients.get("other_requests"),
            processes=int(s.get("processes") or 1), partial=s.get("partial"),
            asked_context_tokens=(self.profile.context_tokens
                                  if self.request_set.get("synthetic") else None))

    def line(self) -> str:
        """One human line: counts, latencies and server figures."""
        s = self.summary
        ttft = s["ttft"]["p99"] if s["ttft"] else None
        buffered = s.get("latency_unreliable")  # a buffering proxy: no TTFT to show
        e2e = s["e2e"]["p99"] if s["e2e"] else None
        srv = ""
        if self.server:
            kv, pre = self.server.get("peak_kv_usage"), self.server.get("preemptions")
            if unmeasured_peak(self.server):  # an idle server's 0 % is no peak
                kv = None
            engines = self.server.get("per_engine") or {}
            each = ", ".join(f"engine {e} {_pct(v.get('peak_kv_usage'))}"
                             for e, v in engines.items()) if len(engines) > 1 else ""
            srv = (f", peak KV {_pct(kv)}{f' (fullest engine; {each})' if each else ''}, "
                   f"{'unknown' if pre is None else f'{pre:.0f}'} preemptions")
        note = self.other_clients.get("note") if self.shared else ""
        cut = f", {s['cut']} cut at the time bound" if s.get("cut") else ""
        return (f"{self.profile.name}: {s['ok']}/{s['requests']} ok ({s['errors']} errors"
                f"{cut}) in "
                f"{self.elapsed:.1f} s, {s['request_throughput']:.2f} req/s, TTFT p99 "
                f"{'unknown (buffered stream)' if buffered else _s(ttft)}, e2e p99 {_s(e2e)}, "
                f"concurrency {self.achieved_concurrency['mean']:.1f} "
                f"(max {self.achieved_concurrency['max']:.0f}){srv}"
                + (f"; SHARED: {note}" if note else "") + (f"; {buffered}" if buffered else "")
                + (f"; CLIENT-LIMITED: {s['client_limited']}" if s.get("client_limited")
                   else "")
                + (f"; RECORDS IN MEMORY: {s['spill_error']}" if s.get("spill_error")
                   else "")
                + (f"; over {s['processes']} processes ({s.get('placement')})"
                   if (s.get("processes") or 1) > 1 else "")
                + (f"; {s['processes_note']}" if s.get("processes_note") else "")
                + (f"; PARTIAL: {s['partial']}" if s.get("partial") else ""))

    def as_dict(self, records: bool = False) -> dict[str, Any]:
        """JSON-serializable view; ``records=True`` adds compact per-request records."""
        out = {"profile": self.profile.as_dict(), "endpoint": self.endpoint,
               "mode": self.mode, "started_at": self.started_at, "elapsed": self.elapsed,
               "stopped_by": self.stopped_by, "not_sent": self.not_sent,
               "context_tokens": self.context_tokens,
               "summary": self.summary, "achieved_concurrency": self.achieved_concurrency,
               "request_set": self.request_set, "server": self.server,
               "server_error": self.server_error, "gpu": self.gpu}
        if records:
            out["records"] = [_compact(r) for r in self.records]
        return out


def _prompts(records: Iterable[RunRecord]) -> Iterable[int]:
    """Prompt lengths (server ``usage``) of the successful requests that reported one."""
    return (r.prompt_tokens for r in records if r.ok and r.prompt_tokens)


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1%}"


def _s(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f} s"


def _compact(r: RunRecord) -> dict[str, Any]:
    return {"ok": r.ok, "status": r.status, "error_kind": r.error_kind, "error": r.error,
            "started_at": r.started_at, "ttft": r.ttft, "e2e": r.e2e, "tpot": r.tpot,
            "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "cached_tokens": r.cached_tokens, "finish_reason": r.finish_reason}
