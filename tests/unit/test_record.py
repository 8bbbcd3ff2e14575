"""The reproduction record built from constructed sessions, validated against its schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_k3accept.output import record
from pytest_k3accept.observe.host.facts import GpuFacts, HostFacts, NodeFacts
from pytest_k3accept.output.redact import REDACTED, Redactor
from pytest_k3accept.output.reproduction import parallelism, parse_args, split_command
from pytest_k3accept.config.settings import Settings
from pytest_k3accept.evidence.kinds import LoadRun
from pytest_k3accept.evidence.store import RunState

jsonschema = pytest.importorskip("jsonschema")

LAUNCH = ("env VLLM_USE_V1=1 NCCL_IB_HCA=mlx5 vllm serve moonshotai/Kimi-K3 "
          "--tensor-parallel-size 8 --enable-expert-parallel -dp 2 --max-model-len 262144 "
          "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}' "
          "--api-key launch-secret-77")


def _full_state() -> RunState:
    state = RunState()
    facts = HostFacts.merge([NodeFacts(
        node="gpu-a", source="facts-file", gpu_available=True, driver_version="580.65.06",
        cuda_driver_version="13.0", image="registry/k3:cu13", cuda_runtime="13.0.1",
        gpus=tuple(GpuFacts(i, name="NVIDIA H200", memory_total_bytes=150 << 30)
                   for i in range(8)))])
    state.add("host", facts.summary(), facts.to_dict())
    state.add("endpoint", "k3 at http://h:8000", {"base_url": "http://h:8000", "model": "k3",
                                                  "root": "/models/k3", "version": "0.32.0",
                                                  "max_model_len": 262144})
    state.add("launch", "launched ...", {"command": LAUNCH, "log": "/logs/server.log"})
    state.add("classification", "server loading (before weight loading)", {
        "category": "loading", "phase": "before weight loading", "log": "/logs/server.log",
        "evidence": [{"text": "torch.OutOfMemoryError: CUDA out of memory.", "lineno": 412,
                      "at": None}],
        "evidence_lines": ["torch.OutOfMemoryError: CUDA out of memory.",
                           "echo of api_key='launch-secret-77'"],
        "advice": "lowering concurrency will not help"}, nodeid="t.py::test_start")
    state.add("classification", "server none", {"category": "none", "evidence": [],
                                                "advice": "no OOM seen", "log": "/x.log"})
    run = LoadRun(run_id=state.next_run_id(), profile_name="agents", concurrency=16,
                  context_tokens=32000, requests=3, ok=3, errors=0, peak_kv=0.83,
                  preemptions=0.0, target_source="profile file agents.toml", target=True)
    state.add_typed(run, "target load", extra={
        "profile": {"concurrency": 16, "output_tokens": 256, "context_tokens": 32000},
        "achieved_concurrency": {"mean": 15.2, "max": 99},
        "request_set": {"name": "agents", "requests": 3, "fingerprint": "ab12"},
        "summary": {"ttft": {"p50": 0.2, "p90": 0.4, "p99": 0.9}},
        "server": {"prefix_cache_hit_rate": 0.61, "peak_kv_usage": 0.83,
                   "prefix_caching": True,
                   "gauge_series": {"t": [0.0, 0.5], "kv_usage": [0.2, 0.83]}}},
        nodeid="t.py::test_load")
    state.add("gpu-telemetry", "GPU memory", {"kind": "gpu-memory",
                                              "peak_bytes": {"gpu-a/gpu0": 140 << 30}},
              nodeid="t.py::test_load")
    state.add("environment", "k3_driver: ok", {"item": "C4", "ok": True, "marker": "k3_driver",
                                               "expected": "host driver >= 580",
                                               "actual": "580.65.06"}, nodeid="t.py::test_env")
    state.checklist.add(["C4", "C6"], "t.py::test_env", "pass")
    state.checklist.add(["C1"], "t.py::test_start", "fail", "loading OOM")
    state.tests += [
        {"nodeid": "t.py::test_env", "when": "call", "outcome": "passed", "duration": 0.5,
         "checklist": ["C4", "C6"]},
        {"nodeid": "t.py::test_start", "when": "setup", "outcome": "failed", "duration": 1.0,
         "checklist": ["C1"]},
        {"nodeid": "t.py::test_skip", "when": "setup", "outcome": "skipped", "duration": 0.0,
         "checklist": []}]
    return state


def _valid(rec: dict) -> dict:
    assert record.validate(rec) == []
    return rec


def test_full_session_fills_every_field_from_evidence() -> None:
    settings = Settings(endpoints=("http://h:8000",), api_key_env="K3_KEY",
                        record=Path("r.json"))
    environ = {"K3_KEY": "env-secret-555", "VLLM_CPU_KVCACHE_SPACE": "4", "HOME": "/root",
               "HF_TOKEN": "hf_abcdefghijklmnopqrstu"}
    raw = record.build(_full_state(), settings, environ=environ, exit_status=1)
    rec = _valid(record.finish(raw, Redactor.from_settings(settings, environ)))
    rep = rec["reproduction"]
    assert rep["host_driver"]["value"] == "580.65.06"
    assert rep["cuda_runtime"]["value"] == "13.0.1"
    assert rep["gpu_model"]["value"] == "NVIDIA H200"
    assert (rep["gpu_count"]["value"], rep["node_count"]["value"]) == (8, 1)
    assert rep["image"]["value"] == "registry/k3:cu13"
    assert rep["vllm_version"]["value"] == "0.32.0"
    assert (rep["tensor_parallel"]["value"], rep["data_parallel"]["value"],
            rep["expert_parallel"]["value"]) == (8, 2, True)
    assert rep["pipeline_parallel"]["source"].startswith("vLLM default")
    assert rep["disaggregation"]["value"] == {"kv_connector": "NixlConnector",
                                              "kv_role": "kv_both"}
    assert rep["max_context"] == {"value": 262144,
                                  "source": "launch command --max-model-len"}
    assert (rep["concurrency"]["value"], rep["output_length"]["value"]) == (16, 256)
    assert rep["peak_memory"]["value"] == {
        "gpu_memory_bytes": 140 << 30, "gpu_memory_bytes_per_gpu": {"gpu-a/gpu0": 140 << 30},
        "kv_cache_usage": 0.83}
    assert rep["cache_hit"]["value"] == {"hit_rate": [0.61], "prefix_caching": True}
    assert rep["requests"]["value"] == {"name": "agents", "requests": 3, "fingerprint": "ab12"}
    [oom] = rep["oom_log"]["value"]
    assert (oom["category"], oom["log"], oom["lineno"]) == ("loading", "/logs/server.log", 412)
    assert oom["lines"][0] == "torch.OutOfMemoryError: CUDA out of memory."
    assert rep["environment"]["value"] == {"HF_TOKEN": REDACTED, "NCCL_IB_HCA": "mlx5",
                                           "VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_USE_V1": "1"}
    assert rep["launch_args"]["value"][-2:] == ["--api-key", REDACTED]
    outcomes = {t["nodeid"]: t["outcome"] for t in rec["tests"]}
    assert outcomes == {"t.py::test_env": "passed", "t.py::test_start": "error",
                        "t.py::test_skip": "skipped"}
    status = {c["id"]: c["status"] for c in rec["checklist"]}
    assert (status["C1"], status["C4"], status["C12"]) == ("fail", "pass", "not-checked")
    assert rec["session"]["exit_status"] == 1
    text = json.dumps(rec)
    for secret in ("launch-secret-77", "env-secret-555", "hf_abcdefghijklmnopqrstu"):
        assert secret not in text


def test_long_values_are_trimmed() -> None:
    state = RunState()
    state.add("load", "big", {"request_set": {"samples": ["x" * 5000] * 80}})
    rec = record.build(state, Settings(), environ={})
    samples = rec["reproduction"]["requests"]["value"]["samples"]
    assert len(samples) == 50 and len(samples[0]) < 2100


def test_empty_session_states_why_each_field_is_unknown() -> None:
    rec = _valid(record.finish(record.build(RunState(), Settings(), environ={}), Redactor()))
    rep = rec["reproduction"]
    required = record.schema()["properties"]["reproduction"]["required"]
    assert sorted(rep) == sorted(required)
    unknown = {k for k, f in rep.items() if f["value"] is None}
    assert unknown >= {"image", "vllm_version", "host_driver", "gpu_count", "tensor_parallel",
                       "launch_command", "requests", "peak_memory", "oom_log"}
    assert all(rep[k]["reason"] for k in unknown)
    assert rep["measured_at"]["value"] and rep["environment"]["value"] == {}
    assert len(rec["checklist"]) == 12 and rec["tests"] == []


def test_host_without_gpu_facts_says_why() -> None:
    state = RunState()
    facts = HostFacts.merge([], notes=["local NVML: no NVIDIA driver"])
    state.add("host", facts.summary(), facts.to_dict())
    rep = record.build(state, Settings(), environ={})["reproduction"]
    for name in ("gpu_count", "node_count", "host_driver"):
        assert rep[name]["value"] is None
        assert "no GPU facts (local NVML: no NVIDIA driver)" in rep[name]["reason"]


def test_schema_rejects_a_silent_unknown_and_a_missing_field() -> None:
    rec = record.finish(record.build(RunState(), Settings(), environ={}), Redactor())
    rec["reproduction"]["image"] = {"value": None}
    assert any("image" in e for e in record.validate(rec))
    del rec["reproduction"]["oom_log"]
    assert any("oom_log" in e for e in record.validate(rec))


def test_the_record_shows_the_one_decided_verdict_and_never_decides_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_k3accept.decide.verdict as verdict

    def second_decision(*args: object, **kwargs: object) -> None:
        raise AssertionError("the record decided a second time")

    monkeypatch.setattr(verdict, "decide_state", second_decision)
    monkeypatch.setattr(verdict, "decide", second_decision)
    state = RunState()
    state.add("verdict", "decided", {"name": "keep", "reasons": ["held"]})
    assert record.verdict_of(state)["name"] == "keep"
    absent = record.verdict_of(RunState())
    assert absent["name"] == "undecided" and "no verdict was decided" in absent["reasons"][0]
    assert "C1" in absent["not_checked"]


def test_command_parsing() -> None:
    env, flags = parse_args(split_command(LAUNCH))
    assert env == {"VLLM_USE_V1": "1", "NCCL_IB_HCA": "mlx5"}
    assert flags["--tensor-parallel-size"] == "8" and flags["--enable-expert-parallel"] is True
    par = parallelism(parse_args(["vllm", "serve", "m", "-tp=4", "--no-enable-expert-parallel"])[1],
                      RunState())
    assert par["tensor_parallel"]["value"] == 4 and par["expert_parallel"]["value"] is False
    unknown = parallelism(None, RunState())
    assert unknown["tensor_parallel"]["value"] is None
    assert "not started by the plugin" in unknown["tensor_parallel"]["reason"]


def test_write_is_atomic_and_round_trips(tmp_path: Path) -> None:
    rec = record.finish(record.build(RunState(), Settings(), environ={}), Redactor())
    path = record.write(rec, tmp_path / "sub" / "record.json")
    assert json.loads(path.read_text()) == rec
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]


def test_shipped_schema_is_valid_and_matches_the_version() -> None:
    schema = record.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == record.SCHEMA_ID
    assert jsonschema.Draft202012Validator(
        schema["properties"]["schema_version"]).is_valid(record.SCHEMA_VERSION)


def test_the_schema_holds_typed_evidence_to_its_type() -> None:
    state = RunState()
    run = LoadRun(run_id=state.next_run_id(), profile_name="p", concurrency=8,
                  context_tokens=746, requests=10, ok=10, errors=0)
    state.add_typed(run, "typed run")
    rec = record.finish(record.build(state, Settings(), environ={}), Redactor())
    assert record.validate(rec) == []
    rec["evidence"][0]["data"]["concurrency"] = "8"
    assert "concurrency" in " ".join(record.validate(rec))
    with pytest.raises(TypeError, match=r"LoadRun\.concurrency"):
        state.add("load", "a team's run", {**run.to_data(), "concurrency": "8"})
