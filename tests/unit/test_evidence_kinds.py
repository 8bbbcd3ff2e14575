"""Typed evidence kinds: each producer's real shape reads into its type, the record schema
is the types' own (checked field by field), and a wrong shape is a TypeError naming the field
at the call site."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_k3accept.checks.environment import Check
from pytest_k3accept.checks.prefix_ab.compare import ABResult, Arm, PrefixShape
from pytest_k3accept.config.settings import Settings
from pytest_k3accept.evidence import kinds
from pytest_k3accept.evidence.store import RunState
from pytest_k3accept.observe.server.classify import Classification, Quote
from pytest_k3accept.observe.server.timeline import Timeline
from pytest_k3accept.output import record
from pytest_k3accept.output.redact import Redactor

jsonschema = pytest.importorskip("jsonschema")

#: derived values a kind's to_data adds beside its fields
DERIVED = {"load": {"error_rate"}, "timeline": {"init_completed"},
           "classification": {"evidence_lines"}}


def _def_name(cls: type) -> str:
    return {"PrefixCacheAB": "prefix_cache_ab", "LoadRun": "load_run"}.get(
        cls.__name__, re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower())


@pytest.mark.parametrize("kind", sorted(kinds.TYPES))
def test_the_schema_is_the_types_own(kind: str) -> None:
    cls = kinds.TYPES[kind]
    schema = record.schema()
    defs = schema["$defs"]
    name = _def_name(cls)
    assert name in defs, f"record.schema.json has no $defs/{name} for kind {kind!r}"
    fields = {f.name for f in dataclasses.fields(cls)}
    props = set(defs[name]["properties"])
    assert fields <= props, f"{kind}: fields missing from the schema: {fields - props}"
    assert props - fields <= DERIVED.get(kind, set()), f"{kind}: schema has {props - fields}"
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert required <= set(defs[name].get("required", [])) | {"run_id"}
    refs = [rule["then"]["properties"]["data"]["$ref"]
            for rule in schema["properties"]["evidence"]["items"]["allOf"]
            if rule["if"]["properties"]["kind"]["const"] == kind]
    assert refs == [f"#/$defs/{name}"]


def _classification() -> Classification:
    return Classification(
        category="serving-oom", phase="while serving (requests in the log)",
        evidence=(Quote("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
                        "GiB", 4812),),
        rule="cuda-oom", exit_code=1, stage="serving",
        root_cause=Quote("torch.OutOfMemoryError: CUDA out of memory.", 4812),
        consequences=(Quote("vllm.v1.engine.exceptions.EngineDeadError", 4900),))


def _ab() -> ABResult:
    shape = PrefixShape(requests=8, block_size=16, shared_tokens=1600, sharing=7)
    return ABResult(status="incomplete", message="no prefix-cache counters", shape=shape,
                    on=Arm(label="on", base_url="http://127.0.0.1:8000", requests=8, ok=8, errors=0), notes=["n"])


def test_each_producers_real_shape_reads_into_its_type() -> None:
    state = RunState()
    tl = Timeline()
    cls = _classification()
    typed = [
        state.add("timeline", "t", {**tl.as_dict(), "mode": "launch", "log": "/x.log",
                                    "notes": [], "lines_dropped": 0, "error": None}).typed,
        state.add("classification", "c", {**cls.as_dict(), "mode": "launch", "log": "/x"}).typed,
        state.add("environment", "e", Check("C4", "k3_driver", False, "host driver >= 580",
                                            "575.57.08").evidence()).typed,
        state.add("prefix-cache-ab", "ab", _ab().as_dict()).typed,
        state.add("response", "r", {"status": 200, "ttft": 0.12, "e2e": 0.5,
                                    "prompt_tokens": 31, "completion_tokens": 8,
                                    "finish_reason": "length", "stream": True, "chunks": 9,
                                    "ok": True, "what": "chat", "tool_calls": 0}).typed,
    ]
    assert [type(t).__name__ for t in typed] == [
        "ServerTimeline", "ServerClassification", "EnvironmentCheck", "PrefixCacheAB",
        "Response"]
    assert typed[0].init_completed is False and "engine_init_done" in typed[0].missing
    assert typed[1].lines == ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                              "2.00 GiB",)
    assert typed[1].root_cause and typed[1].root_cause["lineno"] == 4812
    assert typed[2].ok is False and typed[2].item == "C4"
    assert typed[3].ok is True and typed[3].status == "incomplete"
    assert typed[4].prompt_tokens == 31


def test_older_plain_shapes_read_the_same() -> None:
    t = kinds.ServerTimeline.from_data({"events": {"engine_init_done": 41.0,
                                                   "first_response": None}})
    assert t.init_completed and not t.first_response
    assert kinds.ServerTimeline.from_data({"init_completed": True}).init_completed
    c = kinds.ServerClassification.from_data({"category": "loading", "lines": "OOM line"})
    assert c.lines == ("OOM line",)
    ab = kinds.PrefixCacheAB.from_data({"ok": False})
    assert (ab.status, ab.ok) == ("fail", False)


@pytest.mark.parametrize("kind, data, field", [
    ("environment", {"item": "C4", "ok": "no"}, "EnvironmentCheck.ok"),
    ("classification", {"category": 3}, "ServerClassification.category"),
    ("timeline", {"init_seconds": "41 s"}, "ServerTimeline.init_seconds"),
    ("response", {"status": "200"}, "Response.status"),
    ("prefix-cache-ab", {"status": "pass", "ok": "yes"}, "PrefixCacheAB.ok"),
    ("procedure", {"steps": [{"n": 2, "ok": "3"}]}, "ProcedureStep.ok"),
    ("host", {"gpu_count": "8"}, "HostObservation.gpu_count"),
])
def test_a_wrong_shape_is_named_at_the_call_site(kind: str, data: dict[str, Any],
                                                 field: str) -> None:
    with pytest.raises(TypeError, match=re.escape(field)):
        RunState().add(kind, "a team's evidence", data)


def test_a_kind_without_a_type_stays_plain() -> None:
    ev = RunState().add("all2all", "team's own", {"backend": "deepep", "ok": "maybe"})
    assert ev.typed is None and ev.data["ok"] == "maybe"


_texts = st.text(max_size=20)
_opt_int = st.none() | st.integers(-10, 10**6)
_opt_float = st.none() | st.floats(0, 1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.one_of(
    st.builds(kinds.ServerTimeline, missing=st.lists(_texts).map(tuple),
              init_seconds=_opt_float, kv_cache_tokens=_opt_int, mode=_texts,
              init_done=st.none() | st.booleans(),
              events=st.lists(st.sampled_from(["engine_init_done", "first_response",
                                               "weights_loaded"]), unique=True).map(
                  lambda ks: tuple({"key": k, "at": 1.0} for k in ks))),
    st.builds(kinds.ServerClassification, category=_texts, phase=_texts,
              lines=st.lists(_texts).map(tuple), exit_code=_opt_int,
              init_completed=st.none() | st.booleans()),
    st.builds(kinds.EnvironmentCheck, item=_texts, ok=st.none() | st.booleans(),
              expected=_texts),
    st.builds(kinds.Response, ok=st.booleans(), status=_opt_int, ttft=_opt_float),
    st.builds(kinds.PrefixCacheAB, status=st.sampled_from(["pass", "fail", "incomplete"]),
              ok=st.booleans(), notes=st.lists(_texts).map(tuple)),
    st.builds(kinds.Procedure, steps=st.lists(st.builds(
        kinds.ProcedureStep, n=st.integers(1, 7), ok=_opt_int, peak_kv=_opt_float,
        target=st.booleans())).map(tuple), one_variable=st.none() | st.booleans()),
))
def test_every_kind_round_trips_through_the_record(obj: Any) -> None:
    assert type(obj).from_data(obj.to_data()) == obj
    state = RunState()
    state.add_typed(obj, "generated")
    rec = record.finish(record.build(state, Settings(), environ={}), Redactor())
    assert record.validate(rec) == []


def test_a_procedure_step_log_reads_its_steps() -> None:
    from pytest_k3accept.checks.procedure.plan import Step

    step = Step(2, target=True, change="targets, prefix caching on")
    step.status = "ran"
    step.figures = {"requests": 32, "ok": 31, "errors": 1, "preemptions": 0,
                    "peak_kv": 0.71, "headroom_ok": False, "summary": "32 requests"}
    # a step with a load profile is a capacity step (as_dict says so only with a profile)
    plain = {"steps": [{**step.as_dict(), "capacity": True}], "one_variable": True,
             "problems": []}
    proc = RunState().add("procedure", "procedure", plain).typed
    assert isinstance(proc, kinds.Procedure)
    (s,) = proc.steps
    assert (s.n, s.ran, s.target, s.ok, s.errors, s.peak_kv, s.headroom_ok) == (
        2, True, True, 31, 1, 0.71, False)


# -- no item is a pass without the evidence that decides it --------------------------------

@pytest.mark.parametrize("item, evidence, status", [
    ("C9", [], "not-checked"),
    ("C9", [("load", {"run_id": "run-1", "profile_name": "p", "concurrency": 4,
                      "context_tokens": 512, "requests": 8, "ok": 8, "errors": 0})], "pass"),
    ("C4", [("environment", {"item": "C4", "ok": None})], "not-checked"),
    ("C4", [("environment", {"item": "C3", "ok": True})], "not-checked"),
    ("C4", [("environment", {"item": "C4", "ok": True})], "pass"),
    ("C8", [("response", {"ok": True})], "not-checked"),
    ("C10", [("headroom", {"run_id": "run-1", "ok": True})], "not-checked"),
    ("C10", [("headroom", {"run_id": "run-1", "ok": True, "failover": True})], "pass"),
    ("C6", [], "pass"),  # decided by its test's own assertion
])
def test_an_item_passes_only_with_its_evidence(item: str, evidence: list[tuple[str, dict]],
                                               status: str) -> None:
    state = RunState()
    for kind, data in evidence:
        state.add(kind, kind, data)
    state.checklist.add([item], "t.py::test_it", "pass")
    result = state.checklist.results()[item]
    assert result.status == status
    if status == "not-checked":
        assert "never a pass without the evidence" in result.note
    rec = record.finish(record.build(state, Settings(), environ={}), Redactor())
    assert record.validate(rec) == []


def test_a_failure_stays_a_failure_without_evidence() -> None:
    state = RunState()
    state.checklist.add(["C9"], "t.py::test_it", "fail", "boom")
    assert state.checklist.results()["C9"].status == "fail"


def test_a_record_read_back_still_shows_engine_init() -> None:
    state = RunState()
    state.add("timeline", "t", {"events": [{"key": "engine_init_done", "at": 41.0},
                                           {"key": "first_response", "at": 45.0}]})
    rec = record.finish(record.build(state, Settings(), environ={}), Redactor())
    [ev] = [e for e in rec["evidence"] if e["kind"] == "timeline"]
    back = kinds.ServerTimeline.from_data(ev["data"])
    assert back.init_completed and back.first_response
