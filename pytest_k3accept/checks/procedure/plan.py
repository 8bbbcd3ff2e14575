"""The re-measurement procedure (the seed's agent-team steps 1-7) as a plan of steps (pure).

1. fix the request set (the same set for every load step);
2. baseline at the target load with prefix caching on: peak KV usage, hit state;
3. lower concurrency (vs step 2);
4. lower context length (vs step 3, so context and concurrency change one at a time);
5. change the cache retention policy: two relaunches that differ only in
   ``--prefix-cache-retention-interval`` (``retention_base_interval`` vs
   ``retention_interval``), both with the chunked-prefill setting that makes them differ
   (``--max-num-batched-tokens``), each the same request set one request at a time; hit state
   and prefill time compared (:mod:`.retention`; ``--k3-launch`` only);
6. restore context, concurrency and cache to the targets and check stability (vs step 2);
7. classify: no headroom at the targets means "needs scaling", not "tuned".

Each step names its base step and the one variable it changes; :func:`one_variable` checks
that from the steps' actual loads and server flags. Parameters come from the profile: the
targets from the load profile, the reduced values from its ``[procedure]`` table::

    [procedure]
    reduced_concurrency = 4          # default: half the target concurrency (at least 1)
    reduced_context_tokens = 3000    # default: half the target context
    retention_interval = 1024        # step 5: --prefix-cache-retention-interval N
    retention_base_interval = 0      # ... compared with this one (vLLM's default 0)
    retention_batched_tokens = 1024  # both arms: --max-num-batched-tokens (default: the
                                     # interval; 0: the launch's own setting)
    # retention_args = ["--prefix-cache-retention-interval", "512"]   # or the exact flags
    # reduced_request_set = "short.jsonl"  # step 4 for a fixed request-set file
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ...compare.thresholds import ThresholdError, Thresholds
from ...compare.thresholds import from_table as thresholds_from
from ...decide.layers import Layers, LayersError, read_table
from ...observe.load.profile import LoadProfile, ProfileError
from ...observe.load.profile import from_table as load_from_table
AUDIENCES = ("poc", "team", "platform", "production")
NAMES = {1: "fix the request set", 2: "baseline at target, cache on", 3: "lower concurrency",
         4: "lower context length", 5: "change cache retention policy", 6: "restore targets",
         7: "classify"}
RAN, NOT_RUN, NOT_APPLICABLE, FAILED = "ran", "not-run", "not-applicable", "failed"


class ProcedureError(ValueError):
    """A ``[procedure]`` table or decision profile is invalid; the message says where."""


@dataclass(frozen=True)
class ProcedureSpec:
    """The reduced values and the retention flags of the procedure."""

    reduced_concurrency: int | None = None
    reduced_context_tokens: int | None = None
    reduced_rate: float | None = None
    retention_interval: int = 1024
    retention_args: tuple[str, ...] = ()
    reduced_request_set: str | None = None
    retention_base_interval: int = 0
    retention_batched_tokens: int | None = None

    @property
    def retention_flags(self) -> tuple[str, ...]:
        """The changed retention setting of step 5 (without the chunked-prefill flag)."""
        return self.retention_args or ("--prefix-cache-retention-interval",
                                       str(self.retention_interval))

    @property
    def chunk_flags(self) -> tuple[str, ...]:
        """``--max-num-batched-tokens N`` of both step-5 arms (retention matters only when
        prefill is chunked): ``retention_batched_tokens``, else the retention interval (each
        chunk then ends on a retention boundary); ``()`` for 0 or exact ``retention_args``
        without a given value."""
        n = self.retention_batched_tokens
        if n is None and not self.retention_args:
            n = self.retention_interval
        return ("--max-num-batched-tokens", str(n)) if n else ()

    def retention_arms(self) -> list[tuple[str, tuple[str, ...]]]:
        """Step 5's two relaunches, ``[(label, flags)]``: the changed setting first (a model
        that refuses it needs no second relaunch), then the one it is compared with."""
        changed = (" ".join(self.retention_args) if self.retention_args
                   else f"retention {self.retention_interval}")
        base = ("--prefix-cache-retention-interval", str(self.retention_base_interval))
        return [(changed, self.chunk_flags + self.retention_flags),
                (f"retention {self.retention_base_interval}", self.chunk_flags + base)]

    @classmethod
    def from_mapping(cls, data: Any, where: str = "[procedure]") -> "ProcedureSpec":
        """Validate a ``[procedure]`` table; errors name the field and what is expected."""
        if not isinstance(data, Mapping):
            raise ProcedureError(f"{where}: expected a table, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise ProcedureError(f"{where}: {key}: unknown field; known: "
                                     f"{', '.join(sorted(known))}")
            if key == "retention_args":
                if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                    raise ProcedureError(f"{where}: retention_args: expected a list of strings")
                out[key] = tuple(value)
            elif key == "reduced_request_set":
                if not isinstance(value, str) or not value:
                    raise ProcedureError(f"{where}: reduced_request_set: expected a file name")
                out[key] = value
            elif key == "reduced_rate":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                    raise ProcedureError(f"{where}: reduced_rate: expected a positive number, "
                                         f"got {value!r}")
                out[key] = float(value)
            elif key == "retention_batched_tokens" and value is None:
                out[key] = None
            else:
                low = 0 if key in ("retention_interval", "retention_base_interval",
                                   "retention_batched_tokens") else 1
                if isinstance(value, bool) or not isinstance(value, int) or value < low:
                    raise ProcedureError(f"{where}: {key}: expected an integer >= {low}, got "
                                         f"{value!r}")
                out[key] = value
        spec = cls(**out)
        if not spec.retention_args and spec.retention_interval == spec.retention_base_interval:
            raise ProcedureError(f"{where}: retention_interval {spec.retention_interval} equals "
                                 "retention_base_interval: step 5 would compare a setting with "
                                 "itself; give two different intervals")
        return spec


@dataclass(frozen=True)
class DecisionProfile:
    """A profile file read whole: the target load plus the decision tables."""

    load: LoadProfile
    procedure: ProcedureSpec = field(default_factory=ProcedureSpec)
    layers: Layers = field(default_factory=Layers)
    audience: str | None = None
    source: str = ""
    #: the ``[baseline]`` table: regression thresholds against ``--k3-baseline``
    baseline: Thresholds = field(default_factory=Thresholds)

    def target(self) -> dict[str, Any]:
        """The target load the verdict judges against."""
        return {"concurrency": self.load.concurrency, "context_tokens": self.load.context_tokens}


def read_profile(path: str | Path | None, base: LoadProfile | None = None) -> DecisionProfile:
    """Read a profile file: load values, ``[layers]``, ``[procedure]``, ``[baseline]`` and
    ``audience``.

    Raises :class:`ProcedureError` naming the file and field for any bad value.
    """
    if path is None:
        return DecisionProfile(base or LoadProfile(),
                               layers=Layers(source="no profile (--k3-profile) given"))
    p = Path(path)
    try:
        data, text = read_table(p)
        layers = (Layers.from_mapping(data["layers"], f"{p}: [layers]", text)
                  if "layers" in data else Layers(source=f"{p}: no [layers] table"))
    except LayersError as exc:
        raise ProcedureError(str(exc)) from None
    spec = ProcedureSpec.from_mapping(data.get("procedure", {}), f"{p}: [procedure]")
    try:
        baseline = thresholds_from(data.get("baseline"), f"{p}: [baseline]")
    except ThresholdError as exc:
        raise ProcedureError(str(exc)) from None
    audience = data.get("audience")
    if audience is not None and audience not in AUDIENCES:
        raise ProcedureError(f"{p}: audience: expected one of {', '.join(AUDIENCES)}, got "
                             f"{audience!r}")
    try:
        load = load_from_table(data, p, base)
    except ProfileError as exc:
        raise ProcedureError(str(exc)) from None
    if spec.reduced_request_set and not Path(spec.reduced_request_set).is_absolute():
        spec = dataclasses.replace(spec, reduced_request_set=str(
            (p.parent / spec.reduced_request_set).resolve()))
    return DecisionProfile(load, spec, layers, audience, str(p), baseline)


@dataclass
class Step:
    """One step: what it runs, against which base step, and what came out."""

    n: int
    base: int | None = None
    variable: str = "none"
    change: str = ""
    profile: LoadProfile | None = None
    server_args: tuple[str, ...] = ()
    target: bool = False
    capacity: bool = True
    needs_relaunch: bool = False
    status: str = "planned"
    reason: str = ""
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return NAMES[self.n]

    def as_dict(self) -> dict[str, Any]:
        """Flat plain data for the step log (read back by :mod:`.findings`)."""
        p = self.profile
        return {"n": self.n, "name": self.name, "base": self.base, "variable": self.variable,
                "change": self.change, "status": self.status, "reason": self.reason,
                "target": self.target, "capacity": self.capacity and p is not None,
                "server_args": list(self.server_args),
                "concurrency": p.concurrency if p else None,
                "context_tokens": p.context_tokens if p else None,
                "rate": p.rate if p else None, **self.figures}

    def line(self) -> str:
        """One line of the step log."""
        vs = f" (vs step {self.base}: {self.change})" if self.base else (
            f" ({self.change})" if self.change else "")
        why = f" - {self.reason}" if self.reason else ""
        return f"step {self.n} {self.name}{vs}: {self.status.upper()}{why}"


def plan(dp: DecisionProfile, *, can_relaunch: bool, fixed_set: bool) -> list[Step]:
    """The seven steps for a profile; steps that cannot run here are marked with the reason."""
    target, spec = dp.load, dp.procedure
    steps = [Step(1, capacity=False, change="same request set for every load step"),
             Step(2, profile=target, target=True, change="targets, prefix caching on")]
    s3 = Step(3, base=2)
    if target.open_loop:
        rate = spec.reduced_rate or (target.rate or 0) / 2
        s3.variable, s3.change = "rate", f"rate {target.rate:g} -> {rate:g} req/s"
        s3.profile = target.replace("[procedure]", rate=rate, concurrency=target.concurrency)
    else:
        conc = target.concurrency or 1
        lower = spec.reduced_concurrency or max(1, conc // 2)
        s3.variable, s3.change = "concurrency", f"concurrency {conc} -> {lower}"
        if lower >= conc:
            s3.status, s3.reason = NOT_APPLICABLE, f"the target concurrency is {conc}; " \
                                                   f"nothing lower to try ({lower})"
        else:
            s3.profile = target.replace("[procedure]", concurrency=lower)
    steps.append(s3)
    prev = s3 if s3.profile is not None else steps[1]
    assert prev.profile is not None
    ctx = target.context_tokens
    lower_ctx = spec.reduced_context_tokens or max(1, ctx // 2)
    s4 = Step(4, base=prev.n, variable="context_tokens",
              change=f"context {ctx} -> {lower_ctx} tokens")
    if lower_ctx >= ctx:
        s4.status, s4.reason = NOT_APPLICABLE, f"reduced context {lower_ctx} is not below " \
                                               f"the target {ctx}"
    elif fixed_set and not spec.reduced_request_set:
        s4.status, s4.reason = NOT_APPLICABLE, (
            "the request set is a fixed file: its context cannot be lowered without changing "
            "the requests; give [procedure] reduced_request_set = \"FILE\"")
    else:
        changes: dict[str, Any] = {"context_tokens": lower_ctx}
        if prev.profile.prefix_tokens >= lower_ctx:
            changes["prefix_tokens"] = lower_ctx // 2
            s4.change += (f" (shared prefix {prev.profile.prefix_tokens} -> {lower_ctx // 2} "
                          "tokens to fit inside it)")
        if spec.reduced_request_set:
            changes["request_set"] = spec.reduced_request_set
        s4.profile = prev.profile.replace("[procedure]", **changes)
    steps.append(s4)
    (changed_label, changed_args), (base_label, _) = spec.retention_arms()
    chunk = " ".join(spec.chunk_flags) or "the launch's own --max-num-batched-tokens"
    s5 = Step(5, base=2, variable="server flags", profile=target, capacity=False,
              server_args=changed_args, needs_relaunch=True,
              change=f"cache retention: {base_label} -> {changed_label}, two relaunches with "
                     f"{chunk}, the request set one request at a time")
    if not can_relaunch:
        s5.status, s5.reason = NOT_RUN, (
            "needs a relaunch with changed server flags; the endpoint is fixed (start the "
            "server with --k3-launch to let the plugin relaunch it)")
    steps.append(s5)
    steps.append(Step(6, base=2, profile=target, target=True,
                      change="context, concurrency and cache back at the targets"))
    steps.append(Step(7, capacity=False))
    return steps


_COMPARED = ("concurrency", "context_tokens", "rate", "request_set")


def changed(step: Step, base: Step) -> list[str]:
    """The variables that differ between a step and its base (load values, server flags)."""
    out = []
    if step.profile is not None and base.profile is not None:
        out = [k for k in _COMPARED if getattr(step.profile, k) != getattr(base.profile, k)]
    if "context_tokens" in out and "request_set" in out:
        out.remove("request_set")  # a shorter request set is how a fixed set lowers context
    if step.server_args != base.server_args:
        out.append("server flags")
    return out


def one_variable(steps: list[Step]) -> tuple[bool, list[str]]:
    """True when every step that ran changed at most one variable against its base step."""
    by_n = {s.n: s for s in steps}
    problems = []
    for s in steps:
        base = by_n.get(s.base) if s.base else None
        if s.status != RAN or base is None:
            continue
        diff = changed(s, base)
        if len(diff) > 1:
            problems.append(f"step {s.n} changed {', '.join(diff)} at once (vs step {base.n})")
    return not problems, problems
