"""The environment checks behind the markers ``k3_driver``, ``k3_cuda`` and ``k3_topology``.

Each check is a pure function of :class:`~pytest_k3accept.observe.host.facts.HostFacts` and returns a
:class:`Check`: ``ok`` True (met), False (an *environment* failure: the host or image must
change; lowering context or concurrency cannot fix it) or None (the facts are unknown), with
the expected and actual values in words.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..observe.host.facts import HostFacts
from ..observe.host.versions import (VersionError, driver_at_least, driver_covers_cuda,
                                     full_minimum, parse_cuda, parse_driver)

INTERCONNECTS = (None, "nvlink", "rdma")
HOW_TO_KNOW = ("pass --k3-host-facts FILE (written by 'k3accept collect' on each GPU node or "
               "inside the serving container), or --k3-dcgm-url / --k3-prometheus-url")


@dataclass(frozen=True)
class Check:
    """One environment check's outcome: ``ok`` True / False / None (unknown)."""

    item: str
    marker: str
    ok: bool | None
    expected: str
    actual: str
    detail: str = ""

    def message(self) -> str:
        """The line a test report shows."""
        from .registry import ITEMS

        slug = ITEMS.get(self.item, ("", ""))[0]
        if self.ok is None:
            return (f"{self.marker}: facts unknown ({self.item} {slug}): {self.actual}. "
                    f"Expected {self.expected}. {self.detail}".strip())
        if self.ok:
            return f"{self.marker}: ok ({self.item} {slug}): expected {self.expected}, " \
                   f"actual {self.actual}"
        return (f"ENVIRONMENT FAILURE ({self.item} {slug}) {self.marker}: expected "
                f"{self.expected}, actual {self.actual}. {self.detail} This is an environment "
                "failure (host driver / image / hardware), not a capacity problem: lowering "
                "context length or concurrency will not fix it.").replace("  ", " ")

    def evidence(self) -> dict[str, Any]:
        """Evidence data (kind "environment")."""
        return asdict(self)


def _no_gpu(facts: HostFacts) -> str:
    why = "; ".join(facts.notes)
    return "no GPU facts" + (f" ({why})" if why else "")


def check_driver(facts: HostFacts, minimum: str = "580") -> Check:
    """``k3_driver(min=...)``: every GPU node's driver is at least ``minimum`` (C4)."""
    asked = parse_driver(minimum)
    need = full_minimum(asked)  # "580" -> 580.65.06: CUDA 13.0 needs that release, not R580
    expected = f"host driver >= {need.text}" + (
        f" (R{asked.major} as CUDA {_cuda_of(need)} needs it)" if need is not asked else
        f" (R{need.major} branch or newer)" if len(need.parts) == 1 else "")
    drivers = facts.drivers()
    if not drivers:
        return Check("C4", "k3_driver", None, expected, _no_gpu(facts), HOW_TO_KNOW)
    bad, unknown, shown = [], [], []
    for node, version in drivers.items():
        if version is None:
            unknown.append(node)
            continue
        shown.append(f"{version} on {node}")
        try:
            ok = driver_at_least(parse_driver(version), need)
        except VersionError as exc:
            unknown.append(f"{node} ({exc})")
            continue
        if ok is False:
            bad.append(node)
        elif ok is None:
            unknown.append(f"{node} (only the branch {version} is known: cannot tell whether "
                           f"it is >= {need.text})")
    actual = ", ".join(shown) or "unknown"
    if bad:
        return Check("C4", "k3_driver", False, expected, actual,
                     f"Too old on {', '.join(bad)}: upgrade the host driver.")
    if unknown:
        return Check("C4", "k3_driver", None, expected, f"driver unknown on "
                     f"{', '.join(unknown)}", HOW_TO_KNOW)
    return Check("C4", "k3_driver", True, expected, actual)


def _cuda_of(floor: object) -> str:
    """The CUDA family whose minimum driver is ``floor`` ("13.x")."""
    from ..observe.host.versions import MIN_DRIVER_FOR_CUDA_MAJOR

    found = [m for m, v in MIN_DRIVER_FOR_CUDA_MAJOR.items() if v == str(floor)]
    return f"{found[0]}.x" if found else "?"


