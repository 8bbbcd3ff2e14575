"""Which views of nodes describe the same machine, and merging them (see ``docs/host.md``).

Sources name a node differently: a facts file by the host name ``k3accept collect`` ran on,
``kubectl get nodes -o json`` by ``metadata.name`` (and its ``kubernetes.io/hostname``
label), dcgm-exporter by its ``Hostname`` label (the node's name when the exporter gets
``NODE_NAME``, else the exporter pod's own name, ``nvidia-dcgm-exporter-cwbcm``), Prometheus by
what its relabelling adds (``node``, ``kubernetes_node``). Two views are one machine when:

1. they share a GPU UUID (facts files, NVML and dcgm-exporter carry UUIDs; kubectl labels
   do not), or
2. one of the names that identify a machine (:attr:`NodeFacts.identity`) is the same, or
   the views carry the same ``node`` string.

Views that are not merged count as different machines only when they can be told apart:
both have GPU UUIDs (and share none) or both have identifying names (and share none), or
they come from one source (a source lists each node once). Otherwise (say kubectl's nodes,
which have no UUIDs, and a dcgm-exporter series named only by its pod) nobody can tell
whether they are the same machines: :func:`merge_views` says "could not tell whether N
sources describe the same nodes", and the GPU count is unknown, never a sum that may count
a machine twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from .facts import GpuFacts, NodeFacts

#: a dcgm-exporter pod's own name (a DaemonSet pod: ``<name>-<5 characters>``), as its
#: ``Hostname`` label reads without ``NODE_NAME``: ``nvidia-dcgm-exporter-cwbcm`` (GPU
#: operator), ``dcgm-exporter-1691999-x7k2p`` (Helm chart): not a node name
EXPORTER_POD = re.compile(r"dcgm-exporter(?:-[a-z0-9]+)*-[a-z0-9]{5}$")


def merge_gpus(a: tuple[GpuFacts, ...], b: tuple[GpuFacts, ...]) -> tuple[GpuFacts, ...]:
    """Merge two GPU lists by index; known fields of ``a`` win."""
    by_index = {g.index: g for g in a}
    for g in b:
        have = by_index.get(g.index)
        if have is None:
            by_index[g.index] = g
            continue
        by_index[g.index] = replace(have, **{
            f.name: getattr(g, f.name) for f in fields(g)
            if getattr(have, f.name) is None and getattr(g, f.name) is not None})
    return tuple(by_index[i] for i in sorted(by_index))


def merge_nodes(a: NodeFacts, b: NodeFacts) -> NodeFacts:
    """Merge two views of the same node; known fields of ``a`` win, GPUs merge by index,
    the identifying names of both are kept."""
    updates: dict[str, Any] = {}
    for f in fields(a):
        if f.name in ("gpus", "source", "gpu_available", "gpu_error", "names"):
            continue
        if getattr(a, f.name) is None and getattr(b, f.name) is not None:
            updates[f.name] = getattr(b, f.name)
    gpus = merge_gpus(a.gpus, b.gpus)
    available = a.gpu_available or b.gpu_available
    return replace(a, **updates, gpus=gpus, gpu_available=available,
                   gpu_error=None if available else (a.gpu_error or b.gpu_error),
                   names=tuple(sorted(a.identity | b.identity)),
                   source=f"{a.source}+{b.source}")


@dataclass
class _Group:
    """One machine as far as the views tell: its merged view and what identifies it."""

    view: NodeFacts
    sources: set[str] = field(default_factory=set)
    uuids: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    strings: set[str] = field(default_factory=set)

    def add(self, view: NodeFacts) -> None:
        self.sources.add(view.source)
        self.uuids |= uuids_of(view)
        self.names |= view.identity
        self.strings |= {view.node} if view.node else set()

    def matches(self, view: NodeFacts) -> set[str]:
        """What ``view`` shares with this machine (UUIDs, names), empty when nothing."""
        shared = (self.uuids & uuids_of(view)) | (self.names & view.identity)
        return shared | (self.strings & ({view.node} if view.node else set()))

    def apart(self, other: "_Group") -> bool:
        """True when the two are known to be different machines."""
        return (bool(self.sources & other.sources) or (bool(self.uuids) and bool(other.uuids))
                or (bool(self.names) and bool(other.names)))


def uuids_of(view: NodeFacts) -> set[str]:
    """The GPU UUIDs a view carries."""
    return {g.uuid for g in view.gpus if g.uuid}


@dataclass(frozen=True)
class Merged:
    """The machines the views describe, the notes on how they were matched, and why the
    GPU count is unknown (``""`` when it is known)."""

    nodes: tuple[NodeFacts, ...]
    notes: tuple[str, ...]
    count_unknown: str = ""


def merge_views(views: Iterable[NodeFacts]) -> Merged:
    """Merge node views in order (earlier sources win for each known field) into machines
    (see the module docstring)."""
    groups: list[_Group] = []
    notes: list[str] = []
    for view in views:
        group = next((g for g in groups if g.matches(view)), None)
        if group is None:
            groups.append(_Group(view))
            groups[-1].add(view)
            continue
        shared = group.matches(view)
        if view.node not in group.strings:
            how = ("has the GPU UUIDs of" if shared & uuids_of(view) else
                   f"is, by the node name {sorted(shared)[0]!r},")
            notes.append(f"node {view.node!r} ({view.source}) {how} {group.view.node!r}: "
                         "the same node, counted once")
        group.view = merge_nodes(group.view, view)
        group.add(view)
    return Merged(tuple(g.view for g in groups), tuple(notes), _undecided(groups))


def _undecided(groups: list[_Group]) -> str:
    """The sentence for machines that may be the same, ``""`` when every pair is told
    apart (GPU nodes only: a view without GPUs counts no GPU)."""
    gpu = [g for g in groups if g.view.gpu_available]
    pairs = [(a, b) for i, a in enumerate(gpu) for b in gpu[i + 1:] if not a.apart(b)]
    if not pairs:
        return ""
    involved = {id(g): g for pair in pairs for g in pair}.values()
    sources = sorted({s for g in involved for s in g.sources})
    described = "; ".join(_described(g) for g in involved)
    total = sum(g.view.gpu_count for g in gpu)
    return (f"could not tell whether {len(sources)} sources describe the same nodes "
            f"({', '.join(sources)}): {described}. No GPU UUID and no node name links them, "
            f"so the GPU count is unknown (counted apart it would be {total}, which may count "
            "a machine twice); give dcgm-exporter NODE_NAME or relabel a 'node' label in "
            "Prometheus, or pass one source per machine")


def _described(group: _Group) -> str:
    view = group.view
    how = (f"node name {', '.join(sorted(group.names))}" if group.names else
           f"only {view.node!r}, not a node name" if view.node else "no name")
    uuids = "GPU UUIDs" if group.uuids else "no GPU UUIDs"
    return f"{view.node or '?'} ({'+'.join(sorted(group.sources))}: {how}, {uuids})"


def identifying(name: str | None) -> bool:
    """False for a name that does not identify a machine: a dcgm-exporter pod's own name
    (:data:`EXPORTER_POD`) or a scrape address (``10.244.1.9:9400``)."""
    return bool(name) and not EXPORTER_POD.search(name or "") and ":" not in (name or "")
