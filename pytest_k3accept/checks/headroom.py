"""Headroom at the target load, decided from a finished run (pure).

A run has headroom when, at its peak,

* at least ``min_free`` (default 10 %) of the KV cache was free: ``1 - peak
  vllm:kv_cache_usage_perc`` sampled during the run;
* no more than ``max_preemptions`` (default 0) requests were preempted;
* the error rate stayed within ``max_error_rate`` (default 0);
* no more than ``max_waiting`` (default 0) requests queued for capacity in a *sustained*
  way: ``vllm:num_requests_waiting`` at every gauge sample over at least one second (a
  queue that drains within one scheduler step or two is not counted). vLLM admits a request
  only when its prompt fits in the free KV cache, so an undersized cache often shows up as a
  queue with the KV cache well below 100 %, not as preemptions;
* (optional) at least ``min_free_gpu`` of GPU memory was free at peak, when a GPU telemetry
  source reported it. Not judged by default: vLLM claims ``gpu_memory_utilization`` (90 %)
  of the GPU up front for its KV cache, so free GPU memory says little about load; the KV
  cache usage above is the load-dependent figure.

Failover: with ``N`` replicas sharing the target load, losing one puts ``N/(N-1)`` of its
share on each survivor; :func:`failover_factor` gives that factor and the wiring runs the
scaled load (``LoadProfile.scaled``) on each replica. A run without server metrics cannot be
decided (``ok is None``), and neither can one whose gauge samples never caught a request
running (short requests falling between samples, or seen only queued: the samples show an idle
server's 0 %, not the peak; :func:`~pytest_k3accept.observe.load.peak.unmeasured_peak`).
With several engines the line lists each engine's free KV beside the fullest one's; a run on
a server that also served other clients says so (its figures include their traffic).

Unknown, never a pass, also when the run held on what was measured but a part of the
judgement was not: preemptions not exported (they are the proof of a cache that filled
between two samples), or the client itself was the limit in a way that offered less than
the load (``summary["client_limited"]`` naming a schedule that fell behind or fewer requests
in flight than asked, :func:`~pytest_k3accept.observe.load.saturation.offered_less`), as a
partial run does. A client at a full core or with a late event loop that still offered the
whole load leaves the judgement standing, with the note. A shortage in what was measured stays
a failure.

A partial run (a worker of a split run lost mid-run: ``summary["partial"]``, see
docs/load.md "Past one process") offered less than the target load. Decision: headroom that
held on it is **not** headroom at the target, so such a judgement is undecided (``ok is
None``, "unknown", never "headroom OK"); a shortage measured even at the smaller load (KV,
preemptions, queue, errors, GPU memory) stays a failure. Either way the verdict carries the
note "judged on a partial run: <the partial text>".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from ..evidence.kinds import HeadroomJudgement


class RunLike(Protocol):
    """What a decision reads from a run (``runner.LoadResult`` satisfies it)."""

    summary: dict[str, Any]
    server: dict[str, Any] | None
    server_error: str | None
    gpu: dict[str, Any] | None
    endpoint: str


@dataclass(frozen=True)
class Verdict:
    """The headroom decision of one run: ``ok`` True/False, or None when undecidable."""

    ok: bool | None
    reasons: tuple[str, ...]
    free_kv: float | None = None
    free_gpu: float | None = None
    peak_kv_usage: float | None = None
    preemptions: float | None = None
    error_rate: float = 0.0
    peak_waiting: float | None = None
    sustained_waiting: float | None = None
    queue_time_mean: float | None = None
    endpoint: str = ""
    load_factor: float = 1.0
    replicas: int | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: engine -> its peak KV usage (``--data-parallel-size``; empty for one engine)
    engine_kv: dict[str, float | None] = field(default_factory=dict)
    #: the server served other clients during the run (:mod:`...observe.load.shared`)
    shared: bool | None = None
    shared_note: str = ""

    def line(self) -> str:
        """One human line with the measured numbers."""
        head = {True: "headroom OK", False: "NO headroom", None: "headroom undecided"}[self.ok]
        where = f" at {self.endpoint}" if self.endpoint else ""
        scale = (f" (failover: load x{self.load_factor:.2f} for {self.replicas} replicas)"
                 if self.replicas else "")
        each = ", ".join(f"engine {e} {_pct(None if v is None else 1.0 - v)} free"
                         for e, v in self.engine_kv.items())
        figures = (f"free KV at peak {_pct(self.free_kv)}"
                   f"{f' (fullest engine; {each})' if len(self.engine_kv) > 1 else ''}, preemptions "
                   f"{_num(self.preemptions)}, error rate {self.error_rate:.1%}, sustained "
                   f"queue {_num(self.sustained_waiting)} (peak waiting {_num(self.peak_waiting)})")
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        shared = f" [shared server: {self.shared_note}]" if self.shared else ""
        return f"{head}{where}{scale}: {figures}{why}{shared}"

    def judgement(self, run_id: str, failover: bool = False) -> "HeadroomJudgement":
        """This decision as typed evidence naming the run it judged."""
        from ..evidence.kinds import HeadroomJudgement

        lim = self.limits
        return HeadroomJudgement(
            run_id=run_id, ok=self.ok, reasons=tuple(self.reasons),
            min_free=float(lim.get("min_free", 0.10)),
            max_error_rate=float(lim.get("max_error_rate", 0.0)),
            max_preemptions=float(lim.get("max_preemptions", 0)),
            max_waiting=None if lim.get("max_waiting") is None else float(lim["max_waiting"]),
            free_kv=self.free_kv, failover=failover, replicas=self.replicas)

    def as_dict(self) -> dict[str, Any]:
        """JSON-serializable view (evidence kind "headroom")."""
        return {"ok": self.ok, "reasons": list(self.reasons), "free_kv": self.free_kv,
                "free_gpu": self.free_gpu, "peak_kv_usage": self.peak_kv_usage,
                "preemptions": self.preemptions, "error_rate": self.error_rate,
                "peak_waiting": self.peak_waiting,
                "sustained_waiting": self.sustained_waiting, "queue_time_mean": self.queue_time_mean,
                "endpoint": self.endpoint, "load_factor": self.load_factor,
                "replicas": self.replicas, "limits": dict(self.limits),
                "notes": list(self.notes), "engine_kv": dict(self.engine_kv),
                "shared": self.shared, "shared_note": self.shared_note}


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _num(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def failover_factor(replicas: int) -> float:
    """Load factor on each survivor when one of ``replicas`` fails: N / (N - 1)."""
    if replicas < 2:
        raise ValueError(f"failover needs at least 2 replicas, got {replicas}")
    return replicas / (replicas - 1)


def gpu_free_fraction(gpu: Mapping[str, Any] | None) -> float | None:
    """Free GPU memory fraction at peak from a telemetry peak mapping, if it says.

    Understood keys: ``free_fraction``; ``used_fraction``; ``memory_used_bytes`` +
    ``memory_total_bytes``; ``used_bytes`` + ``total_bytes``; ``fb_used_mib`` + ``fb_free_mib``.
    """
    if not gpu:
        return None

    def num(key: str) -> float | None:
        v = gpu.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if num("free_fraction") is not None:
        return num("free_fraction")
    if num("used_fraction") is not None:
        return 1.0 - (num("used_fraction") or 0.0)
    for used_key, total_key in (("memory_used_bytes", "memory_total_bytes"),
                                ("used_bytes", "total_bytes")):
        used, total = num(used_key), num(total_key)
        if used is not None and total:
            return 1.0 - used / total
    used, free = num("fb_used_mib"), num("fb_free_mib")
    if used is not None and free is not None and used + free > 0:
        return free / (used + free)
    return None


def decide(run: RunLike, *, min_free: float = 0.10, max_error_rate: float = 0.0,
           max_preemptions: float = 0, max_waiting: float | None = 0,
           min_free_gpu: float | None = None, load_factor: float = 1.0,
           replicas: int | None = None) -> Verdict:
    """Decide headroom for one run against the limits (see the module docstring)."""
    limits = {"min_free": min_free, "max_error_rate": max_error_rate,
              "max_preemptions": max_preemptions, "max_waiting": max_waiting,
              "min_free_gpu": min_free_gpu}
    error_rate = float(run.summary.get("error_rate") or 0.0)
    reasons: list[str] = []
    notes: list[str] = []
    if error_rate > max_error_rate:
        kinds = ", ".join(f"{n} {k}" for k, n in (run.summary.get("errors_by_kind") or {}).items()
                          if n)
        reasons.append(f"error rate {error_rate:.1%} > allowed {max_error_rate:.1%} ({kinds})")
    if run.summary.get("latency_unreliable"):  # KV/queue figures are server-side: still valid
        notes.append(str(run.summary["latency_unreliable"]))
    limited = run.summary.get("client_limited")
    if limited:  # judged on the load the client managed to offer
        notes.append(f"judged on a saturated client: {limited}")
    partial = partial_note(run.summary)
    if partial:  # less than the target load was offered: a pass there is no pass
        notes.append(partial)
    free_gpu = gpu_free_fraction(run.gpu)
    if free_gpu is None:
        notes.append("GPU memory not measured (no telemetry source)" if not run.gpu
                     else "GPU telemetry gave no memory figures")
    elif min_free_gpu is not None and free_gpu < min_free_gpu:
        reasons.append(f"free GPU memory at peak {free_gpu:.1%} < required {min_free_gpu:.1%}")
    srv = run.server
    others = (srv or {}).get("other_clients") or {}
    common: dict[str, Any] = {"error_rate": error_rate, "endpoint": run.endpoint, "load_factor": load_factor,
              "replicas": replicas, "limits": limits, "free_gpu": free_gpu,
              "shared": others.get("shared"), "shared_note": str(others.get("note") or "")}
    if others.get("shared"):
        notes.append(f"shared server: {others.get('note')}")
    from ..observe.load.peak import unmeasured_peak

    unmeasured = unmeasured_peak(srv)  # also no figures at all, or no peak among them
    if srv is None or unmeasured:
        why = run.server_error or unmeasured
        return Verdict(False if reasons else None,
                       (*reasons, f"KV-cache usage not measured: {why}"),
                       notes=tuple(notes), **common)
    peak = float(srv["peak_kv_usage"])
    free_kv = max(0.0, 1.0 - peak)
    preempt_known = srv.get("preemptions")
    preempt = float(preempt_known or 0.0)
    unmeasured_parts: list[str] = []
    if preempt_known is None:  # no proof either way of a cache that filled between samples
        unmeasured_parts.append("preemptions not measured (vllm:num_preemptions not exported)")
    waiting = srv.get("sustained_waiting")
    if free_kv < min_free:
        how = (f"full: {preempt:g} preemptions, no sample caught the peak"
               if srv.get("peak_kv_from") == "preemptions" else
               f"peak kv_cache_usage_perc {peak:.3f}")
        reasons.append(f"free KV cache at peak {free_kv:.1%} < required {min_free:.1%} ({how})")
    if preempt > max_preemptions:
        reasons.append(f"{preempt:g} preemptions > allowed {max_preemptions:g}")
    if max_waiting is not None and waiting is None:
        notes.append("queue not judged: no 1 s window of gauge samples and vLLM's queue-time "
                     "histogram showed no request waiting over 1 s")
    if max_waiting is not None and waiting is not None and waiting > max_waiting:
        reasons.append(f"{waiting:g} requests queued for at least 1 s > allowed "
                       f"{max_waiting:g} (peak waiting {_num(srv.get('peak_waiting'))}, mean "
                       f"queue time {_num(srv.get('queue_time_mean'))} s)")
    engine_kv = {str(e): (v or {}).get("peak_kv_usage")
                 for e, v in (srv.get("per_engine") or {}).items()}
    held = not reasons
    if held and partial:
        reasons.append(f"held on less than the target load, so not decided at the target "
                       f"({partial})")
    from ..observe.load.saturation import offered_less

    short = offered_less(limited)
    if held and short:
        reasons.append("held on the load a saturated client managed to offer, so not "
                       f"decided at the target ({limited})")
    if held:
        reasons.extend(unmeasured_parts)
    undecided = held and bool(partial or short or unmeasured_parts)
    return Verdict(False if not held else None if undecided else True, tuple(reasons),
                   free_kv=free_kv, peak_kv_usage=peak,
                   engine_kv=engine_kv,
                   preemptions=preempt, peak_waiting=srv.get("peak_waiting"),
                   sustained_waiting=waiting,
                   queue_time_mean=srv.get("queue_time_mean"), notes=tuple(notes), **common)


#: how a judgement made on a partial run opens its note
PARTIAL = "judged on a partial run: "


def partial_note(summary: Mapping[str, Any]) -> str:
    """``judged on a partial run: <partial>`` for a run that lost a worker, else ``""``."""
    partial = summary.get("partial")
    return f"{PARTIAL}{partial}" if partial else ""


def combine(verdicts: list[Verdict]) -> bool | None:
    """All runs must have headroom: False if any failed, None if any undecided, else True."""
    if not verdicts:
        return None
    if any(v.ok is False for v in verdicts):
        return False
    if any(v.ok is None for v in verdicts):
        return None
    return True
