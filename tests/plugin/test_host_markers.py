"""Host markers and fixtures as users run them: pytester runs of real test files.

Every run gets a ``conftest.py`` that installs the pynvml stand-in, so the outcome does not
depend on whether this machine has a GPU, and that writes the session's environment evidence
and checklist to ``evidence.json`` for the assertions here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept.observe.host.facts import GpuFacts, NodeFacts
from pytest_k3accept.observe.host.factsfile import dumps

CONFTEST = '''
import json, sys
from pytest_k3accept.observe.host.nvml_stub import StubGpu, StubNvml
from pytest_k3accept.fixtures import state_of

sys.modules["pynvml"] = StubNvml({gpus})

def pytest_sessionfinish(session):
    state = state_of(session.config)
    out = {{"evidence": [e.as_dict() for e in state.evidence],
           "checklist": dict(state.checklist.statuses())}}
    with open("evidence.json", "w") as f:
        json.dump(out, f)
'''

NO_GPU = "fail_init=True"
STUB_GPUS = "[StubGpu(total=100 * 2**30, used=10 * 2**30) for _ in range(2)]"


def write_facts(pytester: pytest.Pytester, name: str, driver: str = "580.65.06",
                gpus: int = 8, nvlink: int | None = 18, cuda_driver: str | None = "13.0",
                runtime: str | None = "13.0.1", rdma: tuple[str, ...] | None = ()) -> Path:
    facts = NodeFacts(node=name, source="test", gpu_available=True, driver_version=driver,
                      cuda_driver_version=cuda_driver,
                      gpus=tuple(GpuFacts(i, "NVIDIA H200", f"GPU-{name}-{i}", 141 << 30,
                                          1 << 30, nvlink) for i in range(gpus)),
                      cuda_runtime=runtime, cuda_runtime_source="CUDA_VERSION environment "
                      "variable" if runtime else None, rdma_devices=rdma)
    path = pytester.path / f"{name}.json"
    path.write_text(dumps(facts))
    return path


def setup(pytester: pytest.Pytester, suite: str, gpus: str = NO_GPU) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST.format(gpus=gpus))
    pytester.makepyfile(test_env=suite)


def evidence(pytester: pytest.Pytester) -> dict[str, Any]:
    return json.loads((pytester.path / "evidence.json").read_text())


DRIVER = '''
import pytest

@pytest.mark.k3_driver(min="580")
def test_driver():
    pass
'''


def test_driver_575_fails_naming_both_versions(pytester: pytest.Pytester) -> None:
    setup(pytester, DRIVER)
    facts = write_facts(pytester, "gpu-a", driver="575.57.08")
    result = pytester.runpytest("--k3-host-facts", str(facts))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ENVIRONMENT FAILURE (C4 driver-r580) k3_driver: expected "
                                 "host driver >= 580*actual 575.57.08 on gpu-a*not a "
                                 "capacity problem*"])
    assert "Traceback" not in result.stdout.str()
    ev = [e for e in evidence(pytester)["evidence"] if e["kind"] == "environment"]
    assert len(ev) == 1 and ev[0]["nodeid"] == "test_env.py::test_driver"
    data = ev[0]["data"]
    assert (data["item"], data["ok"]) == ("C4", False)
    assert "580" in data["expected"] and "575.57.08" in data["actual"]
    assert evidence(pytester)["checklist"]["C4"] == "fail"


def test_driver_580_passes(pytester: pytest.Pytester) -> None:
    setup(pytester, DRIVER)
    facts = write_facts(pytester, "gpu-a", driver="580.65.06")
    result = pytester.runpytest("--k3-host-facts", str(facts))
    result.assert_outcomes(passed=1)
    out = evidence(pytester)
    assert out["checklist"]["C4"] == "pass"
    host = [e for e in out["evidence"] if e["kind"] == "host"]
    assert host and "1 node(s), 8 GPU(s), driver 580.65.06" in host[0]["summary"]


def test_every_node_counts(pytester: pytest.Pytester) -> None:
    setup(pytester, DRIVER)
    a = write_facts(pytester, "gpu-a", driver="580.65.06")
    b = write_facts(pytester, "gpu-b", driver="575.57.08")
    result = pytester.runpytest("--k3-host-facts", str(a), "--k3-host-facts", str(b))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*580.65.06 on gpu-a, 575.57.08 on gpu-b*Too old on gpu-b*"])


def test_no_facts_skips_with_the_reason(pytester: pytest.Pytester) -> None:
    setup(pytester, DRIVER)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*k3_driver: facts unknown (C4 driver-r580): no GPU facts "
                                 "(local NVML: NVML could not start*--k3-host-facts FILE*"])
    assert evidence(pytester)["checklist"]["C4"] == "skip"


def test_no_facts_under_require_is_an_error(pytester: pytest.Pytester) -> None:
    setup(pytester, DRIVER)
    result = pytester.runpytest("--k3-require")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*facts unknown*--k3-require makes this an error*"])
    assert "Traceback" not in result.stdout.str()


CUDA = '''
import pytest

@pytest.mark.k3_cuda(major=13)
def test_cuda():
    pass

@pytest.mark.k3_cuda(13, 1)
def test_cuda_minor():
    pass
'''


def test_cuda_marker(pytester: pytest.Pytester) -> None:
    setup(pytester, CUDA)
    good = write_facts(pytester, "gpu-a", runtime="13.0.1", cuda_driver="13.0")
    result = pytester.runpytest("--k3-host-facts", str(good), "--k3-image", "reg/k3:cu130")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["ENVIRONMENT FAILURE (C3 cuda13-"
                                 "image)*expected image CUDA runtime 13.1*(image reg/k3:cu130)"
                                 "*actual CUDA 13.0.1 on gpu-a*"])


def test_cuda_image_on_an_old_driver_fails(pytester: pytest.Pytester) -> None:
    setup(pytester, CUDA.split("@pytest.mark.k3_cuda(13, 1)")[0])
    old = write_facts(pytester, "gpu-a", driver="575.57.08", cuda_driver="12.9")
    result = pytester.runpytest("--k3-host-facts", str(old))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*gpu-a: driver supports CUDA 12.9 (runtime needs 13.0)*"])


def test_cuda_runtime_unknown_skips(pytester: pytest.Pytester) -> None:
    setup(pytester, CUDA.split("@pytest.mark.k3_cuda(13, 1)")[0])
    facts = write_facts(pytester, "gpu-a", runtime=None)
    result = pytester.runpytest("--k3-host-facts", str(facts), "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*the image's CUDA runtime is unknown*k3accept collect*"])


TOPOLOGY = '''
import pytest

pytestmark = pytest.mark.k3_topology(gpus=8, interconnect="nvlink")

def test_module_level():
    pass

@pytest.mark.k3_topology(gpus=16, interconnect="rdma", nodes=2)
def test_two_nodes():
    pass
'''


def test_topology_marker(pytester: pytest.Pytester) -> None:
    setup(pytester, TOPOLOGY)
    a = write_facts(pytester, "gpu-a", rdma=("mlx5_0",))
    b = write_facts(pytester, "gpu-b", rdma=())
    result = pytester.runpytest("--k3-host-facts", str(a), "--k3-host-facts", str(b), "-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["ENVIRONMENT FAILURE (C5 topology)*actual 16 "
                                 "GPUs on 2 node(s)*no rdma on gpu-b*"])
    assert evidence(pytester)["checklist"]["C5"] == "fail"


def test_topology_too_few_gpus_from_local_nvml(pytester: pytest.Pytester) -> None:
    setup(pytester, TOPOLOGY.split("@pytest.mark")[0], gpus=STUB_GPUS)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected >= 8 GPUs, nvlink on every node, actual 2 GPUs on "
                                 "1 node(s)*2 GPUs < 8*"])


def test_malformed_facts_file_names_file_and_field(pytester: pytest.Pytester) -> None:
    setup(pytester, DRIVER)
    path = write_facts(pytester, "gpu-a")
    data = json.loads(path.read_text())
    data["gpus"][3]["memory_total_bytes"] = "141GB"
    path.write_text(json.dumps(data))
    result = pytester.runpytest("--k3-host-facts", str(path))
    result.assert_outcomes(errors=1)
    assert (f"facts file {path}: field 'gpus[3].memory_total_bytes': expected a whole number"
            in result.stdout.str())
    assert "Traceback" not in result.stdout.str()


def test_bad_marker_arguments_are_a_usage_error(pytester: pytest.Pytester) -> None:
    setup(pytester, "import pytest\n\n@pytest.mark.k3_topology(interconnect='pcie')\n"
                    "def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_env.py::test_x: @k3_topology: interconnect must be one "
                                 "of 'nvlink', 'rdma' or None, got 'pcie'*"])


GPU = '''
import time
from pytest_k3accept.fixtures import state_of

def test_alloc(k3_gpu, k3_host):
    import pynvml
    assert k3_host.gpu_count == 2 and k3_gpu.available
    time.sleep(0.1)
    pynvml.gpus[1].used = 60 * 2**30
    time.sleep(0.1)
    pynvml.gpus[1].used = 10 * 2**30
    time.sleep(0.1)
    key = [k for k in k3_gpu.peak if k.endswith("/gpu1")][0]
    assert k3_gpu.peak[key] == 60 * 2**30
    assert abs(k3_gpu.headroom[key] - 0.4) < 1e-9

def test_evidence_recorded(request):
    ev = state_of(request.config).of_kind("gpu-telemetry")
    assert len(ev) == 1 and ev[0].nodeid.endswith("test_alloc")
    assert ev[0].data["kind"] == "gpu-memory" and ev[0].data["samples"] >= 5
    assert max(ev[0].data["peak_bytes"].values()) == 60 * 2**30

def test_no_source(k3_gpu):
    assert not k3_gpu.available
'''


def test_k3_gpu_samples_the_stub_gpus(pytester: pytest.Pytester) -> None:
    setup(pytester, GPU, gpus=STUB_GPUS)
    result = pytester.runpytest("--k3-gpu-interval", "0.01", "-k", "not no_source")
    result.assert_outcomes(passed=2)


def test_k3_gpu_without_a_source_says_so(pytester: pytest.Pytester) -> None:
    setup(pytester, GPU + '''
def test_require(k3_gpu):
    k3_gpu.require()
''')
    result = pytester.runpytest("-k", "no_source or require", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*k3_gpu: no GPU memory source: local NVML: NVML could not "
                                 "start*no --k3-dcgm-url / --k3-prometheus-url given*"])