def check_cuda(facts: HostFacts, major: int = 13, minor: int | None = None) -> Check:
    """``k3_cuda(major=13)``: the image carries a CUDA ``major`` runtime and every GPU node's
    driver supports that runtime (C3)."""
    want = f"{major}.{minor}" if minor is not None else f"{major}.x"
    expected = (f"image CUDA runtime {want} and a host driver that supports it"
                + (f" (image {facts.image_ref})" if facts.image_ref else ""))
    runtimes = facts.cuda_runtimes()
    if not runtimes:
        return Check("C3", "k3_cuda", None, expected, "the image's CUDA runtime is unknown",
                     "Run 'k3accept collect' inside the serving container and pass its file "
                     "with --k3-host-facts.")
    shown = [f"CUDA {rt} on {node} (from {src or '?'})" for node, (rt, src) in runtimes.items()]
    wrong = [node for node, (rt, _) in runtimes.items()
             if parse_cuda(rt).major != major or (minor is not None
                                                  and parse_cuda(rt).minor != minor)]
    if wrong:
        return Check("C3", "k3_cuda", False, expected, "; ".join(shown),
                     f"The image is not built for CUDA {want}: use the CUDA {want} image.")
    highest = max((rt for rt, _ in runtimes.values()), key=lambda v: parse_cuda(v).padded(3))
    nodes = facts.gpu_nodes
    if not nodes:
        return Check("C3", "k3_cuda", None, expected, "; ".join(shown) + "; host driver "
                     f"unknown ({_no_gpu(facts)})", HOW_TO_KNOW)
    bad, unknown, how = [], [], []
    for n in nodes:
        ok, decided = driver_covers_cuda(n.cuda_driver_version, n.driver_version, highest)
        how.append(f"{n.node}: {decided}")
        if ok is None:
            unknown.append(n.node or "?")
        elif not ok:
            bad.append(n.node or "?")
    actual = "; ".join(shown + how)
    if bad:
        return Check("C3", "k3_cuda", False, expected, actual,
                     f"The host driver on {', '.join(bad)} cannot run CUDA {highest}: upgrade "
                     "the host driver (CUDA 13 needs R580+).")
    if unknown:
        return Check("C3", "k3_cuda", None, expected, actual, HOW_TO_KNOW)
    return Check("C3", "k3_cuda", True, expected, actual)


def check_topology(facts: HostFacts, gpus: int | None = 8, interconnect: str | None = None,
                   nodes: int | None = None) -> Check:
    """``k3_topology(gpus=8, interconnect="nvlink"|"rdma"|None, nodes=None)``: at least
    ``gpus`` GPUs (and ``nodes`` nodes) with the named all-to-all path on every node (C5)."""
    parts = [f">= {gpus} GPUs"] if gpus else []
    parts += [f">= {nodes} nodes"] if nodes else []
    parts += [f"{interconnect} on every node"] if interconnect else []
    expected = ", ".join(parts) or "any topology"
    count = facts.gpu_count
    if count is None and facts.count_unknown:  # sources that may describe one machine twice
        return Check("C5", "k3_topology", None, expected,
                     f"GPU count unknown: {facts.count_unknown}",
                     "Name the nodes alike in every source (or give one source per machine).")
    if count is None:
        return Check("C5", "k3_topology", None, expected, _no_gpu(facts), HOW_TO_KNOW)
    links = facts.interconnects()
    described = []
    for node, path in links.items():
        flags = [f"{k} {'yes' if v else 'no' if v is not None else 'unknown'}"
                 for k, v in path.items()]
        described.append(f"{node}: " + ", ".join(flags))
    actual = (f"{count} GPUs on {facts.node_count} node(s)"
              + (f" ({'; '.join(described)})" if interconnect else ""))
    problems = []
    if gpus and count < gpus:
        problems.append(f"{count} GPUs < {gpus}")
    if nodes and facts.node_count < nodes:
        problems.append(f"{facts.node_count} nodes < {nodes}")
    unknown = []
    if interconnect:
        for node, path in links.items():
            state = path.get(interconnect)
            if state is None:
                unknown.append(node)
            elif not state:
                problems.append(f"no {interconnect} on {node}")
    if problems:
        return Check("C5", "k3_topology", False, expected, actual,
                     "Mismatch: " + "; ".join(problems) + ". Move to hardware that matches "
                     "the official parallel topology before tuning.")
    if unknown:
        return Check("C5", "k3_topology", None, expected, actual,
                     f"The {interconnect} state of {', '.join(unknown)} is unknown: "
                     "'k3accept collect' on that node records it.")
    return Check("C5", "k3_topology", True, expected, actual)
