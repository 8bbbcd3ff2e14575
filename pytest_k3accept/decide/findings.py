"""Evidence read into the facts a verdict is decided on (pure: no pytest, no network).

:func:`read` turns a session's :class:`~pytest_k3accept.evidence.store.Evidence` into
:class:`Findings`: environment failures (host facts, lifecycle classification), capacity runs
(load, headroom and re-measurement procedure steps, each with its concurrency, context,
errors, preemptions and peak KV usage), whether engine init was seen completing, whether any
response was seen, and the audience. Evidence kinds it reads:

``environment`` (``{"item": "C4", "ok": false, ...}``), ``classification``
(``{"category": "loading", "lines": [...]}``), ``timeline`` (init completion, first
response), ``load``, ``headroom``, ``procedure`` (``{"steps": [...]}``), ``prefix-cache-ab``,
``response`` (a successful request a test saw) and ``audience`` (``{"audience": "poc"}``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..evidence.store import Evidence

#: checklist item of an environment check -> the layer its fix needs
ITEM_LAYER: dict[str, str] = {"C3": "container", "C4": "driver", "C5": "network"}
#: classification categories that mean "fix the environment first"
ENVIRONMENT_CATEGORIES = ("environment", "loading", "connection")
#: classification categories that are a capacity shortage
CAPACITY_CATEGORIES = ("kv-capacity-at-init", "serving-oom")
#: classification categories that block any capacity verdict
BLOCKING_CATEGORIES = ("serving", "config")


@dataclass(frozen=True)
class Ref:
    """Where a finding came from: evidence kind, test id and its summary line."""

    kind: str
    nodeid: str
    summary: str

    def cite(self) -> str:
        """``summary [kind, test]`` for a reason line."""
        where = f"{self.kind}, {self.nodeid}" if self.nodeid else self.kind
        return f"{self.summary} [{where}]"


@dataclass(frozen=True)
class Problem:
    """An environment failure or a failure classified from the server's life."""

    ref: Ref
    category: str
    layer: str | None = None
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run:
    """One measured load: where it ran and how it held."""

    ref: Ref
    concurrency: int | None
    context_tokens: int | None
    ok: int
    errors: int
    preemptions: float = 0.0
    peak_kv: float | None = None
    headroom: bool | None = None
    failover: bool = False
    target: bool | None = None
    min_free: float = 0.10
    error_kinds: tuple[tuple[str, int], ...] = ()

    @property
    def failures(self) -> dict[str, int]:
        """Errors that are failures, not load: HTTP 4xx/5xx, connection, protocol (timeouts
        under load are a capacity signal and are not listed)."""
        return {k: n for k, n in self.error_kinds if n and k != "timeout"}

    @property
    def stable(self) -> bool:
        """Every request succeeded and nothing was preempted (with at least one success)."""
        return self.ok > 0 and self.errors == 0 and self.preemptions == 0

    @property
    def has_headroom(self) -> bool | None:
        """True/False when known: explicit judgement, else peak KV below ``1 - min_free``."""
        if self.headroom is not None:
            return self.headroom and self.stable
        if not self.stable:
            return False
        if self.peak_kv is None:
            return None
        return self.peak_kv <= 1.0 - self.min_free

    def label(self) -> str:
        """``concurrency 16, context 6000 tokens``; an unknown part is named as unknown."""
        conc = "unknown" if self.concurrency is None else str(self.concurrency)
        ctx = "unknown" if self.context_tokens is None else f"{self.context_tokens} tokens"
        return f"concurrency {conc}, context {ctx}"

    def figures(self) -> str:
        """The numbers a reason quotes."""
        kv = "unknown" if self.peak_kv is None else f"{self.peak_kv:.0%}"
        return (f"{self.ok} ok, {self.errors} errors, {self.preemptions:g} preemptions, "
                f"peak KV {kv}")


@dataclass
class Findings:
    """What the evidence says, sorted for the decision."""

    environment: list[Problem] = field(default_factory=list)
    capacity: list[Problem] = field(default_factory=list)
    blocking: list[Problem] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    init_completed: Ref | None = None
    responses: list[Ref] = field(default_factory=list)
    audience: str | None = None
    cache_ab: list[tuple[Ref, bool]] = field(default_factory=list)
    unknown_env: list[Ref] = field(default_factory=list)


def find(data: Any, *paths: str, default: Any = None) -> Any:
    """The first present value among dotted ``paths`` (``"profile.concurrency"``)."""
    for path in paths:
        cur = data
        for part in path.split("."):
            if isinstance(cur, Mapping) and part in cur:
                cur = cur[part]
            else:
                break
        else:
            if cur is not None:
                return cur
    return default


def _num(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value)


def _int_or_none(value: Any) -> int | None:
    return None if value is None or isinstance(value, bool) else int(_num(value))


