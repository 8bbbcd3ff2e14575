"""Pure helpers of the ready suites: the server's startup arguments and the preset's checks.

vLLM logs its command-line arguments once at startup, as a Python dict::

    (APIServer pid=32384) INFO 11-30 00:19:05 [api_utils.py:286] non-default args:
    {'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', ..., 'max_model_len': 2048}

:func:`server_args` reads the last such line of a log (the current start) and keeps only the
keys the suites compare with a preset (:data:`KEYS`), so that nothing else of the command
line (an ``api_key`` ...) travels into evidence. No pytest, no network.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

#: startup arguments the suites compare with a preset
KEYS = ("tool_call_parser", "reasoning_parser", "enable_auto_tool_choice",
        "enable_prefix_caching", "enable_expert_parallel", "data_parallel_size",
        "tensor_parallel_size", "pipeline_parallel_size", "all2all_backend", "max_model_len",
        "prefix_cache_retention_interval")
_LINE = re.compile(r"non-default args:\s*(\{.*\})\s*$")
_PAIR = re.compile(r"'(\w+)':\s*('(?:[^'\\]|\\.)*'|True|False|None|-?\d+(?:\.\d+)?)")


def server_args(log: str | Iterable[str], keys: Sequence[str] = KEYS,
                ) -> dict[str, Any] | None:
    """The startup arguments of the last start in ``log`` (text or lines; only ``keys``,
    default :data:`KEYS`), or None when the log has no ``non-default args`` line."""
    found = None
    for line in log.splitlines() if isinstance(log, str) else log:
        m = _LINE.search(line.rstrip())
        if m:
            found = m.group(1)
    if found is None:
        return None
    try:
        parsed = ast.literal_eval(found)
        values = parsed if isinstance(parsed, dict) else {}
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        values = {k: ast.literal_eval(v) for k, v in _PAIR.findall(found)}
    return {k: values[k] for k in keys if k in values}


def command_args(words: Sequence[str], keys: Sequence[str]) -> tuple[dict[str, Any],
                                                                      dict[str, str]]:
    """The ``keys`` among a launch command's ``--flag [value]`` options (``--no-x``: x False;
    the last occurrence wins) and its ``env K=V`` assignments."""
    env: dict[str, str] = {}
    i = 1 if words and words[0].rsplit("/", 1)[-1] == "env" else 0
    while i < len(words):
        if words[i] == "-u":  # env -u NAME: unset, not an assignment
            i += 2
            continue
        if words[i] == "-i" or "=" not in words[i] or words[i].startswith("-"):
            if words[i] != "-i":
                break
            i += 1
            continue
        name, _, value = words[i].partition("=")
        env[name] = value
        i += 1
    found: dict[str, Any] = {}
    for j, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, eq, value = word[2:].partition("=")
        key, positive = name.replace("-", "_"), True
        if key.startswith("no_"):
            key, positive = key[3:], False
        if key not in keys:
            continue
        nxt = words[j + 1] if j + 1 < len(words) else None
        found[key] = value if eq else (nxt if positive and nxt is not None
                                       and not nxt.startswith("--") else positive)
    return found, env


def layout_problems(args: Mapping[str, Any], *, expert_parallel: bool | None,
                    min_dp: int | None, min_tp: int | None) -> list[str]:
    """What the server's parallel layout lacks against the preset (empty: it matches).

    Absent arguments take vLLM's defaults (no expert parallelism, DP 1, TP 1)."""
    problems = []
    ep = bool(args.get("enable_expert_parallel", False))
    dp = int(args.get("data_parallel_size", 1) or 1)
    tp = int(args.get("tensor_parallel_size", 1) or 1)
    if expert_parallel is not None and ep != expert_parallel:
        problems.append(f"expert parallelism is {'on' if ep else 'off'}, the preset expects "
                        f"{'--enable-expert-parallel' if expert_parallel else 'it off'}")
    if min_dp is not None and dp < min_dp:
        problems.append(f"data-parallel size {dp}, the preset expects at least {min_dp}")
    if min_tp is not None and tp < min_tp:
        problems.append(f"tensor-parallel size {tp}, the preset expects at least {min_tp}")
    return problems


def all2all_problem(backend: str, interconnects: Mapping[str, Mapping[str, bool | None]],
                    allowed: Mapping[str, Sequence[str]]) -> tuple[bool | None, str]:
    """Does the ``--all2all-backend`` fit the interconnect the host facts show?

    ``interconnects`` is :meth:`HostFacts.interconnects` (node -> {"nvlink": ..., "rdma":
    ...}); more than one node means the all-to-all crosses nodes (RDMA). Returns (ok, words);
    ok is None when the facts do not tell the interconnect."""
    nodes = list(interconnects.values())
    if not nodes:
        return None, "no host facts tell the interconnect"
    if len(nodes) > 1:
        path = "rdma" if all(n.get("rdma") for n in nodes) else None
        if path is None:
            return False, (f"{len(nodes)} nodes but not every node has an RDMA device: the "
                           "cross-node all-to-all has no RDMA path")
    elif nodes[0].get("nvlink"):
        path = "nvlink"
    elif nodes[0].get("nvlink") is False:
        return False, "one node without active NVLink: the all-to-all has no NVLink path"
    else:
        return None, "the host facts do not say whether NVLink is active"
    fits = list(allowed.get(path, ()))
    if not fits:
        return None, f"the preset lists no all-to-all backends for {path}"
    ok = backend in fits
    return ok, (f"--all2all-backend {backend} over {path}: "
                + ("fits" if ok else f"does not fit; the preset allows {', '.join(fits)}"))


