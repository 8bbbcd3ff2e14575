"""One machine seen by two sources counts once: Kubernetes nodes (``kubectl get nodes -o
json`` with GPU feature discovery labels: no GPU UUIDs) beside dcgm-exporter series.

The dcgm series are in the shapes real dcgm-exporters publish (label order and names as in
the public reports cited per shape):

* exporter given ``NODE_NAME`` (NVIDIA/dcgm-exporter#129, after): ``Hostname`` is the node,
  ``gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION, container,
  namespace, pod`` (NVIDIA/dcgm-exporter#490);
* exporter without it (NVIDIA/dcgm-exporter#129, before; #78): ``Hostname`` is the exporter
  pod's own name, ``nvidia-dcgm-exporter-cwbcm``;
* read through Prometheus with a relabelled node label (NVIDIA/gpu-operator#472):
  ``Hostname="nvidia-dcgm-exporter-57pvc"`` plus ``instance="10.244.1.9:9400"``,
  ``job="gpu-metrics"``, ``node="aks-gpunp-66230965-vmss000000"``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from fault_stub import StubServer
from pytest_k3accept.checks.environment import check_driver, check_topology
from pytest_k3accept.observe.host import gather
from pytest_k3accept.observe.host.facts import GpuFacts, HostFacts, NodeFacts
from pytest_k3accept.observe.host.identity import identifying
from pytest_k3accept.observe.host.remote import USED, nodes_from_samples

H200 = Path(__file__).parent.parent / "data" / "host" / "kubectl-nodes-h200-gfd.json"
COULD_NOT = "could not tell whether 2 sources describe the same nodes"


def dcgm_series(hostname: str, uuid_seed: str, gpus: int = 8, extra: str = "",
                driver: str = "580.95.05") -> str:
    """dcgm-exporter 4.x text for one node's GPUs (memory families, in MiB)."""
    lines = []
    for metric, value in (("DCGM_FI_DEV_FB_USED", 120000), ("DCGM_FI_DEV_FB_FREE", 23000),
                          ("DCGM_FI_DEV_FB_RESERVED", 771)):
        lines += [f"# HELP {metric} Framebuffer memory (in MiB).", f"# TYPE {metric} gauge"]
        for g in range(gpus):
            lines.append(
                f'{metric}{{gpu="{g}",UUID="GPU-{uuid_seed}{g:02d}-6d3c-22ed-0ec8-d3b864870b8b",'
                f'pci_bus_id="00000000:{0x18 + g:02X}:00.0",device="nvidia{g}",'
                f'modelName="NVIDIA H200",Hostname="{hostname}",'
                f'DCGM_FI_DRIVER_VERSION="{driver}",container="",namespace="",pod=""{extra}}}'
                f" {value}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def dcgm() -> Iterator[tuple[StubServer, dict[str, str]]]:
    """A loopback dcgm-exporter answering ``page["text"]`` at ``/metrics``."""
    page = {"text": ""}
    with StubServer() as stub:
        stub.route("GET", "/metrics", lambda r: r.send(200, page["text"].encode(),
                                                        "text/plain; version=0.0.4"))
        yield stub, page


def facts_with(dcgm: tuple[StubServer, dict[str, str]], text: str) -> HostFacts:
    stub, page = dcgm
    page["text"] = text
    return gather([H200], dcgm_url=stub.base_url, local=False)


def test_kubectl_node_and_its_dcgm_series_named_by_node_name_count_once(
        dcgm: tuple[StubServer, dict[str, str]]) -> None:
    facts = facts_with(dcgm, dcgm_series("k3-h200-0", "8b22"))
    assert [n.node for n in facts.nodes] == ["k3-h200-0", "k3-h200-1"]
    assert facts.node_count == 2 and facts.gpu_count == 16  # not 24
    a = facts.nodes[0]
    assert a.source.startswith("kubectl:") and "+dcgm:" in a.source
    assert a.gpus[0].uuid == "GPU-8b2200-6d3c-22ed-0ec8-d3b864870b8b"  # from dcgm
    assert a.gpus[0].name == "NVIDIA-H200"  # kubectl's (the first source wins)
    assert a.gpus[7].memory_used_bytes == 120000 * 2**20
    assert check_topology(facts, 16, None, 2).ok is True
    assert not any(COULD_NOT[:20] in n for n in facts.notes)


def test_node_label_added_by_prometheus_relabelling_identifies_the_node() -> None:
    """Read through Prometheus: Hostname is the exporter pod, ``node`` the machine."""
    extra = {"instance": "10.244.1.9:9400", "job": "gpu-metrics", "node": "k3-h200-1"}
    samples = [(USED, {"gpu": str(g), "UUID": f"GPU-c89b14a3-ce7c-6725-8424-b55d37d9c3{g:02d}",
                       "device": f"nvidia{g}", "modelName": "NVIDIA H200",
                       "Hostname": "nvidia-dcgm-exporter-57pvc",
                       "DCGM_FI_DRIVER_VERSION": "580.65.06", **extra}, 1024.0)
               for g in range(8)]
    (view,) = nodes_from_samples(samples, "prometheus:http://prom:9090")
    assert view.node == "k3-h200-1" and view.identity == {"k3-h200-1"}
    file_views = gather([H200], local=False).nodes
    facts = HostFacts.merge([*file_views, view])
    assert facts.node_count == 2 and facts.gpu_count == 16
    assert facts.nodes[1].gpus[3].uuid == "GPU-c89b14a3-ce7c-6725-8424-b55d37d9c303"


def test_kubectl_hostname_label_matches_the_dcgm_hostname(
        dcgm: tuple[StubServer, dict[str, str]], tmp_path: Path) -> None:
    """``metadata.name`` may differ from the host name (cloud node names); the
    ``kubernetes.io/hostname`` label is the name the node's own programs see."""
    data = json.loads(H200.read_text())
    data["items"][1]["metadata"]["labels"]["kubernetes.io/hostname"] = "ip-172-31-54-152"
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(data))
    stub, page = dcgm
    page["text"] = dcgm_series("ip-172-31-54-152", "4c22")
    facts = gather([path], dcgm_url=stub.base_url, local=False)
    assert facts.gpu_count == 16 and facts.nodes[0].node == "k3-h200-0"
    assert any("'ip-172-31-54-152'" in n and "by the node name 'ip-172-31-54-152'" in n
               and "counted once" in n for n in facts.notes), facts.notes


