"""The host facts model: plain, typed, JSON-serializable.

:class:`NodeFacts` is what one source knows about one node (NVML on this machine, a facts
file from ``k3accept collect``, dcgm-exporter or Prometheus series of one ``Hostname``).
:class:`HostFacts` is the merged view over every node the session knows, with the questions
the markers ask: driver per node, GPU count, node count, CUDA runtime of the image,
interconnect. ``None`` always means "unknown", never "no".
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
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
    #: the names that identify this machine when the source knows more than ``node`` (a
    #: kubectl node's ``kubernetes.io/hostname``, a dcgm series' ``node`` label); ``()``:
    #: none does (a dcgm-exporter series named only by the exporter's pod); None: ``node``
    names: tuple[str, ...] | None = None

    @property
    def identity(self) -> frozenset[str]:
        """The names that identify this machine (see :mod:`.identity`): ``names``, else
        ``node`` unless that is no machine's name (a dcgm-exporter pod's, an address)."""
        from .identity import identifying

        if self.names is not None:
            return frozenset(n for n in self.names if n)
        return frozenset([self.node]) if self.node and identifying(self.node) else frozenset()

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
    """Every node the session knows, merged per machine, plus what could not be read.

    ``count_unknown`` says why the GPU count is unknown although nodes have GPU facts
    (sources that may describe the same machines, :mod:`.identity`); ``""`` otherwise."""

    nodes: tuple[NodeFacts, ...] = ()
    image: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    count_unknown: str = ""

    @classmethod
    def merge(cls, views: Iterable[NodeFacts], image: str | None = None,
              notes: Iterable[str] = ()) -> "HostFacts":
        """Merge node views in order (earlier sources win for each known field).

        Views are one machine when they share a GPU UUID or a node name (a facts file's
        host name and a dcgm-exporter pod's name for one machine, a kubectl node and the
        dcgm series relabelled with its name): such a node counts once, under its first
        name, and a note says so. Views that cannot be told apart either make the GPU
        count unknown (``count_unknown``, also a note); see :mod:`.identity`."""
        from .identity import merge_views

        merged = merge_views(views)
        said = [*notes, *merged.notes] + ([merged.count_unknown] if merged.count_unknown
                                          else [])
        return cls(merged.nodes, image, tuple(said), merged.count_unknown)

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
        """GPUs over all nodes, or None when no node has GPU facts or when sources may
        describe the same machines (``count_unknown``: a sum could count one twice)."""
        nodes = self.gpu_nodes
        return sum(n.gpu_count for n in nodes) if nodes and not self.count_unknown else None

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
        if self.count_unknown:
            nodes = f"{self.node_count} view(s) of nodes, GPU count unknown ({self.count_unknown})"
        else:
            nodes = f"{self.node_count} node(s), {self.gpu_count} GPU(s)"
        return (f"{nodes}, driver {', '.join(drivers) or 'unknown'}, image "
                f"{self.image_ref or 'unknown'}, CUDA runtime {', '.join(runtimes) or 'unknown'}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (evidence, record)."""
        return {"nodes": [n.to_dict() for n in self.nodes], "image": self.image_ref,
                "node_count": self.node_count, "gpu_count": self.gpu_count,
                "notes": list(self.notes), "count_unknown": self.count_unknown or None}
