"""Facts files: round trip, and malformed files give an error naming the file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_k3accept.observe.host.facts import GpuFacts, NodeFacts
from pytest_k3accept.observe.host.factsfile import FactsFileError, dumps, from_dict, load, loads

GOOD = NodeFacts(node="gpu-a", source="k3accept collect", gpu_available=True,
                 driver_version="580.65.06", cuda_driver_version="13.0",
                 gpus=tuple(GpuFacts(i, "NVIDIA H200", f"GPU-{i}", 141 << 30, 1 << 30, 18)
                            for i in range(8)),
                 image="vllm/vllm-openai:k3-cu130", cuda_runtime="13.0.1",
                 cuda_runtime_source="CUDA_VERSION environment variable",
                 rdma_devices=("mlx5_0",), topology="GPU0\tGPU1\nGPU0\tX\tNV18",
                 collected_at=1.7e9)


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_text(dumps(GOOD))
    back = load(path)
    assert back.source == f"file:{path}"
    assert back == NodeFacts(**{**GOOD.__dict__, "source": f"file:{path}"})


def test_no_gpu_file_is_valid() -> None:
    facts = loads(dumps(NodeFacts(node="cpu", gpu_error="no NVML")), "cpu.json")
    assert not facts.gpu_available and facts.gpu_error == "no NVML" and facts.gpus == ()


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.update(driver_version="five-eighty"), "driver_version"),
    (lambda d: d.update(cuda_runtime=13), "cuda_runtime"),
    (lambda d: d.update(gpu_available="yes"), "gpu_available"),
    (lambda d: d["gpus"][2].update(memory_total_bytes=-1), "gpus[2].memory_total_bytes"),
    (lambda d: d["gpus"][0].pop("index"), "gpus[0].index"),
    (lambda d: d["gpus"].__setitem__(1, "H200"), "gpus[1]"),
    (lambda d: d.update(gpus=[]), "gpus"),
    (lambda d: d.update(k3accept_facts=2), "k3accept_facts"),
    (lambda d: d.update(rdma_devices="mlx5_0"), "rdma_devices"),
    (lambda d: d.update(collected_at=float("nan")), "collected_at"),
])
def test_malformed_field_is_named(mutate: Any, field: str) -> None:
    data = json.loads(dumps(GOOD))
    mutate(data)
    with pytest.raises(FactsFileError) as info:
        from_dict(data, "nodes/gpu-a.json")
    assert info.value.field == field
    assert "nodes/gpu-a.json" in str(info.value) and f"'{field}'" in str(info.value)


def test_broken_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"k3accept_facts": 1,\n  "node": }')
    with pytest.raises(FactsFileError, match=r"broken.json: the file: not JSON: .* line 2 "
                                             r"column 11"):
        load(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FactsFileError, match="no such file"):
        load(tmp_path / "absent.json")


json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8)
FIELDS = list(json.loads(dumps(GOOD))) + ["gpus.0", "gpus.3"]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(FIELDS), json_value), min_size=1, max_size=3))
def test_any_corruption_is_accepted_or_named(changes: list[tuple[str, Any]]) -> None:
    data = json.loads(dumps(GOOD))
    for key, value in changes:
        if key.startswith("gpus."):
            gpu = data["gpus"][int(key[5:])] if isinstance(data.get("gpus"), list) and len(
                data["gpus"]) > int(key[5:]) else None
            if isinstance(gpu, dict):
                gpu["memory_used_bytes"] = value
            continue
        data[key] = value
    try:
        facts = from_dict(data, "fuzz.json")
    except FactsFileError as exc:
        assert str(exc).startswith("facts file fuzz.json: ")
        top = exc.field.split("[")[0].split(".")[0]
        assert exc.field == "" or top in data or top == "gpus"
    else:
        assert isinstance(facts, NodeFacts)
        assert all(isinstance(g.index, int) for g in facts.gpus)


@given(st.text(max_size=40))
def test_any_text_is_accepted_or_named(text: str) -> None:
    try:
        loads(text, "t.json")
    except FactsFileError as exc:
        assert "t.json" in str(exc)
