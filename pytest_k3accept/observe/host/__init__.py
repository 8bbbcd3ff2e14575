"""Host facts behind one face: facts files, local NVML, dcgm-exporter and Prometheus.

:func:`gather` asks every configured source and merges what they know per node
(:class:`~pytest_k3accept.observe.host.facts.HostFacts`); a source that cannot be read becomes a note
that says why, except a malformed facts file, which raises
:class:`~pytest_k3accept.observe.host.factsfile.FactsFileError` (it is the user's input). Nothing is
imported or contacted until :func:`gather` is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from .facts import GpuFacts, HostFacts, NodeFacts
from .factsfile import FactsFileError

__all__ = ["FactsFileError", "GpuFacts", "HostFacts", "NodeFacts", "gather"]


def gather(files: Iterable[str | Path] = (), dcgm_url: str | None = None,
           prometheus_url: str | None = None, image: str | None = None, local: bool = True,
           nvml_module: Any = None, timeout: float = 10.0,
           prometheus_selector: str | None = None) -> HostFacts:
    """Facts from every given source, merged by node name or shared GPU UUIDs (earlier
    sources win per field).

    Order: facts files, local NVML (only nodes that have GPUs), dcgm-exporter, Prometheus
    (its queries scoped by ``prometheus_selector``, then named in the notes).
    """
    from . import factsfile, nvml
    from .remote import Dcgm, Prometheus, RemoteError

    views: list[NodeFacts] = []
    notes: list[str] = []
    for path in files:
        views.append(factsfile.load(path))
    if local:
        mine = nvml.read_local(nvml_module)
        if mine.gpu_available:
            views.append(mine)
        else:
            notes.append(f"local NVML: {mine.gpu_error}")
    if dcgm_url:
        try:
            views.extend(Dcgm(dcgm_url, timeout=timeout).facts())
        except RemoteError as exc:
            notes.append(f"{Dcgm.label}: {exc}")
    if prometheus_url:
        prom = Prometheus(prometheus_url, timeout=timeout, selector=prometheus_selector)
        if prom.matchers:
            notes.append(f"prometheus queries scoped by {prom.scope}")
        try:
            views.extend(prom.facts())
        except RemoteError as exc:
            notes.append(f"{Prometheus.label}: {exc}")
    return HostFacts.merge(views, image=image, notes=notes)
