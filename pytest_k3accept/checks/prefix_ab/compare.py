"""Prefix-cache A/B (checklist C8): the same request set with prefix caching on and off.

The comparison is pure (:func:`prefix_shape`, :func:`compare`); :func:`run_ab` does the I/O
on top of the load runner (one request at a time, so every repeat of a prefix can hit).
What it decides:

* each side's *live* config (``vllm:cache_config_info``: ``enable_prefix_caching``,
  ``mamba_cache_mode``, ``prefix_cache_retention_interval``, ``block_size``) must match the
  side it plays; a "cache off" side that reports hits is not off;
* when the request set's prefixes repeat (a prefix of at least one cache block shared with an
  earlier request), the "on" side must report real hits (``prefix_cache_hits`` delta > 0):
  0 hits with the flag on is the known failure mode of hybrid/KDA models in align mode;
* the block arithmetic comes from the live config (:mod:`.blocks`): a hit comes in whole
  blocks (or prefix-match units), and in ``mamba_cache_mode=align`` only where an earlier
  request left its recurrent state (its last whole block). 0 hits on a set whose shared part
  ends before that state are *inconclusive* (incomplete, with the arithmetic), not a failure;
* when the prefixes do not repeat a whole block, caching cannot help this load, and it says
  so (the shared prefix's length against one block);
* every request must succeed on both sides (otherwise the sides ran different sets).

Figures compared: hit rate (hits / queried tokens), ``cached_tokens`` from ``usage``, client
TTFT, server prefill time and peak KV-cache usage.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ...observe.load.requestset import RequestSet

PASS, FAIL, INCOMPLETE = "pass", "fail", "incomplete"


class ABError(RuntimeError):
    """The A/B could not be run (the message says where and what to do)."""


@dataclass
class Arm:
    """One side of the A/B: its live cache config and the figures of its run."""

    label: str
    base_url: str
    cache_config: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    ok: int = 0
    errors: int = 0
    first_error: str | None = None
    queries: float = 0.0
    hits: float = 0.0
    cached_tokens: int | None = None
    prompt_tokens: int = 0
    ttft_mean: float | None = None
    prefill_mean: float | None = None
    peak_kv: float | None = None
    #: False when the server exported no prefix-cache counters (hits unknown, not 0)
    measured: bool = True

    @property
    def caching(self) -> bool | None:
        """The live ``enable_prefix_caching`` flag (None when the server does not say)."""
        flag = self.cache_config.get("enable_prefix_caching")
        return None if flag is None else flag.strip().lower() == "true"

    @property
    def hit_rate(self) -> float | None:
        """Prefix-cache hits / queried tokens over the run, or None when nothing was queried."""
        return self.hits / self.queries if self.queries > 0 else None

    def as_dict(self) -> dict[str, Any]:
        """Plain values, with the derived ``caching`` and ``hit_rate``."""
        return {**asdict(self), "caching": self.caching, "hit_rate": self.hit_rate}


@dataclass(frozen=True)
class PrefixShape:
    """How much of the request set's prompts repeat, in tokens of the served model.

    ``unit``: the tokens a hit comes in (the prefix-match unit or block size; 0: the block
    size); ``align``: the server keeps recurrent state only at block boundaries, so
    ``reachable`` counts the requests whose shared part holds the state an earlier request
    left (its last whole block; without align mode, every request that shares a whole unit);
    ``first_prompt``: the length of the earlier request the longest shared prefix is shared
    with."""

    requests: int
    block_size: int
    shared_tokens: int
    sharing: int
    unit: int = 0
    align: bool = False
    reachable: int | None = None
    first_prompt: int | None = None

    @property
    def repeats(self) -> bool:
        """True when some request shares at least one full cache block with an earlier one."""
        return self.sharing > 0

    def why_no_hits(self) -> str | None:
        """Why 0 hits are inconclusive for this shape (:func:`.blocks.inconclusive`)."""
        from .blocks import inconclusive

        unit = self.unit or self.block_size
        return inconclusive(self.shared_tokens, unit, align=self.align,
                            reachable=self.sharing if self.reachable is None else self.reachable,
                            first_prompt=self.first_prompt, match_unit=unit != self.block_size)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "repeats": self.repeats}


def prefix_shape(token_ids: Sequence[Sequence[int]], block_size: int, *, unit: int | None = None,
                 align: bool = False) -> PrefixShape:
    """Longest prompt prefix shared with an earlier request, and how many requests share
    at least one unit (``unit``, default ``block_size``: a shorter prefix cannot hit); with
    ``align``, how many share the state an earlier request left at its last whole unit."""
    from .blocks import saved_state

    if block_size <= 0 or (unit is not None and unit <= 0):
        raise ValueError(f"block_size and unit must be positive, got {block_size}, {unit}")
    step = unit or block_size
    longest, sharing, reachable, first = 0, 0, 0, None
    for i, ids in enumerate(token_ids):
        best, reach = 0, False
        for earlier in token_ids[:i]:
            n = 0
            for a, b in zip(ids, earlier):
                if a != b:
                    break
                n += 1
            if n > best:
                best = n
                if n > longest:
                    first = len(earlier)
            reach = reach or (n >= step and (not align or saved_state(len(earlier), step) <= n))
        longest = max(longest, best)
        sharing += best >= step
        reachable += reach
    return PrefixShape(len(token_ids), block_size, longest, sharing, step, align, reachable, first)


@dataclass
class ABResult:
    """Outcome of the A/B: ``status`` pass / fail / incomplete, with every figure."""

    status: str
    message: str
    shape: PrefixShape
    on: Arm | None = None
    off: Arm | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """False only when the A/B found a fault (incomplete is not a fault)."""
        return self.status != FAIL

    @property
    def compared(self) -> bool:
        """True when both sides ran."""
        return self.on is not None and self.off is not None

    def as_dict(self) -> dict[str, Any]:
        """Evidence data (kind ``prefix-cache-ab``)."""
        return {"status": self.status, "ok": self.ok, "compared": self.compared,
                "message": self.message, "shape": self.shape.as_dict(),
                "on": self.on.as_dict() if self.on else None,
                "off": self.off.as_dict() if self.off else None,
                "notes": list(self.notes), "problems": list(self.problems)}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _rate(arm: Arm) -> str:
    if arm.hit_rate is None:
        return f"{arm.hits:g} hits (no lookups)"
    return f"{arm.hit_rate:.1%} ({arm.hits:g}/{arm.queries:g} tokens)"


def _sec(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1000:.1f} ms"


def _config_words(arm: Arm) -> str:
    cfg = arm.cache_config
    keys = ("mamba_cache_mode", "prefix_cache_retention_interval", "block_size")
    return ", ".join(f"{k}={cfg[k]}" for k in keys if k in cfg) or "live config not reported"


def assign(arms: Sequence[Arm]) -> tuple[Arm | None, Arm | None, list[str]]:
    """Which arm is "on" and which "off", by their *live* config (not by order)."""
    notes: list[str] = []
    on = [a for a in arms if a.caching is True]
    off = [a for a in arms if a.caching is False]
    unknown = [a for a in arms if a.caching is None]
    for a in unknown:
        notes.append(f"{a.base_url} does not report vllm:cache_config_info; taken as the "
                     f"'{a.label}' side as launched")
        (on if a.label == "on" else off).append(a)
    if len(on) > 1 or len(off) > 1:
        same = "on" if len(on) > 1 else "off"
        notes.append(f"{len(on) if same == 'on' else len(off)} endpoints have prefix caching "
                     f"{same}; comparing the first of them")
    return (on[0] if on else None), (off[0] if off else None), notes


def compare(on: Arm | None, off: Arm | None, shape: PrefixShape,
            notes: Sequence[str] = ()) -> ABResult:
    """Decide the A/B from both sides' figures and the request set's prefix shape."""
    problems: list[str] = []
    notes = list(notes)
    for arm in (on, off):
        if arm is not None and arm.errors:
            problems.append(f"{arm.errors} of {arm.requests} requests failed on the cache-"
                            f"{arm.label} side ({arm.base_url}): {arm.first_error}; the A/B "
                            "needs the whole request set to succeed on both sides")
    if off is not None and off.caching is True:
        problems.append(f"the cache-off side {off.base_url} reports enable_prefix_caching="
                        "True: launch it with --no-enable-prefix-caching")
    if off is not None and off.hits > 0:
        problems.append(f"the cache-off side {off.base_url} reported {off.hits:g} prefix-cache "
                        "hits: caching is not actually off there")
    if not shape.repeats:
        notes.append(f"the request set's prefixes do not repeat: prefix caching cannot help "
                     f"this load, and its hits say nothing about the cache "
                     f"({shape.why_no_hits()})")
    elif on is not None and on.ok and not on.measured:
        notes.append(f"the cache-on server {on.base_url} exports no prefix-cache counters "
                     "(vllm:prefix_cache_hits / queries, or their older gpu_ names): hits are "
                     "unknown, not zero")
    elif on is not None and on.ok and on.hits == 0 and shape.why_no_hits():
        notes.append(f"0 prefix-cache hits at {on.base_url} ({_config_words(on)}) are "
                     f"{shape.why_no_hits()}; this does not show that caching is broken")
    elif on is not None and on.ok and on.hits == 0:
        problems.append(
            f"prefix caching is on at {on.base_url} ({_config_words(on)}) but "
            f"prefix_cache_hits stayed 0 over {on.queries:g} queried tokens, although "
            f"{shape.sharing} of {shape.requests} requests repeat a prefix of up to "
            f"{shape.shared_tokens} tokens: the cache does not hit (a known failure mode of "
            "hybrid/KDA models in mamba_cache_mode=align); do not count on cache savings")
    if on is not None and on.hits > 0 and not on.cached_tokens:
        notes.append("the server counts hits but reports no cached_tokens in usage "
                     "(start vLLM with --enable-prompt-tokens-details to see them per request)")
    if on is None:
        notes.append("no side with prefix caching on: pass a cache-on endpoint or drop "
                     "--no-enable-prefix-caching from the launch")
    elif off is None:
        notes.append("no cache-off side: give a second --k3-endpoint started with "
                     "--no-enable-prefix-caching, or use --k3-launch (the plugin relaunches)")
    inconclusive = shape.repeats and shape.why_no_hits() is not None
    unknown = on is not None and (not on.measured or (on.ok > 0 and on.hits == 0 and inconclusive))
    status = FAIL if problems else (PASS if on is not None and off is not None and not unknown
                                    else INCOMPLETE)
    return ABResult(status, _message(status, on, off, shape, problems, notes), shape,
                    on, off, notes, problems)


def _message(status: str, on: Arm | None, off: Arm | None, shape: PrefixShape,
             problems: Sequence[str], notes: Sequence[str]) -> str:
    parts = []
    if on is not None and off is not None:
        parts.append(f"hit rate {_rate(on)} on vs {_rate(off)} off; TTFT mean "
                     f"{_sec(on.ttft_mean)} vs {_sec(off.ttft_mean)}; prefill mean "
                     f"{_sec(on.prefill_mean)} vs {_sec(off.prefill_mean)}; peak KV "
                     f"{_pct(on.peak_kv)} vs {_pct(off.peak_kv)}")
    elif on is not None:
        parts.append(f"cache on only: hit rate {_rate(on)}")
    parts.append(f"{shape.requests} requests, shared prefix up to {shape.shared_tokens} "
                 f"tokens (block {shape.block_size})")
    head = {PASS: "prefix-cache A/B passed", FAIL: "prefix-cache A/B FAILED",
            INCOMPLETE: "prefix-cache A/B incomplete"}[status]
    return "; ".join([head + ": " + parts[0], *parts[1:], *problems, *notes])


def arm_from_load(label: str, result: Any, cache_config: dict[str, str]) -> Arm:
    """An :class:`Arm` from a :class:`~pytest_k3accept.observe.load.runner.LoadResult`."""
    s, srv = result.summary, result.server or {}
    cached = [r.cached_tokens for r in result.records if r.ok and r.cached_tokens is not None]
    first = next((r.error for r in result.records if not r.ok), None)
    return Arm(label, result.endpoint, dict(cache_config), requests=int(s["requests"]),
               ok=int(s["ok"]), errors=int(s["errors"]), first_error=first,
               queries=float(srv.get("prefix_cache_queries") or 0.0),
               hits=float(srv.get("prefix_cache_hits") or 0.0),
               measured=srv.get("prefix_cache_hits") is not None,
               cached_tokens=sum(cached) if cached else None,
               prompt_tokens=int(s["prompt_tokens"]),
               ttft_mean=(s.get("ttft") or {}).get("mean"),
               prefill_mean=srv.get("prefill_time_mean"), peak_kv=srv.get("peak_kv_usage"))
