"""Scoped host facts: Kubernetes nodes from ``kubectl get nodes -o json``, the GPU selector on
dcgm-exporter series, local NVML only when it belongs to the deployment, one node seen by two
sources counted once, and driver floors compared in full (CUDA 13.0: >= 580.65.06).

The kubectl files (``tests/data/host/``) are in kubectl's real output shape with GPU feature
discovery's real labels (their README says where each label's shape was seen)."""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_k3accept.checks.environment import check_cuda, check_driver, check_topology
from pytest_k3accept.observe.host import FactsFileError, gather, kubectl, local_wanted
from pytest_k3accept.observe.host.facts import GpuFacts, HostFacts, NodeFacts
from pytest_k3accept.observe.host.nvml_stub import StubGpu, StubNvml
from pytest_k3accept.observe.host.remote import Dcgm, RemoteError, label_filter
from pytest_k3accept.observe.host.versions import (driver_at_least, full_minimum,
                                                   parse_driver)

from test_host_remote import dcgm_text, serve  # noqa: F401  (fixture)

HOST = Path(__file__).parent.parent / "data" / "host"
H200 = HOST / "kubectl-nodes-h200-gfd.json"
OLDER = HOST / "kubectl-nodes-older-gfd.json"


# -- kubectl get nodes -o json --------------------------------------------------------------
def test_kubectl_nodes_with_current_gfd_labels() -> None:
    facts = gather([H200], local=False)
    assert [n.node for n in facts.nodes] == ["k3-h200-0", "k3-h200-1"]  # not the control plane
    assert facts.node_count == 2 and facts.gpu_count == 16
    a, b = facts.nodes
    assert (a.driver_version, b.driver_version) == ("580.95.05", "580.65.06")
    assert a.cuda_driver_version == "13.0" and a.source == f"kubectl:{H200}"
    assert a.gpus[0].name == "NVIDIA-H200" and a.gpus[7].memory_total_bytes == 143771 * 2**20
    assert check_driver(facts, "580").ok is True
    assert check_topology(facts, 16, None, 2).ok is True


def test_kubectl_nodes_with_older_gfd_labels_fail_the_driver_check() -> None:
    facts = gather([OLDER], local=False)
    assert [(n.node, n.driver_version, n.cuda_driver_version, n.gpu_count)
            for n in facts.nodes] == [("gpu-node-h100-3", "570.124.06", "12.8", 8)]
    check = check_driver(facts, "580")
    assert check.ok is False and "570.124.06 on gpu-node-h100-3" in check.actual
    assert check.expected == "host driver >= 580.65.06 (R580 as CUDA 13.x needs it)"
    image = HostFacts(tuple(replace(n, cuda_runtime="13.0") for n in facts.nodes))
    cuda = check_cuda(image, 13)
    assert cuda.ok is False and "driver supports CUDA 12.8" in cuda.actual


def test_kubectl_file_with_no_gpu_node_says_so(tmp_path: Path) -> None:
    data = json.loads(OLDER.read_text())
    data["items"] = data["items"][1:]  # the CPU node only
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(data))
    facts = gather([path], local=False)
    assert facts.nodes == () and "no node has GPU feature discovery labels" in facts.summary()


@pytest.mark.parametrize("label,value,problem", [
    ("nvidia.com/cuda.driver-version.full", "R-580", "is not a version"),
    ("nvidia.com/gpu.count", "eight", "expected a whole number"),
    ("nvidia.com/gpu.memory", "-1", "expected a whole number >= 0"),
])
def test_bad_kubectl_labels_are_named(tmp_path: Path, label: str, value: str,
                                      problem: str) -> None:
    data = json.loads(H200.read_text())
    data["items"][2]["metadata"]["labels"][label] = value
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FactsFileError, match=f"node k3-h200-1: {label}.*{problem}"):
        gather([path], local=False)


def test_one_node_object_and_capacity_without_gpu_count() -> None:
    item = json.loads(H200.read_text())["items"][1]
    del item["metadata"]["labels"]["nvidia.com/gpu.count"]
    assert kubectl.is_kubectl(item)
    (node,) = kubectl.nodes(item, "one.json")
    assert node.gpu_count == 8  # status.capacity["nvidia.com/gpu"]


# -- local NVML belongs to the deployment only when it is on this machine -------------------
def test_local_nvml_only_when_asked_or_local() -> None:
    assert local_wanted(False, ["http://127.0.0.1:8000"]) == (True, "")
    assert local_wanted(False, [f"http://{socket.gethostname()}:8000"])[0] is True
    assert local_wanted(True, ["http://gpu-node-7:8000"]) == (True, "")
    assert local_wanted(False, []) == (True, "")  # nothing else could say
    used, why = local_wanted(False, ["http://user:pw@gpu-node-7:8000"])
    assert used is False and "the endpoint http://***@gpu-node-7:8000 is not on this" in why
    assert "--k3-local-gpu" in why and "pw" not in why
    assert local_wanted(False, [], remote=True)[0] is False
    # --k3-launch without an endpoint: the plugin starts the server here
    assert local_wanted(False, [], remote=True, launched=True) == (True, "")
    assert local_wanted(False, ["http://gpu-node-7:8000"], launched=True)[0] is False


