"""The fields of a preset file and their validation (see :mod:`pytest_k3accept.config.presets`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping

from ...checks.slo import SLO, SLOError, suggest
from .model import (INTERCONNECTS, PREFIX_MODES, Environment, Preset, PresetError, RecipeRef,
                    Server, Suites, Targets)

Check = Callable[[Any], Any]


def _int(minimum: int) -> Check:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ValueError(f"expected a whole number >= {minimum}")
        return v
    return check


def _number(low: float, high: float | None = None, *, open_low: bool = False) -> Check:
    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError("expected a number")
        if v < low or (open_low and v == low) or (high is not None and v > high):
            bound = f"> {low:g}" if open_low else f">= {low:g}"
            raise ValueError(f"expected a number {bound}"
                             + (f" and <= {high:g}" if high is not None else ""))
        return float(v)
    return check


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("expected true or false")
    return v


def _text(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("expected a non-empty string")
    return v.strip()


def _driver(v: Any) -> str:
    from ...observe.host.versions import VersionError, parse_driver

    text = _text(str(v) if isinstance(v, int) and not isinstance(v, bool) else v)
    try:
        parse_driver(text)
    except VersionError as exc:
        raise ValueError(str(exc)) from None
    return text


def _choice(options: tuple[str, ...]) -> Check:
    def check(v: Any) -> str:
        if v not in options:
            raise ValueError(f"expected one of {', '.join(repr(o) for o in options)}")
        return str(v)
    return check


def _backends(v: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(v, Mapping):
        raise ValueError("expected a table: interconnect = [all2all backends]")
    out: dict[str, tuple[str, ...]] = {}
    for key, names in v.items():
        if key not in INTERCONNECTS:
            raise ValueError(f"{key}: unknown interconnect; expected {', '.join(INTERCONNECTS)}")
        if not isinstance(names, list) or not names or not all(
                isinstance(n, str) and n for n in names):
            raise ValueError(f"{key}: expected a non-empty list of backend names")
        out[str(key)] = tuple(names)
    return out


#: section -> (dataclass, {field: check}); key "" is the top level
SECTIONS: dict[str, tuple[type, dict[str, Check]]] = {
    "environment": (Environment, {
        "driver_min": _driver, "cuda_major": _int(1), "cuda_minor": _int(0), "gpus": _int(1),
        "nodes": _int(1), "interconnect": _choice(INTERCONNECTS), "reason": _text}),
    "server": (Server, {
        "max_model_len": _int(1), "enable_expert_parallel": _bool,
        "min_data_parallel_size": _int(1), "min_tensor_parallel_size": _int(1),
        "all2all_backends": _backends, "prefix_caching": _choice(PREFIX_MODES),
        "min_prefix_cache_hit_rate": _number(0.0, 1.0), "tool_call_parser": _text,
        "reasoning_parser": _text, "require_parsed_tool_call": _bool,
        "parsed_tool_call_reason": _text, "kv_cache_bytes": _int(1), "kv_cache_dtype": _text,
        "block_size": _int(1), "prefix_match_unit": _int(1), "mamba_cache_mode": _text}),
    "targets": (Targets, {
        "context_tokens": _int(1), "concurrency": _int(1), "output_tokens": _int(1),
        "prefix_tokens": _int(0), "prefix_reuse": _number(0.0, 1.0), "requests": _int(1),
        "max_seconds": _number(0.0, open_low=True)}),
}
#: the per-suite tables, flattened into :class:`Suites` (table, key) -> (attribute, check)
SUITE_FIELDS: dict[tuple[str, str], tuple[str, Check]] = {
    ("poc", "max_tokens"): ("poc_max_tokens", _int(1)),
    ("poc", "tool_call_max_tokens"): ("poc_tool_call_max_tokens", _int(1)),
    ("poc", "tool_call_attempts"): ("poc_tool_call_attempts", _int(1)),
    ("poc", "min_tool_call_rate"): ("poc_min_tool_call_rate", _number(0.0, 1.0)),
    ("platform", "prefill_tokens"): ("prefill_tokens", _int(1)),
    ("platform", "prefill_fraction"): ("prefill_fraction", _number(0.0, 1.0, open_low=True)),
    ("agent", "request_set"): ("agent_request_set", _text),
    ("production", "restart_timeout"): ("restart_timeout", _number(0.0, open_low=True)),
    ("production", "drain_timeout"): ("drain_timeout", _number(0.0, open_low=True)),
    ("production", "restart_requests"): ("restart_requests", _int(1)),
}
#: ``[recipe]``: the official recipe the deployment expectations come from
RECIPE_FIELDS: dict[str, Check] = {"file": _text, "hardware": _text, "strategy": _text}
TOP = ("name", "description", "recipe", "slo", *SECTIONS, "poc", "platform", "agent",
       "production")


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise PresetError(f"{where}: [{key}]: expected a table, got {type(value).__name__}")
    return value


def _fields(table: Mapping[str, Any], rules: Mapping[str, Check], section: str,
            where: str) -> dict[str, Any]:
    out = {}
    for key, value in table.items():
        if key not in rules:
            raise PresetError(f"{where}: {section}.{key}: unknown field"
                              f"{suggest(str(key), list(rules))}; known: {', '.join(rules)}")
        try:
            out[key] = rules[key](value)
        except ValueError as exc:
            raise PresetError(f"{where}: {section}.{key}: {exc}, got {value!r}") from None
    return out


def from_mapping(data: Mapping[str, Any], source: str | Path = "preset") -> Preset:
    """Validate a decoded preset table; relative file names resolve against ``source``."""
    where = str(source)
    for key in data:
        if key not in TOP:
            raise PresetError(f"{where}: {key}: unknown field or table"
                              f"{suggest(str(key), list(TOP))}; known: {', '.join(TOP)}")
    name = data.get("name", Path(where).stem)
    if not isinstance(name, str) or not name.strip():
        raise PresetError(f"{where}: name: expected a non-empty string, got {name!r}")
    desc = data.get("description", "")
    if not isinstance(desc, str):
        raise PresetError(f"{where}: description: expected a string, got {desc!r}")
    parts: dict[str, Any] = {}
    for section, (cls, rules) in SECTIONS.items():
        parts[section] = cls(**_fields(_table(data, section, where), rules, section, where))
    suite_values: dict[str, Any] = {}
    for table_name in ("poc", "platform", "agent", "production"):
        attrs = {k: rule[0] for (t, k), rule in SUITE_FIELDS.items() if t == table_name}
        checks = {k: rule[1] for (t, k), rule in SUITE_FIELDS.items() if t == table_name}
        for key, value in _fields(_table(data, table_name, where), checks, table_name,
                                  where).items():
            suite_values[attrs[key]] = value
    suites = Suites(**suite_values)
    if suites.agent_request_set and not Path(suites.agent_request_set).is_absolute():
        resolved = (Path(where).parent / suites.agent_request_set).resolve()
        suites = Suites(**{**suites.__dict__, "agent_request_set": str(resolved)})
    try:
        slo = SLO.from_mapping(_table(data, "slo", where), "slo")
    except SLOError as exc:
        raise PresetError(f"{where}: {exc}") from None
    targets: Targets = parts["targets"]
    if targets.prefix_tokens >= targets.context_tokens:
        raise PresetError(f"{where}: targets.prefix_tokens ({targets.prefix_tokens}) must be "
                          f"smaller than targets.context_tokens ({targets.context_tokens})")
    server: Server = parts["server"]
    if server.max_model_len is not None and targets.context_tokens > server.max_model_len:
        raise PresetError(f"{where}: targets.context_tokens ({targets.context_tokens}) is larger "
                          f"than server.max_model_len ({server.max_model_len})")
    return Preset(name=name.strip(), description=desc.strip(), source=where,
                  environment=parts["environment"], server=server, targets=targets,
                  suites=suites, slo=slo, recipe=_recipe(data, where))


def _recipe(data: Mapping[str, Any], where: str) -> RecipeRef | None:
    """``[recipe]`` (its ``file`` resolved against the preset file), or None."""
    if "recipe" not in data:
        return None
    values = _fields(_table(data, "recipe", where), RECIPE_FIELDS, "recipe", where)
    if "file" not in values:
        raise PresetError(f"{where}: recipe.file: missing; the [recipe] table names the "
                          "official recipe YAML (relative to the preset file)")
    path = Path(values["file"]).expanduser()
    if not path.is_absolute():
        path = (Path(where).parent / path).resolve()
    return RecipeRef(file=str(path), hardware=values.get("hardware"),
                     strategy=values.get("strategy"))
