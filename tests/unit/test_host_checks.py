"""The environment checks (C3, C4, C5) and the facts merge, on constructed facts."""

from __future__ import annotations

from pytest_k3accept.checks.environment import check_cuda, check_driver, check_topology
from pytest_k3accept.observe.host.facts import GpuFacts, HostFacts, NodeFacts, nvlink_from_topology

TOPO_NV = """\tGPU0\tGPU1\tNIC0\tCPU Affinity
GPU0\t X \tNV18\tSYS\t0-47
GPU1\tNV18\t X \tSYS\t0-47
NIC0\tSYS\tSYS\t X
"""
TOPO_PCI = TOPO_NV.replace("NV18", "PIX")


def node(name: str = "gpu-a", driver: str | None = "580.65.06", n: int = 8,
         nvlink: int | None = 18, **kw) -> NodeFacts:
    gpus = tuple(GpuFacts(i, "NVIDIA H200", memory_total_bytes=141 << 30, nvlink_active=nvlink)
                 for i in range(n))
    return NodeFacts(node=name, source="test", gpu_available=True, driver_version=driver,
                     gpus=gpus, **kw)


def test_driver_575_fails_naming_both_versions() -> None:
    check = check_driver(HostFacts((node(driver="575.57.08"),)), "580")
    assert check.ok is False
    msg = check.message()
    assert "575.57.08" in msg and ">= 580" in msg and "ENVIRONMENT FAILURE (C4" in msg
    assert "not a capacity problem" in msg


def test_driver_all_nodes_must_pass() -> None:
    facts = HostFacts((node("a"), node("b", driver="575.57.08")))
    check = check_driver(facts, "580.65.06")
    assert check.ok is False and "Too old on b" in check.detail
    assert check_driver(HostFacts((node("a"), node("b", driver="590.1"))), "580").ok


def test_driver_unknown_without_gpu_facts() -> None:
    check = check_driver(HostFacts((), notes=("local NVML: no driver",)))
    assert check.ok is None and "local NVML: no driver" in check.actual
    assert check_driver(HostFacts((node(driver=None),))).ok is None


def test_cuda_image_and_driver() -> None:
    good = node(cuda_driver_version="13.0", cuda_runtime="13.0.1", cuda_runtime_source="env")
    assert check_cuda(HostFacts((good,)), 13).ok is True
    cu12 = node(cuda_runtime="12.8.1", cuda_runtime_source="env")
    bad = check_cuda(HostFacts((cu12,), image="vllm:cu128"), 13)
    assert bad.ok is False and "CUDA 12.8.1" in bad.actual and "vllm:cu128" in bad.expected
    old = node(driver="575.57.08", cuda_driver_version="12.9", cuda_runtime="13.0.1")
    msg = check_cuda(HostFacts((old,)), 13).message()
    assert "ENVIRONMENT FAILURE (C3" in msg and "supports CUDA 12.9" in msg
    by_table = node(driver="575.57.08", cuda_runtime="13.0")
    assert check_cuda(HostFacts((by_table,)), 13).ok is False
    assert check_cuda(HostFacts((node(),)), 13).ok is None  # runtime unknown
    assert check_cuda(HostFacts((good,)), 13, minor=1).ok is False


def test_cuda_runtime_from_a_container_file_and_driver_from_another_source() -> None:
    container = NodeFacts(node="pod-1", source="file", cuda_runtime="13.0.1")
    assert check_cuda(HostFacts((container,)), 13).ok is None  # driver unknown
    assert check_cuda(HostFacts((container, node("gpu-a"))), 13).ok is True


def test_topology() -> None:
    one = HostFacts((node(n=1, nvlink=0),))
    check = check_topology(one, gpus=8)
    assert check.ok is False and "1 GPUs < 8" in check.message()
    eight = HostFacts((node(),))
    assert check_topology(eight, gpus=8, interconnect="nvlink").ok is True
    assert check_topology(eight, gpus=8, interconnect="rdma").ok is None
    rdma = HostFacts((node("a", rdma_devices=("mlx5_0",)), node("b", rdma_devices=())))
    res = check_topology(rdma, gpus=16, interconnect="rdma", nodes=2)
    assert res.ok is False and "no rdma on b" in res.detail
    pcie = HostFacts((node(nvlink=0),))
    assert check_topology(pcie, interconnect="nvlink").ok is False
    assert check_topology(HostFacts(()), gpus=8).ok is None


def test_nvlink_from_topology_matrix() -> None:
    assert nvlink_from_topology(TOPO_NV) is True
    assert nvlink_from_topology(TOPO_PCI) is False
    assert nvlink_from_topology("\tGPU0\nGPU0\t X\n") is None
    assert nvlink_from_topology(None) is None
    unknown_links = node(nvlink=None, n=2, topology=TOPO_NV)
    assert HostFacts((unknown_links,)).interconnects()["gpu-a"]["nvlink"] is True


def test_merge_by_node_keeps_first_known_fields() -> None:
    dcgm = NodeFacts(node="gpu-a", source="dcgm", gpu_available=True, driver_version="580.1",
                     gpus=(GpuFacts(0, memory_used_bytes=5), GpuFacts(1)))
    file = NodeFacts(node="gpu-a", source="file", cuda_runtime="13.0",
                     gpus=(GpuFacts(0, name="H200", memory_used_bytes=7),))
    other = NodeFacts(node="gpu-b", source="dcgm", gpu_available=True, gpus=(GpuFacts(0),))
    merged = HostFacts.merge([file, dcgm, other])
    a = merged.nodes[0]
    assert (a.source, a.gpu_available, a.driver_version, a.cuda_runtime) == (
        "file+dcgm", True, "580.1", "13.0")
    assert a.gpus[0] == GpuFacts(0, name="H200", memory_used_bytes=7)
    assert merged.node_count == 2 and merged.gpu_count == 3
    assert "2 node(s), 3 GPU(s)" in merged.summary()
    assert merged.to_dict()["nodes"][1]["node"] == "gpu-b"
