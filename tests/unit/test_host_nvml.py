"""The NVML path with an injected stand-in for pynvml, and ``k3accept collect``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from pytest_k3accept.observe.host import collect, factsfile, gather, nvml
from pytest_k3accept.observe.host.nvml_stub import GIB, StubGpu, StubNvml


def test_read_local_reads_every_gpu_and_shuts_down() -> None:
    stub = StubNvml([StubGpu(used=3 * GIB, nvlinks=18), StubGpu(nvlinks=None, name="L40S")],
                    driver=b"580.159.03", cuda=13000)
    facts = nvml.read_local(stub, node="gpu-a")
    assert facts.gpu_available and facts.gpu_error is None
    assert (facts.driver_version, facts.cuda_driver_version) == ("580.159.03", "13.0")
    assert [g.nvlink_active for g in facts.gpus] == [18, 0]
    assert facts.gpus[0].memory_used_bytes == 3 * GIB
    assert facts.gpus[1].name == "L40S" and facts.gpus[1].uuid == "GPU-stub-0001"
    assert stub.inits == stub.shutdowns == 1


def test_no_driver_is_an_answer_not_an_exception() -> None:
    facts = nvml.read_local(StubNvml(fail_init=True), node="ci")
    assert not facts.gpu_available and facts.gpus == ()
    assert "NVML could not start" in (facts.gpu_error or "")
    assert "LibraryNotFound" in (facts.gpu_error or "")


def test_no_gpu_keeps_the_driver() -> None:
    facts = nvml.read_local(StubNvml([], driver="580.65.06"))
    assert not facts.gpu_available and facts.driver_version == "580.65.06"
    assert facts.gpu_error == "NVML sees no GPU"


def test_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    facts = nvml.read_local()
    assert "nvidia-ml-py (pynvml) is not installed" in (facts.gpu_error or "")


def test_memory_reader_reads_live_values_and_closes_once() -> None:
    stub = StubNvml([StubGpu(total=80 * GIB, used=GIB), StubGpu(total=80 * GIB, used=0)])
    reader = nvml.NvmlMemory(stub, node="n1")
    assert reader.available and reader.read()["n1/gpu0"] == (GIB, 80 * GIB)
    stub.gpus[0].used = 9 * GIB
    assert reader.read()["n1/gpu0"][0] == 9 * GIB
    reader.close()
    reader.close()
    assert stub.shutdowns == 1


def test_gather_merges_a_file_with_local_nvml_of_the_same_node(tmp_path: Path,
                                                                monkeypatch) -> None:
    monkeypatch.setenv("K3ACCEPT_NODE_NAME", "gpu-a")
    stub = StubNvml([StubGpu()] * 2, driver="580.65.06")
    container = factsfile.dumps(collect.collect(module=StubNvml(fail_init=True),
                                                environ={"CUDA_VERSION": "13.0.1"}))
    path = tmp_path / "container.json"
    path.write_text(container)
    facts = gather([path], image="registry/k3:cu130", nvml_module=stub)
    assert facts.node_count == 1 and facts.gpu_count == 2
    node = facts.nodes[0]
    assert node.cuda_runtime == "13.0.1" and node.driver_version == "580.65.06"
    assert facts.image_ref == "registry/k3:cu130"


def test_gather_without_any_gpu_says_why() -> None:
    facts = gather(nvml_module=StubNvml(fail_init=True))
    assert facts.gpu_count is None and facts.nodes == ()
    assert "local NVML: NVML could not start" in facts.summary()


def test_cuda_runtime_sources_in_order(tmp_path: Path) -> None:
    vj = tmp_path / "version.json"
    vj.write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "13.0.2"}}))
    torch = ("2.11.0+cu130", "13.0")
    assert collect.cuda_runtime({"CUDA_VERSION": "13.0.1"}, vj, torch) == (
        "13.0.1", "CUDA_VERSION environment variable")
    assert collect.cuda_runtime({}, vj, torch) == ("13.0.2", str(vj))
    assert collect.cuda_runtime({"CUDA_VERSION": "junk"}, tmp_path / "x.json", torch) == (
        "13.0", "torch 2.11.0+cu130 build")
    assert collect.cuda_runtime({}, tmp_path / "x.json", (None, None)) == (None, None)


def test_rdma_devices(tmp_path: Path) -> None:
    (tmp_path / "mlx5_1").mkdir()
    (tmp_path / "mlx5_0").mkdir()
    assert collect.rdma_devices(tmp_path) == ("mlx5_0", "mlx5_1")
    assert collect.rdma_devices(tmp_path / "absent") == ()


def test_collect_main_without_gpu_writes_a_valid_file(tmp_path: Path, capsys,
                                                      monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", StubNvml(fail_init=True))
    out = tmp_path / "node.json"
    assert collect.main(argparse.Namespace(out=str(out), image="img:1")) == 0
    data = json.loads(out.read_text())
    assert data["gpu_available"] is False and "NVML could not start" in data["gpu_error"]
    assert data["image"] == "img:1" and data["k3accept_facts"] == 1
    assert factsfile.load(out).image == "img:1"
    assert "no GPU facts" in capsys.readouterr().err


def test_collect_main_with_stub_gpus_to_stdout(capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", StubNvml([StubGpu()] * 8))
    assert collect.main(argparse.Namespace(out="-", image=None)) == 0
    captured = capsys.readouterr()
    facts = factsfile.loads(captured.out)
    assert facts.gpu_count == 8 and facts.driver_version == "580.65.06"
    assert "8 GPU(s), driver 580.65.06" in captured.err


def test_console_command_without_gpu(tmp_path: Path) -> None:
    import subprocess

    exe = Path(sys.executable).with_name("k3accept")
    if not exe.exists():
        pytest.skip(f"console script not installed beside {sys.executable}")
    done = subprocess.run([str(exe), "collect"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    facts = factsfile.loads(done.stdout, "stdout")
    assert facts.gpu_available or facts.gpu_error