def tool_call_problems(calls: Sequence[Mapping[str, Any]],
                       tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """What is malformed in parsed tool calls (empty: every call names a defined tool and
    carries JSON-object arguments with the tool's required keys that validate against its
    ``parameters`` JSON schema)."""
    defined, schemas = {}, {}
    for tool in tools:
        spec = tool.get("function", {}) if isinstance(tool, Mapping) else {}
        defined[spec.get("name")] = spec.get("parameters", {}).get("required", [])
        schemas[spec.get("name")] = spec.get("parameters")
    problems = []
    for i, call in enumerate(calls):
        raw = call.get("function")
        fn: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        name = fn.get("name")
        if name not in defined:
            problems.append(f"call {i}: function {name!r} is not among the defined tools "
                            f"({', '.join(str(n) for n in defined)})")
            continue
        try:
            arguments = json.loads(fn.get("arguments") or "{}")
        except (TypeError, ValueError):
            problems.append(f"call {i} ({name}): arguments are not JSON: "
                            f"{str(fn.get('arguments'))[:120]!r}")
            continue
        if not isinstance(arguments, dict):
            problems.append(f"call {i} ({name}): arguments are not a JSON object")
            continue
        missing = [k for k in defined[name] if k not in arguments]
        if missing:
            problems.append(f"call {i} ({name}): required argument(s) missing: "
                            f"{', '.join(missing)}")
            continue
        wrong = schema_problem(arguments, schemas.get(name))
        if wrong:
            problems.append(f"call {i} ({name}): arguments do not match the tool's JSON "
                            f"schema: {wrong}")
    return problems


def schema_problem(arguments: Any, schema: Any) -> str | None:
    """The first way ``arguments`` break the tool's ``parameters`` JSON schema (types, enums,
    extra keys where the schema forbids them), or None; None too without a schema."""
    if not isinstance(schema, Mapping) or not schema:
        return None
    import jsonschema

    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    except jsonschema.exceptions.SchemaError as exc:
        return f"the tool's own schema is invalid: {exc.message}"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "arguments"
    return f"{where}: {error.message}"


@dataclass(frozen=True)
class ToolCallRate:
    """Parsed tool calls over N attempts: how many came back parsed, and how many of those
    validated against the tool's JSON schema, against the preset's minimum share."""

    attempts: int
    parsed: int
    valid: int
    minimum: float
    problems: tuple[str, ...] = ()

    @property
    def rate(self) -> float:
        """Attempts that parsed and validated / attempts."""
        return self.valid / self.attempts if self.attempts else 0.0

    @property
    def ok(self) -> bool:
        return self.attempts > 0 and self.rate >= self.minimum - 1e-12

    def line(self) -> str:
        """One line with the figures."""
        return (f"{self.valid} of {self.attempts} attempts parsed and matched the tool's "
                f"schema ({self.rate:.0%}, at least {self.minimum:.0%} needed); "
                f"{self.parsed} parsed")

    def as_dict(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "parsed": self.parsed, "valid": self.valid,
                "rate": self.rate, "minimum": self.minimum, "ok": self.ok,
                "problems": list(self.problems)}


def tool_call_rate(calls_per_attempt: Sequence[Sequence[Mapping[str, Any]]],
                   tools: Sequence[Mapping[str, Any]], minimum: float) -> ToolCallRate:
    """Judge N attempts (each the parsed ``tool_calls`` of one answer; empty: not parsed)."""
    parsed = valid = 0
    problems: list[str] = []
    for n, calls in enumerate(calls_per_attempt, 1):
        if not calls:
            problems.append(f"attempt {n}: no parsed tool call")
            continue
        parsed += 1
        found = tool_call_problems(calls, tools)
        if found:
            problems.append(f"attempt {n}: " + "; ".join(found))
        else:
            valid += 1
    return ToolCallRate(len(calls_per_attempt), parsed, valid, minimum, tuple(problems))


def near_target(target: int, served: int | None, output: int, fraction: float,
                ) -> tuple[int, str | None]:
    """The prompt length of the near-target prefill and, if the server cannot take one
    near the target, why. The prompt is ``target`` capped by ``served - output - 16``."""
    room = None if served is None else served - output - 16
    tokens = target if room is None else min(target, room)
    if tokens < fraction * target:
        return tokens, (f"the server serves max_model_len {served}, which leaves {tokens} "
                        f"prompt tokens: less than {fraction:.0%} of the target context "
                        f"{target}. Serve the target context (--max-model-len) or lower the "
                        "target in the profile/preset")
    return tokens, None


#: verdicts a capacity suite (agent, production) accepts; the others fail its verdict test
ACCEPTED_VERDICTS = ("keep", "accept-limits")


def verdict_problem(verdict: Any) -> str | None:
    """Why a capacity suite's verdict is not acceptable (None for keep / accept-limits)."""
    if verdict.name in ACCEPTED_VERDICTS:
        return None
    lines = [f"verdict {verdict.name}: {verdict.headline}"]
    lines += [f"because: {r}" for r in verdict.reasons[:6]]
    lines += [f"advice: {a}" for a in verdict.advice[:3]]
    return "\n".join(lines)
