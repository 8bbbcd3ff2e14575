"""The reproduction fields of the record, derived from a session's evidence and settings.

Every field is a *fact*: ``{"value": <anything but null>, "source": "<where it came from>"}``
when known, ``{"value": null, "reason": "<why it is unknown and how to supply it>"}`` when
not. Nothing is guessed and nothing is silently left out. The producers of evidence (host
facts, server timeline and classification, load runs, endpoint discovery) are read
generically: a field takes the values of a few well-known keys found anywhere in the
``data`` of evidence of the relevant kinds.

Pure logic: no pytest import, no I/O (the environment mapping is passed in).
"""

from __future__ import annotations

import json
import shlex
import time
from typing import Any, Iterable, Mapping, Sequence

Fact = dict[str, Any]

#: environment variables that describe a deployment (the record keeps only these)
RELEVANT_ENV_PREFIXES = ("VLLM_", "CUDA_", "NCCL_", "K3ACCEPT_", "HF_", "TRANSFORMERS_",
                         "TORCH_", "PYTORCH_", "OMP_", "NVIDIA_", "UCX_", "GLOO_", "NVSHMEM_",
                         "LMCACHE_", "TOKENIZERS_", "KMP_", "MKL_", "LD_LIBRARY_PATH")

_OOM_CATEGORIES = ("loading", "kv-capacity-at-init", "serving-oom")
_OOM_WORDS = ("out of memory", "oom", "can't allocate", "not enough gpu memory",
              "outofmemoryerror")
_MAX_STR, _MAX_LIST, _MAX_DEPTH = 2000, 50, 6


def known(value: Any, source: str) -> Fact:
    """A known fact and where it came from."""
    return {"value": value, "source": source}


def unknown(reason: str) -> Fact:
    """An unknown fact with the reason (and, where possible, how to supply it)."""
    return {"value": None, "reason": reason}


