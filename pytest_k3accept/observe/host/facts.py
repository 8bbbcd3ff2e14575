"""The host facts model: plain, typed, JSON-serializable.

:class:`NodeFacts` is what one source knows about one node (NVML on this machine, a facts
file from ``k3accept collect``, dcgm-exporter or Prometheus series of one ``Hostname``).
:class:`HostFacts` is the merged view over every node the session knows, with the questions
the markers ask: driver per node, GPU count, node count, CUDA runtime of the image,
interconnect. ``None`` always means "unknown", never "no".
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Iterable

FORMAT = 1  #: version of the facts-file format written by ``k3accept collect``


@dataclass(frozen=True)
class GpuFacts:
    """One GPU. ``nvlink_active`` counts active NVLink links (0: none or not supported)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    nvlink_active: int | None = None


@dataclass(frozen=True)
class NodeFacts:
    """What one source knows about one node; serialized as a facts file."""

    node: str | None = None
    source: str = "unknown"
    gpu_available: bool = False
    gpu_error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: tuple[GpuFacts, ...] = ()
    image: str | None = None
    cuda_runtime: str | None = None
    cuda_runtime_source: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None
    rdma_devices: tuple[str, ...] | None = None
    topology: str | None = None
    collected_at: float | None = None

    @property
    def gpu_count(self) -> int:
        """GPUs seen on this node."""
        return len(self.gpus)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the facts-file layout, with ``k3accept_facts`` format marker)."""
        data = asdict(self)
        data["gpus"] = [asdict(g) for g in self.gpus]
        data["rdma_devices"] = None if self.rdma_devices is None else list(self.rdma_devices)
        return {"k3accept_facts": FORMAT, **data}


def merge_gpus(a: tuple[GpuFacts, ...], b: tuple[GpuFacts, ...]) -> tuple[GpuFacts, ...]:
    """Merge two GPU lists by index; known fields of ``a`` win."""
    by_index = {g.index: g for g in a}
    for g in b:
        have = by_index.get(g.index)
        if have is None:
            by_index[g.index] = g
            continue
        by_index[g.index] = replace(have, **{
            f.name: getattr(g, f.name) for f in fields(GpuFacts)
            if getattr(have, f.name) is None and getattr(g, f.name) is not None})
    return tuple(by_index[i] for i in sorted(by_index))


def merge_nodes(a: NodeFacts, b: NodeFacts) -> NodeFacts:
    """Merge two views of the same node; known fields of ``a`` win, GPUs merge by index."""
    updates: dict[str, Any] = {}
    for f in fields(NodeFacts):
        if f.name in ("gpus", "source", "gpu_available", "gpu_error"):
            continue
        if getattr(a, f.name) is None and getattr(b, f.name) is not None:
            updates[f.name] = getattr(b, f.name)
    gpus = merge_gpus(a.gpus, b.gpus)
    available = a.gpu_available or b.gpu_available
    return replace(a, **updates, gpus=gpus, gpu_available=available,
                   gpu_error=None if available else (a.gpu_error or b.gpu_error),
                   source=f"{a.source}+{b.source}")


_NV_CELL = re.compile(r"^NV\d+$")


def nvlink_from_topology(text: str | None) -> bool | None:
    """From ``nvidia-smi topo -m``: True when every GPU pair is ``NV#``, False when some pair
    is not, None when the matrix has fewer than two GPUs or cannot be read."""
    if not text:
        return None
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    header = next((ln for ln in lines if ln and ln[0].startswith("GPU")), None)
    if header is None:
        return None
    gpu_cols = [i for i, h in enumerate(header) if re.fullmatch(r"GPU\d+", h)]
    rows = [ln for ln in lines if ln is not header and re.fullmatch(r"GPU\d+", ln[0])]
    if len(gpu_cols) < 2 or not rows:
        return None
    for row in rows:
        cells = row[1:]
        for col in gpu_cols:
            if col >= len(cells) or cells[col] == "X":
                continue
            if not _NV_CELL.match(cells[col]):
                return False
    return True


@dataclass(frozen=True)
class HostFacts:
    """Every node the session knows, merged by node name, plus what could not be read."""

    nodes: tuple[NodeFacts, ...] = ()
    image: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def merge(cls, views: Iterable[NodeFacts], image: str | None = None,
              notes: Iterable[str] = ()) -> "HostFacts":
        """Merge node views in order (earlier sources win for each known field).

        Views are the same node when they have the same name or share a GPU UUID (a facts
        file's hostname and a dcgm-exporter pod's name for one machine): such a node counts
        once, under its first name, and a note says so."""
        merged: dict[str, NodeFacts] = {}
        order: list[str] = []
        by_uuid: dict[str, str] = {}
        said = list(notes)
        for view in views:
            key = view.node or f"<unnamed {len(order)}>"
            same = next((by_uuid[g.uuid] for g in view.gpus if g.uuid in by_uuid), key)
            if same != key:
                said.append(f"node {key!r} ({view.source}) has the GPU UUIDs of {same!r}: "
                            "the same node, counted once")
                key = same
            if key in merged:
                merged[key] = merge_nodes(merged[key], view)
            else:
                merged[key] = view
                order.append(key)
            by_uuid.update({g.uuid: key for g in merged[key].gpus if g.uuid})
        return cls(tuple(merged[k] for k in order), image, tuple(said))

    @property
    def gpu_nodes(self) -> tuple[NodeFacts, ...]:
        """Nodes with GPU facts."""
        return tuple(n for n in self.nodes if n.gpu_available)

    @property
    def node_count(self) -> int:
        """Nodes with GPU facts."""
        return len(self.gpu_nodes)

    @property
    def gpu_count(self) -> int | None:
        """GPUs over all nodes, or None when no node has GPU facts."""
        nodes = self.gpu_nodes
        return sum(n.gpu_count for n in nodes) if nodes else None

    def drivers(self) -> dict[str, str | None]:
        """Node name -> driver version (None when that node's driver is unknown)."""
        return {n.node or "?": n.driver_version for n in self.gpu_nodes}

    @property
    def image_ref(self) -> str | None:
        """The image reference: ``--k3-image``, else the first node that recorded one."""
        return self.image or next((n.image for n in self.nodes if n.image), None)

    def cuda_runtimes(self) -> dict[str, tuple[str, str | None]]:
        """Node -> (CUDA runtime of its container, where it was read) for nodes that know it."""
        return {n.node or "?": (n.cuda_runtime, n.cuda_runtime_source)
                for n in self.nodes if n.cuda_runtime}

    def interconnects(self) -> dict[str, dict[str, bool | None]]:
        """Node -> {"nvlink": all its GPUs have active NVLink, "rdma": has RDMA devices}."""
        out: dict[str, dict[str, bool | None]] = {}
        for n in self.gpu_nodes:
            links = [g.nvlink_active for g in n.gpus]
            if links and all(v is not None for v in links):
                nvlink: bool | None = all((v or 0) > 0 for v in links)
            else:
                nvlink = nvlink_from_topology(n.topology)
            rdma = None if n.rdma_devices is None else bool(n.rdma_devices)
            out[n.node or "?"] = {"nvlink": nvlink, "rdma": rdma}
        return out

    def summary(self) -> str:
        """One human line."""
        if not self.gpu_nodes:
            why = "; ".join(self.notes) or "no source gave GPU facts"
            return f"no GPU facts ({why})"
        drivers = sorted({d for d in self.drivers().values() if d})
        runtimes = sorted({r for r, _ in self.cuda_runtimes().values()})
        return (f"{self.node_count} node(s), {self.gpu_count} GPU(s), driver "
                f"{', '.join(drivers) or 'unknown'}, image {self.image_ref or 'unknown'}, "
                f"CUDA runtime {', '.join(runtimes) or 'unknown'}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (evidence, record)."""
        return {"nodes": [n.to_dict() for n in self.nodes], "image": self.image_ref,
                "node_count": self.node_count, "gpu_count": self.gpu_count,
                "notes": list(self.notes)}
