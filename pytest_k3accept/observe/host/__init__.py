"""Host facts behind one face: facts files (and ``kubectl get nodes -o json``), local NVML,
dcgm-exporter and Prometheus.

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


def on_this_machine(url: str | None) -> bool:
    """True when ``url``'s host is this machine (loopback, or this host's name)."""
    import socket
    from urllib.parse import urlsplit

    from .nvml import node_name

    host = (urlsplit(url).hostname or "").lower() if url else ""
    if not host:
        return False
    if host in ("localhost", "::1", "0.0.0.0") or host.startswith("127."):
        return True
    names = {socket.gethostname().lower(), node_name().lower()}
    return host in names or host.split(".")[0] in {n.split(".")[0] for n in names}


def local_wanted(asked: bool, endpoints: Iterable[str] = (), remote: bool = False,
                 launched: bool = False) -> tuple[bool, str]:
    """Whether this machine's GPUs (local NVML) belong to the deployment's facts, and the
    note that says why not: only when asked (``--k3-local-gpu``), when the endpoint is on
    this machine (a server the plugin launches without an endpoint is), or when there is
    neither an endpoint nor any other facts source. Never merged silently into remote
    facts."""
    from .remote import shown

    urls = list(endpoints)
    if asked or (launched and not urls):
        return True, ""
    if urls and on_this_machine(urls[0]):
        return True, ""
    if not urls and not remote:
        return True, ""
    where = (f"the endpoint {shown(urls[0])} is not on this machine" if urls else
             "no endpoint, and other facts sources were given")
    return False, (f"local NVML not read: {where} (--k3-local-gpu adds this machine's GPUs)")


def _file_views(path: str | Path, notes: list[str]) -> list[NodeFacts]:
    """A ``k3accept collect`` facts file (one node) or ``kubectl get nodes -o json`` (its
    GPU nodes, by their GPU feature discovery labels)."""
    from . import factsfile, kubectl

    data = factsfile.read_json(path)
    if kubectl.is_kubectl(data):
        found = kubectl.nodes(data, str(path))
        if not found:
            notes.append(f"kubectl nodes {path}: no node has GPU feature discovery labels "
                         "(nvidia.com/gpu.count, nvidia.com/cuda.driver-version.full)")
        return found
    return [factsfile.from_dict(data, str(path))]


def gather(files: Iterable[str | Path] = (), dcgm_url: str | None = None,
           prometheus_url: str | None = None, image: str | None = None, local: bool = True,
           nvml_module: Any = None, timeout: float = 10.0,
           prometheus_selector: str | None = None, local_note: str = "") -> HostFacts:
    """Facts from every given source, merged by node name or shared GPU UUIDs (earlier
    sources win per field).

    Order: facts files (``k3accept collect`` files and ``kubectl get nodes -o json``), local
    NVML (only when ``local``, only nodes that have GPUs; ``local_note`` says why it was
    not read), dcgm-exporter, Prometheus (both scoped by ``prometheus_selector``, the GPU
    selector, which the notes name).
    """
    from . import nvml
    from .remote import Dcgm, Prometheus, RemoteError, selector_matchers

    views: list[NodeFacts] = []
    notes: list[str] = []
    for path in files:
        views.extend(_file_views(path, notes))
    if local:
        mine = nvml.read_local(nvml_module)
        if mine.gpu_available:
            views.append(mine)
        else:
            notes.append(f"local NVML: {mine.gpu_error}")
    elif local_note:
        notes.append(local_note)
    if (dcgm_url or prometheus_url) and selector_matchers(prometheus_selector):
        notes.append(f"GPU queries scoped by selector {{{selector_matchers(prometheus_selector)}}}")
    if dcgm_url:
        try:
            views.extend(Dcgm(dcgm_url, timeout=timeout, selector=prometheus_selector).facts())
        except RemoteError as exc:
            notes.append(f"{Dcgm.label}: {exc}")
    if prometheus_url:
        prom = Prometheus(prometheus_url, timeout=timeout, selector=prometheus_selector)
        try:
            views.extend(prom.facts())
        except RemoteError as exc:
            notes.append(f"{Prometheus.label}: {exc}")
    return HostFacts.merge(views, image=image, notes=notes)