def trim(obj: Any, depth: int = 0) -> Any:
    """Bound a JSON-like value for the record: long strings cut, long lists shortened."""
    if isinstance(obj, str):
        return obj if len(obj) <= _MAX_STR else obj[:_MAX_STR] + f"... [{len(obj)} chars]"
    if depth >= _MAX_DEPTH:
        return "..." if isinstance(obj, (dict, list, tuple)) else obj
    if isinstance(obj, Mapping):
        return {str(k): trim(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [trim(v, depth + 1) for v in list(obj)[:_MAX_LIST]]
    return obj


def collect(obj: Any, keys: Sequence[str], depth: int = 0) -> list[Any]:
    """Every non-empty value stored under one of ``keys`` anywhere inside ``obj`` (not
    looking inside a value that was itself found)."""
    found: list[Any] = []
    if depth > _MAX_DEPTH:
        return found
    if isinstance(obj, Mapping):
        for key in keys:
            value = obj.get(key)
            if value not in (None, "", [], {}):
                found.append(value)
        for key, value in obj.items():
            if key not in keys and isinstance(value, (Mapping, list, tuple)):
                found.extend(collect(value, keys, depth + 1))
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            found.extend(collect(value, keys, depth + 1))
    return found


def _distinct(values: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def _one(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else values


def from_evidence(state: Any, kinds: Sequence[str], keys: Sequence[str],
                  ) -> tuple[list[Any], list[str]]:
    """Distinct values of ``keys`` in evidence of ``kinds`` and the kinds they came from."""
    values: list[Any] = []
    where: list[str] = []
    for kind in kinds:
        for ev in state.of_kind(kind):
            hits = collect(ev.data, keys)
            if hits:
                values.extend(hits)
                if kind not in where:
                    where.append(kind)
    return _distinct(values), where


def numbers(values: Iterable[Any]) -> list[float]:
    """The numeric (non-bool) values."""
    return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def fact_from(state: Any, kinds: Sequence[str], keys: Sequence[str], reason: str,
               numeric: bool = False) -> Fact:
    """A fact from the values of ``keys`` in evidence of ``kinds`` (the largest number when
    ``numeric``), or unknown with ``reason``."""
    values, where = from_evidence(state, kinds, keys)
    if numeric:
        values = numbers(values)
    if not values:
        return unknown(reason)
    return known(max(values) if numeric else _one(values),
                 f"evidence {'/'.join(where)} ({'/'.join(keys)})")


# -- the launch command --------------------------------------------------------------------
def launch_command(state: Any, settings: Any) -> tuple[str | None, str]:
    """The server's launch command (unredacted) and where it was found."""
    for ev in reversed(state.of_kind("launch")):
        for key in ("command", "cmd", "argv"):
            value = ev.data.get(key)
            if isinstance(value, (list, tuple)) and value:
                return shlex.join(str(v) for v in value), f"launch evidence ({key})"
            if isinstance(value, str) and value.strip():
                return value, f"launch evidence ({key})"
        if ev.summary.startswith("launched "):
            return ev.summary[len("launched "):], "launch evidence (summary)"
    launch = getattr(settings, "launch", None)
    if launch:
        return launch, "--k3-launch"
    return None, ""


def split_command(command: str) -> list[str]:
    """Shell words of a command (whitespace split when the quoting is broken)."""
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def parse_args(words: Sequence[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """``env K=V`` prefix assignments and ``--flag [value]`` options of a command."""
    env: dict[str, str] = {}
    flags: dict[str, Any] = {}
    i = 0
    if words and words[0].rsplit("/", 1)[-1] == "env":
        i = 1
    while i < len(words) and ("=" in words[i] and not words[i].startswith("-")
                              or words[i] in ("-u", "-i")):
        if words[i] == "-u":
            i += 2
            continue
        if "=" in words[i]:
            key, _, value = words[i].partition("=")
            env[key] = value
        i += 1
    for j in range(i, len(words)):
        word = words[j]
        if not word.startswith("-") or len(word) < 2 or word[1].isdigit():
            continue
        name, eq, value = word.partition("=")
        if eq:
            flags[name] = value
        elif j + 1 < len(words) and not (words[j + 1].startswith("-") and len(words[j + 1]) > 1
                                         and not words[j + 1][1].isdigit()):
            flags[name] = words[j + 1]
        else:
            flags[name] = True
    return env, flags


def _flag(flags: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in flags:
            return flags[name]
    return None


def parallelism(flags: Mapping[str, Any] | None, state: Any) -> dict[str, Fact]:
    """TP, PP, DP, EP and prefill/decode disaggregation from the launch flags (vLLM's
    defaults when a flag is absent) or, without a command, from evidence."""
    specs = (("tensor_parallel", ("--tensor-parallel-size", "-tp"), 1,
              ("tensor_parallel_size", "tp")),
             ("pipeline_parallel", ("--pipeline-parallel-size", "-pp"), 1,
              ("pipeline_parallel_size", "pp")),
             ("data_parallel", ("--data-parallel-size", "-dp"), 1,
              ("data_parallel_size", "dp")))
    out: dict[str, Fact] = {}
    no_cmd = ("the launch command is not known (the server was not started by the plugin) "
              "and no evidence states it; pass --k3-launch, or add it with the "
              "pytest_k3accept_record hook")
    for field, names, default, keys in specs:
        if flags is None:
            out[field] = fact_from(state, ("launch", "profile", "topology", "host"), keys,
                                    no_cmd, numeric=True)
            continue
        value = _flag(flags, *names)
        if value is None:
            out[field] = known(default, f"vLLM default ({names[0]} not in the launch command)")
        else:
            try:
                out[field] = known(int(value), f"launch command {names[0]}")
            except (TypeError, ValueError):
                out[field] = known(str(value), f"launch command {names[0]} (not a number)")
    if flags is None:
        out["expert_parallel"] = fact_from(state, ("launch", "profile", "topology"),
                                            ("enable_expert_parallel", "expert_parallel"),
                                            no_cmd)
        out["disaggregation"] = fact_from(state, ("launch", "profile", "topology"),
                                           ("kv_transfer_config", "disaggregation"), no_cmd)
        return out
    ep = _flag(flags, "--enable-expert-parallel", "-ep")
    if "--no-enable-expert-parallel" in flags:
        ep = False
    out["expert_parallel"] = (known(bool(ep), "launch command --enable-expert-parallel")
                              if ep is not None else
                              known(False, "vLLM default (--enable-expert-parallel absent)"))
    kv = _flag(flags, "--kv-transfer-config")
    if kv is None:
        out["disaggregation"] = known("none", "no --kv-transfer-config in the launch command")
    else:
        try:
            cfg = json.loads(str(kv))
            kv_value: Any = ({k: cfg.get(k) for k in ("kv_connector", "kv_role") if k in cfg}
                             or cfg) if isinstance(cfg, dict) else cfg
        except ValueError:
            kv_value = str(kv)
        out["disaggregation"] = known(kv_value, "launch command --kv-transfer-config")
    return out


def environment(environ: Mapping[str, str], command_env: Mapping[str, str]) -> dict[str, str]:
    """The deployment-relevant variables (:data:`RELEVANT_ENV_PREFIXES`), command prefix
    assignments winning; values are NOT redacted here (the record redacts at the end)."""
    env = {k: v for k, v in environ.items() if k.startswith(RELEVANT_ENV_PREFIXES)}
    env.update(command_env)
    return dict(sorted(env.items()))


def request_sets(state: Any, reason: str) -> Fact:
    """The request sets that ran, each as its description (``name``, ``source``,
    ``requests``, ``fingerprint``, ...; no message texts): one set -> that mapping, several
    -> a list of them (distinct by fingerprint); a team's plain form (``sample_requests``)
    when no description was recorded; unknown with ``reason`` when nothing ran."""
    kinds = ("request-set", "load", "prefix-cache-ab", "procedure", "headroom")
    values, where = from_evidence(state, kinds, ("request_set",))
    sets: dict[str, Any] = {}
    for v in values:
        if isinstance(v, Mapping) and v.get("fingerprint"):
            sets.setdefault(str(v["fingerprint"]), dict(v))
    if sets:
        found = list(sets.values())
        return known(trim(found[0] if len(found) == 1 else found),
                     f"evidence {'/'.join(where)} (request_set)")
    fact = fact_from(state, kinds, ("request_set", "sample_requests"), reason)
    if fact["value"] is not None:
        fact["value"] = trim(fact["value"])
    return fact


def oom_log(state: Any) -> Fact:
    """Where in which log each OOM was found, from the failure-classification evidence."""
    found = state.of_kind("classification")
    if not found:
        return unknown("no server log was classified in this session (start the server with "
                       "--k3-launch or follow its log with --k3-server-log)")
    entries = []
    for ev in found:
        category = (collect(ev.data, ("category", "class"))[:1] or [None])[0]
        if category is not None:
            if category not in _OOM_CATEGORIES:
                continue
        elif not any(w in (json.dumps(ev.data, default=str) + ev.summary).lower()
                     for w in _OOM_WORDS):
            continue
        log = collect(ev.data, ("log", "log_path", "path"))
        lines = collect(ev.data, ("evidence_lines", "lines", "quote", "evidence", "line"))
        entries.append({"category": category, "summary": ev.summary, "nodeid": ev.nodeid,
                        "log": log[0] if log else None,
                        "lineno": _one(numbers(collect(ev.data, ("lineno", "line_number"))))
                        or None, "lines": trim(lines[0] if lines else [])})
    return known(entries, f"failure classification ({len(found)} classified, "
                          f"{len(entries)} out-of-memory)")


def measured_at(state: Any) -> Fact:
    """The measurement date (session start, ISO 8601 with offset)."""
    return known(time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(state.started_at)),
                 "session start")