def test_a_dcgm_series_of_another_node_counts_apart(
        dcgm: tuple[StubServer, dict[str, str]]) -> None:
    facts = facts_with(dcgm, dcgm_series("k3-h200-2", "1533", gpus=8))
    assert [n.node for n in facts.nodes] == ["k3-h200-0", "k3-h200-1", "k3-h200-2"]
    assert facts.node_count == 3 and facts.gpu_count == 24
    assert check_topology(facts, 24, None, 3).ok is True


def test_dcgm_named_only_by_its_pod_makes_the_gpu_count_unknown(
        dcgm: tuple[StubServer, dict[str, str]]) -> None:
    """No UUID on the kubectl side, no node name on the dcgm side: the 8 GPUs may be
    k3-h200-0's, k3-h200-1's or a third machine's. Never 24 (a pass for gpus=24)."""
    facts = facts_with(dcgm, dcgm_series("nvidia-dcgm-exporter-cwbcm", "8382"))
    assert len(facts.nodes) == 3 and facts.gpu_count is None
    assert facts.count_unknown.startswith(COULD_NOT)
    assert "nvidia-dcgm-exporter-cwbcm" in facts.count_unknown
    assert "counted apart it would be 24" in facts.count_unknown
    assert facts.count_unknown in facts.notes
    check = check_topology(facts, 24, None, None)
    assert check.ok is None and check.actual.startswith(f"GPU count unknown: {COULD_NOT}")
    assert "no GPU facts" not in check.actual
    assert "GPU count unknown" in facts.summary() and COULD_NOT in facts.summary()
    assert facts.to_dict()["gpu_count"] is None
    # every node's driver is still judged: a doubled node does not change a minimum
    assert check_driver(facts, "580").ok is True


def test_views_with_uuids_on_both_sides_are_told_apart_by_them() -> None:
    """A facts file and a pod-named dcgm view: UUIDs decide (same -> once, else apart)."""
    mine = tuple(GpuFacts(index=i, uuid=f"GPU-{i:08x}-aaaa") for i in range(8))
    other = tuple(GpuFacts(index=i, uuid=f"GPU-{i:08x}-bbbb") for i in range(8))
    file_view = NodeFacts(node="k3-h200-0", source="file:a.json", gpu_available=True,
                          gpus=mine)
    pod = NodeFacts(node="nvidia-dcgm-exporter-x7k2p", source="dcgm:x", gpu_available=True,
                    gpus=other)
    apart = HostFacts.merge([file_view, pod])
    assert apart.gpu_count == 16 and apart.count_unknown == ""
    same = HostFacts.merge([file_view, NodeFacts(node=pod.node, source="dcgm:x",
                                                 gpu_available=True, gpus=mine)])
    assert same.gpu_count == 8 and "the same node, counted once" in " ".join(same.notes)


def test_names_that_are_no_machines_name() -> None:
    for name in ("nvidia-dcgm-exporter-cwbcm", "nvidia-dcgm-exporter-57pvc",
                 "dcgm-exporter-1691999-x7k2p", "10.244.1.9:9400", "", None):
        assert not identifying(name), name
    for name in ("k3-h200-0", "ip-172-31-54-152", "aks-gpunp-66230965-vmss000000",
                 "computeinstance-e00c1p6dpy98xytphp", "dcgm-exporter-host"):
        assert identifying(name), name


def test_prometheus_path_with_the_node_label(dcgm: tuple[StubServer, dict[str, str]]) -> None:
    """The whole Prometheus reader on an answer of the real shape (gpu-operator#472)."""
    series = [{"metric": {"__name__": USED, "gpu": str(g), "UUID": f"GPU-c89b{g:04d}",
                          "device": f"nvidia{g}", "modelName": "NVIDIA H200",
                          "Hostname": "nvidia-dcgm-exporter-57pvc",
                          "DCGM_FI_DRIVER_VERSION": "580.65.06",
                          "instance": "10.244.1.9:9400", "job": "gpu-metrics",
                          "node": "k3-h200-0"},
               "value": [1764600000.123, "4096"]} for g in range(8)]

    def answer(req: Any) -> None:
        query = parse_qs(urlsplit(req.path).query)["query"][0]
        result = series if query.startswith(USED) else []
        req.send(200, json.dumps({"status": "success", "data": {
            "resultType": "vector", "result": result}}).encode())

    stub, _ = dcgm
    stub.route("GET", "/api/v1/query", answer)
    facts = gather([H200], prometheus_url=stub.base_url, local=False)
    assert facts.gpu_count == 16 and facts.nodes[0].gpus[0].uuid == "GPU-c89b0000"
    assert facts.nodes[0].gpus[0].memory_used_bytes == 4096 * 2**20
