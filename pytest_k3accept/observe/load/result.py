"""The result of a load run: per-request records, summaries and server-side figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .profile import LoadProfile

if TYPE_CHECKING:  # pragma: no cover
    from ..endpoint.client import RequestResult


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
    """A finished run: per-request records, summaries and server-side figures."""

    profile: LoadProfile
    records: list["RequestResult"]
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
    def context_tokens(self) -> int | None:
        """Prompt length of the load: the synthetic target, else the longest prompt sent."""
        if self.request_set.get("synthetic"):
            return self.profile.context_tokens
        lengths = [r.prompt_tokens for r in self.records if r.ok and r.prompt_tokens]
        return max(lengths) if lengths else None

    def line(self) -> str:
        """One human line: counts, latencies and server figures."""
        s = self.summary
        ttft = s["ttft"]["p99"] if s["ttft"] else None
        e2e = s["e2e"]["p99"] if s["e2e"] else None
        srv = ""
        if self.server:
            srv = (f", peak KV {self.server['peak_kv_usage'] or 0:.1%}, "
                   f"{self.server['preemptions']:.0f} preemptions")
        return (f"{self.profile.name}: {s['ok']}/{s['requests']} ok ({s['errors']} errors) in "
                f"{self.elapsed:.1f} s, {s['request_throughput']:.2f} req/s, TTFT p99 "
                f"{_s(ttft)}, e2e p99 {_s(e2e)}, concurrency {self.achieved_concurrency['mean']:.1f} "
                f"(max {self.achieved_concurrency['max']:.0f}){srv}")

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


def _s(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f} s"


def _compact(r: "RequestResult") -> dict[str, Any]:
    return {"ok": r.ok, "status": r.status, "error_kind": r.error_kind, "error": r.error,
            "started_at": r.started_at, "ttft": r.ttft, "e2e": r.e2e, "tpot": r.tpot,
            "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "cached_tokens": r.cached_tokens, "finish_reason": r.finish_reason}