def test_remote_facts_are_not_merged_with_this_machine() -> None:
    stub = StubNvml([StubGpu()] * 4, driver="550.54.15")  # this CI machine's own GPUs
    used, why = local_wanted(False, ["http://gpu-node-7:8000"], remote=True)
    facts = gather([H200], nvml_module=stub, local=used, local_note=why)
    assert facts.gpu_count == 16 and check_driver(facts, "580").ok is True
    assert any("local NVML not read" in n for n in facts.notes)
    merged = gather([H200], nvml_module=stub, local=True)
    assert merged.gpu_count == 20 and check_driver(merged, "580").ok is False  # the old bug


def test_one_node_seen_by_a_facts_file_and_dcgm_counts_once() -> None:
    uuids = tuple(GpuFacts(index=i, uuid=f"GPU-{i:08x}-aaaa") for i in range(8))
    file_view = NodeFacts(node="k3-h200-0", source="file", gpu_available=True,
                          driver_version="580.95.05", gpus=uuids)
    pod_view = NodeFacts(node="nvidia-dcgm-exporter-x7k2p", source="dcgm",
                         gpu_available=True, driver_version="580.95.05", gpus=uuids)
    facts = HostFacts.merge([file_view, pod_view])
    assert facts.node_count == 1 and facts.gpu_count == 8
    assert "the same node, counted once" in " ".join(facts.notes)


# -- the GPU selector on dcgm-exporter series ----------------------------------------------
def test_dcgm_series_are_scoped_by_the_selector(serve: dict[str, object]) -> None:  # noqa: F811
    serve["body"] = dcgm_text("k3-h200-0") + dcgm_text("other-team-9", "550.54.15", gpus=4)
    url = str(serve["url"])
    assert len(Dcgm(url).facts()) == 2
    scoped = Dcgm(url, selector='Hostname=~"k3-.*"').facts()
    assert [n.node for n in scoped] == ["k3-h200-0"]
    assert [n.node for n in Dcgm(url, selector='Hostname!="k3-h200-0"').facts()] == [
        "other-team-9"]
    with pytest.raises(RemoteError, match=r'the selector matched no GPU series: '
                                          r'\{Hostname="nope"\} at dcgm-exporter'):
        Dcgm(url, selector='Hostname="nope"').facts()
    facts = gather(dcgm_url=url, prometheus_selector='Hostname=~"k3-.*"', local=False)
    assert facts.node_count == 1
    assert 'GPU queries scoped by selector {Hostname=~"k3-.*"}' in facts.notes


def test_label_filter_is_promql_like() -> None:
    match = label_filter('namespace="k3",pod=~"vllm-.*",gpu!="7",job!~"test.*"')
    assert match({"namespace": "k3", "pod": "vllm-0", "gpu": "0", "job": "dcgm"})
    assert not match({"namespace": "k3", "pod": "xvllm-0", "gpu": "0"})  # anchored
    assert not match({"namespace": "k3", "pod": "vllm-0", "gpu": "7"})
    assert not match({"namespace": "k3", "pod": "vllm-0", "job": "testing"})
    assert label_filter('a="say \\"hi\\""')({"a": 'say "hi"'})
    with pytest.raises(ValueError, match="bad regular expression"):
        label_filter('pod=~"("')


# -- driver floors in full -------------------------------------------------------------------
@pytest.mark.parametrize("actual,ok", [
    ("580.65.06", True), ("580.95.05", True), ("590.44.01", True), ("580.65.05", False),
    ("580.10.01", False), ("575.57.08", False), ("580", None), ("580.65", None),
    ("581", True), ("579", False),
])
def test_a_bare_580_requirement_means_what_cuda_13_needs(actual: str, ok: bool | None) -> None:
    need = full_minimum(parse_driver("580"))
    assert need.text == "580.65.06"
    assert driver_at_least(parse_driver(actual), need) is ok
    node = NodeFacts(node="n", source="file", gpu_available=True, driver_version=actual,
                     gpus=(GpuFacts(index=0),))
    assert check_driver(HostFacts((node,)), "580").ok is ok


def test_requirements_that_are_not_a_known_branch_stay_as_written() -> None:
    assert full_minimum(parse_driver("590")).text == "590"
    assert full_minimum(parse_driver("580.95")).text == "580.95"
    node = NodeFacts(node="n", source="f", gpu_available=True, driver_version="580.65.06",
                     gpus=(GpuFacts(index=0),))
    assert check_driver(HostFacts((node,)), "580.95").ok is False
    branch_only = NodeFacts(node="n", source="f", gpu_available=True, driver_version="580",
                            gpus=(GpuFacts(index=0),))
    check = check_driver(HostFacts((branch_only,)), "580")
    assert check.ok is None and "only the branch 580 is known" in check.actual
