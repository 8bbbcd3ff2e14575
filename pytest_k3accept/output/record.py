"""The reproduction record: one JSON document that lets anyone re-run the same measurement.

:func:`build` turns a session's :class:`~pytest_k3accept.evidence.store.RunState` and
:class:`~pytest_k3accept.config.settings.Settings` into a dict following
``pytest_k3accept/data/record.schema.json`` (:data:`SCHEMA_VERSION`): the reproduction fields
of the field guide (each a known/unknown *fact*, see :mod:`pytest_k3accept.output.reproduction`),
the verdict, the checklist C1-C12, per-test outcomes and the evidence itself. :func:`finish`
redacts it, :func:`write` writes it atomically. No pytest import.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import reproduction as rp
from .redact import Redactor

SCHEMA_VERSION = "1.2"
SCHEMA_ID = "urn:pytest-k3accept:record:1"
UNDECIDED = "undecided"


def verdict_of(state: Any) -> dict[str, Any]:
    """The session's verdict as plain data: the ``"verdict"`` evidence entry that the one
    decision at session end recorded (``fixtures/decide.py``). The record never decides a
    second time: without that entry the verdict is ``"undecided"`` and says so.

    Always returns ``{"name", "reasons", "evidence", "not_checked", ...}``.
    """
    not_checked = [cid for cid, status in state.checklist.statuses().items()
                   if status == "not-checked"]
    decided_ev = state.latest("verdict")
    if decided_ev is None or not decided_ev.data.get("name"):
        return {"name": UNDECIDED, "reasons": ["no verdict was decided in this session (no "
                                               "k3accept evidence or checklist outcome)"],
                "evidence": [], "not_checked": not_checked}
    data = dict(decided_ev.data)
    data["name"] = str(data.get("name") or UNDECIDED)
    data.setdefault("reasons", [])
    data.setdefault("evidence", [])
    data.setdefault("not_checked", not_checked)
    return json.loads(json.dumps(data, default=str))  # type: ignore[no-any-return]


def outcomes_of(state: Any) -> list[dict[str, Any]]:
    """Per-test outcome (passed/failed/skipped/error) from the phases the session logged."""
    by_id: dict[str, dict[str, Any]] = {}
    for entry in state.tests:
        test = by_id.setdefault(entry["nodeid"], {
            "nodeid": entry["nodeid"], "outcome": "passed", "duration": 0.0,
            "checklist": list(entry.get("checklist", [])), "phases": {}})
        test["phases"][entry["when"]] = entry["outcome"]
        test["duration"] += float(entry.get("duration") or 0.0)
        if entry["when"] != "call" and entry["outcome"] == "failed":
            test["outcome"] = "error"
        elif entry["when"] == "call" and test["outcome"] != "error":
            test["outcome"] = entry["outcome"]
        elif entry["when"] == "setup" and entry["outcome"] == "skipped":
            test["outcome"] = "skipped"
    return list(by_id.values())


def _reproduction(state: Any, settings: Any, environ: Mapping[str, str]) -> dict[str, Any]:
    host = ("host", "environment", "gpu-telemetry")
    how = ("give --k3-host-facts FILE from 'k3accept collect', or --k3-dcgm-url / "
           "--k3-prometheus-url")
    facts = state.latest("host")
    no_host = (f"host facts: {facts.summary}; {how}" if facts is not None else
               f"no host facts in this session (no test used the host markers/fixtures); {how}")
    out: dict[str, Any] = {"measured_at": rp.measured_at(state)}
    out["changed_variable"] = rp.fact_from(
        state, ("procedure", "step", "one-variable", "remeasure"),
        ("changed_variable", "changed", "variable"),
        "no re-measurement step ran in this session, so no variable was changed on purpose "
        "(the one-variable procedure records it per step)")
    out["image"] = (rp.known(settings.image, "--k3-image") if settings.image else rp.fact_from(
        state, host, ("image",), "unknown image: pass --k3-image REF, or run 'k3accept "
        "collect' inside the serving container"))
    out["vllm_version"] = rp.fact_from(state, ("endpoint", "timeline"),
                                       ("version", "vllm_version"),
                                        "GET /version was not answered in this session (no "
                                        "test discovered the endpoint, or it is not vLLM)")
    out["host_driver"] = rp.fact_from(state, host, ("driver_version",), no_host)
    out["host_cuda_version"] = rp.fact_from(state, host, ("cuda_driver_version",), no_host)
    out["cuda_runtime"] = rp.fact_from(state, host, ("cuda_runtime",), no_host)
    out["gpu_model"] = rp.fact_from(state, host, ("gpu_model", "name"), no_host)
    out["gpu_count"] = rp.fact_from(state, host, ("gpu_count",), no_host, numeric=True)
    out["node_count"] = (rp.fact_from(state, host, ("node_count",), no_host, numeric=True)
                         if out["gpu_count"]["value"] is not None else rp.unknown(no_host))
    command, cmd_source = rp.launch_command(state, settings)
    words = rp.split_command(command) if command else []
    cmd_env, flags = rp.parse_args(words) if command else ({}, {})
    out.update(rp.parallelism(flags if command else None, state))
    no_cmd = ("the server was not started by the plugin (--k3-endpoint mode), so its command "
              "line is not visible here; add it with the pytest_k3accept_record hook")
    out["launch_command"] = rp.known(command, cmd_source) if command else rp.unknown(no_cmd)
    out["launch_args"] = rp.known(words, cmd_source) if command else rp.unknown(no_cmd)
    where = ("the pytest process, inherited by the launched server" if command else
             "the pytest process only (the server's own environment is not visible here)")
    out["environment"] = rp.known(rp.environment(environ, cmd_env), where)
    out["endpoint"] = (rp.known(list(settings.endpoints), "--k3-endpoint") if settings.endpoints
                       else rp.fact_from(state, ("endpoint", "launch"), ("base_url",),
                                          "no endpoint was given or launched"))
    out["model"] = rp.fact_from(state, ("endpoint",), ("model",),
                                 "the endpoint was not discovered in this session")
    out["requests"] = rp.request_sets(
        state, "no request set was run in this session (C6): fix one with a request-set file "
        "and a k3_load / k3_headroom test")
    max_len = flags.get("--max-model-len") if command else None
    out["max_context"] = (rp.known(int(max_len), "launch command --max-model-len")
                          if isinstance(max_len, str) and max_len.isdigit() else rp.fact_from(
                              state, ("endpoint",), ("max_model_len",),
                              "the server's max_model_len is not known (no discovery)",
                              numeric=True))
    loads = ("load", "headroom", "procedure", "prefix-cache-ab")
    out["concurrency"] = rp.fact_from(state, loads, ("concurrency", "target_concurrency"),
                                       "no load run in this session", numeric=True)
    out["output_length"] = rp.fact_from(state, loads, ("output_tokens", "max_tokens"),
                                         "no load run in this session", numeric=True)
    peak_value: dict[str, Any] = {}
    peak_where: list[str] = []
    for name, keys in (("gpu_memory_bytes", ("peak_bytes", "peak_used_bytes")),
                       ("kv_cache_usage", ("peak_kv_usage", "kv_cache_usage_peak"))):
        values, kinds = rp.from_evidence(state, ("gpu-telemetry", "headroom", "load") + host,
                                         keys)
        per: dict[str, float] = {}
        for v in values:
            if isinstance(v, Mapping):
                for k, x in v.items():
                    if rp.numbers([x]):
                        per[str(k)] = max(per.get(str(k), x), x)
        flat = rp.numbers(values) + list(per.values())
        if flat:
            peak_value[name] = max(flat)
            if per:
                peak_value[f"{name}_per_gpu"] = per
            peak_where += [k for k in kinds if k not in peak_where]
    out["peak_memory"] = (rp.known(peak_value, f"evidence {'/'.join(peak_where)}")
                          if peak_value else rp.unknown(
                              "no GPU telemetry or KV-usage sampling ran in this session "
                              "(k3_gpu fixture, k3_load / k3_headroom)"))
    out["cache_hit"] = _cache_hit(state, flags if command else None)
    out["oom_log"] = rp.oom_log(state)
    out["recipe"] = _recipe(state)
    return out


def _recipe(state: Any) -> dict[str, Any]:
    """The official recipe the session was judged against: file, ``date_updated``, sha256,
    hardware and strategy (a changed recipe is a changed variable against a baseline)."""
    ev = state.latest("recipe")
    ident = ev.data.get("recipe") if ev is not None else None
    if not isinstance(ident, Mapping):
        return rp.unknown("no recipe in this session: no --k3-recipe, and the preset names "
                          "none in [recipe] (the expectations came from the preset alone)")
    value = {k: ident.get(k) for k in ("file", "title", "date_updated", "sha256")}
    value.update(hardware=ev.data.get("hardware"), strategy=ev.data.get("strategy"))
    return rp.known(value, f"{ev.data.get('origin') or '--k3-recipe'} (evidence recipe)")


def _cache_hit(state: Any, flags: Mapping[str, Any] | None) -> dict[str, Any]:
    kinds = ("prefix-cache-ab", "load", "headroom", "procedure", "endpoint", "metrics")
    value: dict[str, Any] = {}
    rates, where = rp.from_evidence(state, kinds, ("prefix_cache_hit_rate", "hit_rate"))
    if rp.numbers(rates):
        value["hit_rate"] = rp.numbers(rates)
    enabled, where2 = rp.from_evidence(state, kinds, ("enable_prefix_caching",
                                                      "prefix_caching"))
    if enabled:
        value["prefix_caching"] = enabled[-1]
    elif flags is not None:
        value["prefix_caching"] = "--no-enable-prefix-caching" not in flags
        where2 = ["launch command (vLLM V1 default: on)"]
    if not value:
        return rp.unknown("no prefix-cache measurement ran in this session (C8: k3 prefix-cache "
                          "A/B, or a load run scraping /metrics)")
    return rp.known(value, f"evidence {'/'.join(dict.fromkeys(where + where2))}")


def build(state: Any, settings: Any, *, environ: Mapping[str, str] | None = None,
          exit_status: int | None = None, invocation: Sequence[str] = (),
          workers: int | None = None) -> dict[str, Any]:
    """The record as a dict (not yet redacted: call :func:`finish` before it leaves)."""
    environ = os.environ if environ is None else environ
    from .. import __version__ as version

    results = state.checklist.results()
    now = time.time()
    iso = "%Y-%m-%dT%H:%M:%S%z"
    settings_view = {
        "endpoints": list(settings.endpoints), "model": settings.model,
        "api_key_env": settings.api_key_env, "launch": settings.launch,
        "server_log": str(settings.server_log) if settings.server_log else None,
        "host_facts": [str(p) for p in settings.host_facts], "image": settings.image,
        "gpu_selector": settings.gpu_selector, "local_gpu": settings.local_gpu,
        "profile": str(settings.profile) if settings.profile else None,
        "preset": settings.preset, "require": settings.require, "timeout": settings.timeout}
    return {
        "$schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "generated_at": time.strftime(iso, time.localtime(now)),
        "tool": {"name": "pytest-k3accept", "version": version,
                 "python": platform.python_version(), "platform": platform.platform(),
                 "pytest": sys.modules["pytest"].__version__ if "pytest" in sys.modules
                 else None},
        "session": {"started_at": time.strftime(iso, time.localtime(state.started_at)),
                    "duration_s": round(now - state.started_at, 3),
                    "exit_status": exit_status, "interrupted": bool(state.interrupted),
                    "invocation": list(invocation), "xdist_workers": workers,
                    "settings": settings_view},
        "reproduction": _reproduction(state, settings, environ),
        "verdict": verdict_of(state),
        "checklist": [results[cid].as_dict() for cid in state.checklist.items()
                      if cid in results],
        "tests": outcomes_of(state),
        "evidence": [rp.trim(e.as_dict()) for e in state.evidence],
        "notes": list(state.notes),
        **({"comparison": state.comparison.to_data()}
           if getattr(state, "comparison", None) is not None else {}),
    }


def finish(record: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """The record made safe to leave the process: secrets redacted, JSON round-tripped.

    The launch command teaches the redactor its secret arguments first, so that their values
    are also hidden where the server echoed them (log lines quoted in evidence).
    """
    plain = json.loads(json.dumps(record, default=str))
    rep = plain.get("reproduction") or {}
    command = (rep.get("launch_command") or {}).get("value")
    if isinstance(command, str):
        redactor.learn_command(command)
    args = rep.get("launch_args") or {}
    if isinstance(args.get("value"), list):
        redactor.learn_command([str(a) for a in args["value"]])
        args["value"] = redactor.argv([str(a) for a in args["value"]])
    safe = redactor.data(plain)
    assert isinstance(safe, dict)
    return safe


def write(record: Mapping[str, Any], path: Path) -> Path:
    """Write the record as indented JSON, atomically (temp file, flushed to disk, then
    rename); return the path. A failed write (full disk, read-only) raises OSError and leaves
    a record already at ``path`` as it was; the partial temporary file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = (json.dumps(record, indent=2, sort_keys=False, default=str) + "\n").encode()
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return path


def schema() -> dict[str, Any]:
    """The record's JSON Schema (shipped as ``pytest_k3accept/data/record.schema.json``)."""
    text = resources.files("pytest_k3accept").joinpath("data/record.schema.json").read_text(
        encoding="utf-8")
    data = json.loads(text)
    assert isinstance(data, dict)
    return data


def validate(record: Mapping[str, Any]) -> list[str]:
    """Schema violations of ``record`` as ``"path: message"`` lines (needs ``jsonschema``)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    return [f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
            for err in sorted(validator.iter_errors(record), key=lambda e: list(e.path))]
