"""Kubernetes GPU nodes as host facts: the output of ``kubectl get nodes -o json``.

NVIDIA's GPU feature discovery (GFD, part of the GPU operator and the device plugin) labels
each GPU node. Read here, newest spelling first:

* driver: ``nvidia.com/cuda.driver-version.full`` (or ``.major`` / ``.minor`` /
  ``.revision``), older ``nvidia.com/cuda.driver.major`` / ``.minor`` / ``.rev``
  (deprecated by GFD in 2024, still on older clusters); label values are strings, the
  revision keeps its leading zero ("580.65.06");
* the CUDA version the driver supports (not the image's):
  ``nvidia.com/cuda.runtime-version.full`` (or ``.major`` / ``.minor``), older
  ``nvidia.com/cuda.runtime.major`` / ``.minor``;
* GPUs: ``nvidia.com/gpu.count`` (else the node's ``status.capacity["nvidia.com/gpu"]``),
  ``nvidia.com/gpu.product`` ("NVIDIA-H200"), ``nvidia.com/gpu.memory`` (MiB per GPU).

Nodes without any of these (control plane, CPU nodes) are not GPU nodes and are left out.
Labels carry no GPU UUIDs, so a node is the same node as another source's view only by its
name: ``metadata.name`` or its ``kubernetes.io/hostname`` label (:mod:`.identity`). A malformed value raises :class:`~.factsfile.FactsFileError` naming the node and label.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from .facts import GpuFacts, NodeFacts
from .factsfile import FactsFileError
from .versions import VersionError, parse_cuda, parse_driver

P = "nvidia.com/"
MIB = 1024 * 1024
HINT = "GPU feature discovery labels as 'kubectl get nodes -o json' prints them"


class KubectlError(FactsFileError):
    """A ``kubectl get nodes -o json`` file with a label that cannot be read."""

    def __init__(self, path: str, field: str, problem: str) -> None:
        super().__init__(path, field, problem, HINT)


def is_kubectl(data: Any) -> bool:
    """True for ``kubectl get nodes -o json`` (a ``List`` of ``Node``) or one ``Node``."""
    if not isinstance(data, Mapping):
        return False
    if data.get("kind") == "Node":
        return True
    items = data.get("items")
    return (data.get("kind") in ("List", "NodeList") and isinstance(items, list)
            and all(isinstance(i, Mapping) and i.get("kind", "Node") == "Node" for i in items))


def _join(labels: Mapping[str, str], *names: str) -> str | None:
    parts = [labels.get(P + n) for n in names]
    if parts[0] is None:
        return None
    return ".".join(str(p) for p in parts if p not in (None, ""))


def _driver(labels: Mapping[str, str]) -> tuple[str | None, str]:
    """(driver version, the label it came from)."""
    full = labels.get(P + "cuda.driver-version.full")
    if full:
        return str(full), P + "cuda.driver-version.full"
    for names in (("cuda.driver-version.major", "cuda.driver-version.minor",
                   "cuda.driver-version.revision"),
                  ("cuda.driver.major", "cuda.driver.minor", "cuda.driver.rev")):
        joined = _join(labels, *names)
        if joined:
            return joined, P + names[0]
    return None, ""


def _cuda(labels: Mapping[str, str]) -> tuple[str | None, str]:
    full = labels.get(P + "cuda.runtime-version.full")
    if full:
        return str(full), P + "cuda.runtime-version.full"
    for names in (("cuda.runtime-version.major", "cuda.runtime-version.minor"),
                  ("cuda.runtime.major", "cuda.runtime.minor")):
        joined = _join(labels, *names)
        if joined:
            return joined, P + names[0]
    return None, ""


def _count(value: Any, where: str, path: str) -> int | None:
    if value is None:
        return None
    try:
        n = int(str(value))
    except ValueError:
        raise KubectlError(path, where, f"expected a whole number, got {value!r}") from None
    if n < 0:
        raise KubectlError(path, where, f"expected a whole number >= 0, got {value!r}")
    return n


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def node_facts(item: Mapping[str, Any], path: str) -> NodeFacts | None:
    """One ``Node`` object -> its facts, or None when it is not a GPU node."""
    meta = _obj(item.get("metadata"))
    name = str(meta.get("name") or "?")
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise KubectlError(path, f"node {name}: metadata.labels", "expected an object")
    capacity = _obj(_obj(item.get("status")).get("capacity"))
    where = f"node {name}: "
    count = _count(labels.get(P + "gpu.count"), where + P + "gpu.count", path)
    if count is None:
        count = _count(capacity.get(P + "gpu"), where + "status.capacity." + P + "gpu", path)
    driver, driver_label = _driver(labels)
    cuda, cuda_label = _cuda(labels)
    if not count and driver is None:
        return None
    try:
        driver = None if driver is None else parse_driver(driver).text
    except VersionError as exc:
        raise KubectlError(path, where + driver_label, str(exc)) from None
    try:
        cuda = None if cuda is None else parse_cuda(cuda).text
    except VersionError as exc:
        raise KubectlError(path, where + cuda_label, str(exc)) from None
    memory = _count(labels.get(P + "gpu.memory"), where + P + "gpu.memory", path)
    product = labels.get(P + "gpu.product")
    gpus = tuple(GpuFacts(index=i, name=None if product is None else str(product),
                          memory_total_bytes=None if memory is None else memory * MIB)
                 for i in range(count or 0))
    hostname = labels.get("kubernetes.io/hostname")
    names = tuple(sorted({name, str(hostname)} if hostname else {name}))
    return NodeFacts(node=name, source=f"kubectl:{path}", gpu_available=bool(gpus),
                     gpu_error=None if gpus else "GPU count not labelled",
                     driver_version=driver, cuda_driver_version=cuda, gpus=gpus,
                     collected_at=time.time(), names=names)


def nodes(data: Mapping[str, Any], path: str) -> list[NodeFacts]:
    """Every GPU node of a ``kubectl get nodes -o json`` document (possibly none)."""
    items = [data] if data.get("kind") == "Node" else list(data.get("items") or [])
    out = [n for n in (node_facts(i, path) for i in items) if n is not None]
    return out