def run_from(data: Mapping[str, Any], ref: Ref, target: bool | None = None) -> Run:
    """A :class:`Run` from a load/headroom/procedure-step data mapping."""
    peak = find(data, "peak_kv", "server.peak_kv_usage", "server.peak_kv", "peak_kv_usage",
                "kv.peak", "metrics.peak_kv_usage")
    judged = find(data, "headroom_ok", "passed", *(("ok",) if ref.kind == "headroom" else ()))
    count = find(data, "summary.ok", "requests_ok", "ok")
    return Run(
        ref=ref,
        concurrency=_int_or_none(find(data, "concurrency", "profile.concurrency")),
        context_tokens=_int_or_none(find(data, "context_tokens", "profile.context_tokens")),
        ok=int(_num(count)),
        errors=int(_num(find(data, "summary.errors", "errors"))),
        preemptions=_num(find(data, "preemptions", "server.preemptions",
                              "metrics.preemptions")),
        peak_kv=None if peak is None else _num(peak),
        headroom=judged if isinstance(judged, bool) else None,
        failover=bool(find(data, "failover", "replicas", default=False))
        or _num(find(data, "load_factor"), 1.0) > 1.0,
        target=target if target is not None else find(data, "target"),
        min_free=_num(find(data, "min_free", "limits.min_free", "profile.headroom.min_free"),
                      0.10),
        error_kinds=tuple((str(k), int(_num(n))) for k, n in (
            find(data, "summary.errors_by_kind", "errors_by_kind", default={}) or {}).items()),
    )


def _event_keys(data: Mapping[str, Any]) -> set[str]:
    """Keys of the timeline events that were observed (list or mapping form)."""
    events = data.get("events")
    if isinstance(events, Mapping):
        return {str(k) for k, v in events.items() if v not in (None, False)}
    if isinstance(events, list):
        return {str(ev.get("key") or ev.get("name")) for ev in events
                if isinstance(ev, Mapping)}
    return set()


def _init_done(data: Mapping[str, Any]) -> bool:
    flag = find(data, "init_completed", "init_complete", "init_done")
    if isinstance(flag, bool):
        return flag
    return "engine_init_done" in _event_keys(data)


def _first_response(data: Mapping[str, Any]) -> bool:
    return "first_response" in _event_keys(data)


def read(evidence: Sequence[Evidence]) -> Findings:
    """Sort every piece of evidence into :class:`Findings`."""
    out = Findings()
    last_load: dict[str, Mapping[str, Any]] = {}
    for ev in evidence:
        ref = Ref(ev.kind, ev.nodeid, ev.summary)
        data = ev.data
        if ev.kind == "environment":
            ok = data.get("ok")
            item = str(data.get("item", ""))
            if ok is False:
                out.environment.append(Problem(ref, f"environment-{item}",
                                               ITEM_LAYER.get(item)))
            elif ok is None:
                out.unknown_env.append(ref)
        elif ev.kind == "classification":
            _classification(out, ref, data)
        elif ev.kind == "timeline":
            if _init_done(data):
                out.init_completed = out.init_completed or ref
            if _first_response(data):
                out.responses.append(ref)
        elif ev.kind == "load":
            last_load[ev.nodeid] = data
            out.runs.append(run_from(data, ref))
        elif ev.kind == "headroom":
            # the k3_headroom marker judges the test's last load run: the target load
            joined = {"profile": find(last_load.get(ev.nodeid, {}), "profile", default={}),
                      "summary": find(last_load.get(ev.nodeid, {}), "summary", default={}),
                      **data}
            if not isinstance(joined["profile"], Mapping):
                joined["profile"] = find(last_load.get(ev.nodeid, {}), "profile", default={})
            out.runs.append(run_from(joined, ref, target=True))
        elif ev.kind == "procedure":
            for step in data.get("steps") or []:
                if (isinstance(step, Mapping) and step.get("status") == "ran"
                        and step.get("capacity", True)):
                    sref = Ref(f"procedure step {step.get('n')} {step.get('name')}", ev.nodeid,
                               f"step {step.get('n')} {step.get('name')}: "
                               f"{step.get('summary', '')}".strip())
                    out.runs.append(run_from(step, sref, target=bool(step.get("target"))))
        elif ev.kind == "prefix-cache-ab":
            out.cache_ab.append((ref, bool(data.get("ok"))))
        elif ev.kind == "response" and data.get("ok", True):
            out.responses.append(ref)
        elif ev.kind == "audience" and data.get("audience"):
            out.audience = str(data["audience"]).lower()
    return out


def _classification(out: Findings, ref: Ref, data: Mapping[str, Any]) -> None:
    category = str(data.get("category") or "none")
    raw = find(data, "evidence_lines", "lines", default=None)
    if raw is None:
        raw = [q.get("text", q) if isinstance(q, Mapping) else q
               for q in find(data, "evidence", default=[]) or []]
    lines = tuple(str(x) for x in raw) if isinstance(raw, (list, tuple)) else (str(raw),)
    if category in ENVIRONMENT_CATEGORIES:
        layer = data.get("layer")
        if layer is None:
            layer = {"connection": "network", "loading": None}.get(category, "container")
            if category == "environment" and any("driver" in x.lower() for x in lines):
                layer = "driver"
        out.environment.append(Problem(ref, category, layer, lines))
    elif category in CAPACITY_CATEGORIES:
        out.capacity.append(Problem(ref, category, None, lines))
    elif category in BLOCKING_CATEGORIES:
        out.blocking.append(Problem(ref, category, None, lines))
    if find(data, "init_completed", "init_done") is True:
        out.init_completed = out.init_completed or ref
