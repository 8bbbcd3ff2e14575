"""What changed between two records' conditions (pure; no pytest).

Every reproduction field that differs is a :class:`Change` ("changed: image: A -> B"), the
launch arguments one by one and the environment variables one by one. A change *counts* as a
changed variable (for C7 across sessions) unless it is incidental: the port a launched server
got, the plugin's own ``K3ACCEPT_*`` settings, the pytest process's environment when the
server's own is not visible. A field known on one side only is not a change but "not
compared"; the request sets are compared by fingerprint (:func:`request_sets`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..output.reproduction import parse_args
from .figures import Run
from .read import Record

#: reproduction fields that are conditions of the measurement (variables), with labels
VARIABLES: tuple[tuple[str, str], ...] = (
    ("image", "image"), ("vllm_version", "vLLM version"), ("host_driver", "host driver"),
    ("host_cuda_version", "host CUDA version"), ("cuda_runtime", "CUDA runtime"),
    ("gpu_model", "GPU model"), ("gpu_count", "GPUs"), ("node_count", "nodes"),
    ("tensor_parallel", "TP"), ("pipeline_parallel", "PP"), ("data_parallel", "DP"),
    ("expert_parallel", "EP"), ("disaggregation", "prefill/decode disaggregation"),
    ("model", "model"), ("max_context", "max context"), ("concurrency", "concurrency"),
    ("output_length", "output length"), ("recipe", "official recipe"))
#: launch flags that are the same variable as a reproduction field
FLAG_FIELDS: dict[str, str] = {
    "--tensor-parallel-size": "tensor_parallel", "-tp": "tensor_parallel",
    "--pipeline-parallel-size": "pipeline_parallel", "-pp": "pipeline_parallel",
    "--data-parallel-size": "data_parallel", "-dp": "data_parallel",
    "--enable-expert-parallel": "expert_parallel", "-ep": "expert_parallel",
    "--no-enable-expert-parallel": "expert_parallel", "--kv-transfer-config": "disaggregation",
    "--max-model-len": "max_context", "--served-model-name": "model"}
#: launch flags whose change is incidental (not a condition of the measurement)
INCIDENTAL_FLAGS: dict[str, str] = {"--port": "a launched server gets a free port each time"}
ABSENT = "(absent)"
SAME, DIFFERENT, UNKNOWN = "same", "different", "unknown"


def show(value: Any) -> str:
    """A value as the comparison prints it (compact JSON for tables and lists)."""
    if value is None:
        return "unknown"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class Change:
    """One condition that differs: ``variable`` (what C7 counts), label, the two values,
    and why it does not count when it does not."""

    variable: str
    label: str
    old: str
    new: str
    incidental: str = ""

    @property
    def counted(self) -> bool:
        return not self.incidental

    def line(self) -> str:
        tail = f" (not counted: {self.incidental})" if self.incidental else ""
        return f"changed: {self.label}: {self.old} -> {self.new}{tail}"

    def as_dict(self) -> dict[str, Any]:
        return {"variable": self.variable, "label": self.label, "old": self.old,
                "new": self.new, "counted": self.counted, "incidental": self.incidental,
                "line": self.line()}


@dataclass
class Conditions:
    """The conditions compared: changes, fields known on one side only, fields unknown on
    both sides."""

    changes: list[Change] = field(default_factory=list)
    one_sided: list[str] = field(default_factory=list)
    unknown_both: list[str] = field(default_factory=list)

    @property
    def variables(self) -> list[str]:
        """The changed variables that count (distinct, in order)."""
        return list(dict.fromkeys(c.variable for c in self.changes if c.counted))

    def changed_lines(self) -> list[str]:
        """"A -> B" of each counted change, one per variable."""
        return [c.line() for c in self.changes if c.counted]


def _fact(record: Record, name: str) -> Mapping[str, Any]:
    found = (record.data.get("reproduction") or {}).get(name)
    return found if isinstance(found, Mapping) else {}


def conditions(old: Record, new: Record) -> Conditions:
    """Every condition that differs between ``old`` (the baseline) and ``new``."""
    out = Conditions()
    for name, label in VARIABLES:
        a, b = _fact(old, name).get("value"), _fact(new, name).get("value")
        if a is None and b is None:
            out.unknown_both.append(label)
        elif a is None or b is None:
            side = "the baseline" if a is None else "this session"
            out.one_sided.append(f"{label}: unknown in {side} ({show(a)} -> {show(b)})")
        elif a != b:
            out.changes.append(Change(name, label, show(a), show(b)))
    _args(old, new, out)
    _environment(old, new, out)
    return out


def _flags(record: Record) -> dict[str, Any] | None:
    words = _fact(record, "launch_args").get("value")
    if not isinstance(words, list):
        return None
    return parse_args([str(w) for w in words])[1]


def _args(old: Record, new: Record, out: Conditions) -> None:
    a, b = _flags(old), _flags(new)
    if a is None or b is None:
        if a is None and b is None:
            out.unknown_both.append("launch arguments")
        else:
            side = "the baseline" if a is None else "this session"
            out.one_sided.append(f"launch arguments: unknown in {side} (the server was not "
                                 "started by the plugin there)")
        return
    both_known = {name for name, _ in VARIABLES
                  if _fact(old, name).get("value") is not None
                  and _fact(new, name).get("value") is not None}
    for flag in dict.fromkeys([*a, *b]):
        if a.get(flag) == b.get(flag) or FLAG_FIELDS.get(flag) in both_known:
            continue  # the field's own change (if any) is listed above
        out.changes.append(Change(FLAG_FIELDS.get(flag, flag), f"launch argument {flag}",
                                  _arg(a, flag), _arg(b, flag), INCIDENTAL_FLAGS.get(flag, "")))


def _arg(flags: Mapping[str, Any], flag: str) -> str:
    if flag not in flags:
        return ABSENT
    value = flags[flag]
    return "(set)" if value is True else str(value)


def _environment(old: Record, new: Record, out: Conditions) -> None:
    fa, fb = _fact(old, "environment"), _fact(new, "environment")
    a, b = fa.get("value"), fb.get("value")
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        if a is None and b is None:
            out.unknown_both.append("environment")
        return
    not_server = any("pytest process only" in str(f.get("source") or "") for f in (fa, fb))
    for key in dict.fromkeys([*a, *b]):
        if a.get(key) == b.get(key):
            continue
        why = ("the plugin's own setting" if key.startswith("K3ACCEPT_") else
               "the pytest process's environment; the server's own is not visible"
               if not_server else "")
        out.changes.append(Change(f"env {key}", f"environment {key}",
                                  str(a.get(key, ABSENT)), str(b.get(key, ABSENT)), why))


@dataclass(frozen=True)
class RequestSets:
    """The request sets of the two sessions, compared by fingerprint."""

    status: str
    line: str
    old: tuple[str, ...] = ()
    new: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "line": self.line, "old": list(self.old),
                "new": list(self.new)}


def _record_fingerprints(record: Record) -> list[str]:
    value = _fact(record, "requests").get("value")
    items = value if isinstance(value, list) else [value]
    return list(dict.fromkeys(str(v["fingerprint"]) for v in items
                              if isinstance(v, Mapping) and v.get("fingerprint")))


def request_sets(old: Record, new: Record, pairs: Sequence[tuple[Run, Run]]) -> RequestSets:
    """Same / different / unknown: the matched runs' fingerprints, else the records'."""
    known = [(o, n) for o, n in pairs if o.fingerprint and n.fingerprint]
    if known:
        differ = [(o, n) for o, n in known if o.fingerprint != n.fingerprint]
        fa = tuple(dict.fromkeys(str(o.fingerprint) for o, _ in known))
        fb = tuple(dict.fromkeys(str(n.fingerprint) for _, n in known))
        if not differ:
            return RequestSets(SAME, f"same request set: fingerprint "
                               f"{', '.join(f[:12] for f in fa)} in both sessions", fa, fb)
        what = "; ".join(f"{o.label}: {str(o.fingerprint)[:12]} -> {str(n.fingerprint)[:12]}"
                         for o, n in differ)
        return RequestSets(DIFFERENT, f"DIFFERENT request set ({what}): the figures are not a "
                           "before/after on the same requests, so C6/C7 cannot pass on it",
                           fa, fb)
    fa, fb = tuple(_record_fingerprints(old)), tuple(_record_fingerprints(new))
    if not fa or not fb:
        side = ("either session" if not fa and not fb else
                "the baseline" if not fa else "this session")
        return RequestSets(UNKNOWN, f"request set unknown in {side} (no load run recorded "
                           "its fingerprint): whether the requests were the same cannot be "
                           "told", fa, fb)
    if set(fa) == set(fb):
        return RequestSets(SAME, f"same request set: fingerprint "
                           f"{', '.join(f[:12] for f in fa)} in both sessions", fa, fb)
    return RequestSets(DIFFERENT, f"DIFFERENT request set: {', '.join(f[:12] for f in fa)} -> "
                       f"{', '.join(f[:12] for f in fb)}: the figures are not a before/after "
                       "on the same requests, so C6/C7 cannot pass on it", fa, fb)
