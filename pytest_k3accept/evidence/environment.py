"""Typed evidence of the environment: one environment check, and the host facts seen.

:class:`EnvironmentCheck` is made by ``fixtures/host.py`` from a
:class:`~pytest_k3accept.checks.environment.Check` (markers ``k3_driver``, ``k3_cuda``,
``k3_topology``): ``ok`` True (met), False (an environment failure) or None (facts unknown).
:class:`HostObservation` is the session's host facts
(:class:`~pytest_k3accept.observe.host.facts.HostFacts`' plain view) as the record keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ._base import Kind, _read


@dataclass(frozen=True)
class EnvironmentCheck(Kind):
    """One environment check: checklist item (C3-C5), marker, outcome, expected vs actual."""

    KIND: ClassVar[str] = "environment"

    item: str
    ok: bool | None
    marker: str = ""
    expected: str = ""
    actual: str = ""
    detail: str = ""

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> "EnvironmentCheck":
        """Read back :meth:`to_data` (``item`` may be missing in a team's evidence: "")."""
        known = _read(cls, data)
        known.setdefault("item", "")
        known.setdefault("ok", None)
        return cls(**known)


@dataclass(frozen=True)
class HostObservation(Kind):
    """The host facts of the session: nodes (each with its GPUs), image, counts, notes.

    Counts are None when unknown (no facts source), never 0.
    """

    KIND: ClassVar[str] = "host"

    nodes: tuple[dict[str, Any], ...] = ()
    image: str | None = None
    node_count: int | None = None
    gpu_count: int | None = None
    notes: tuple[str, ...] = ()

    STRS: ClassVar[tuple[str, ...]] = ("notes",)
    DICTS: ClassVar[tuple[str, ...]] = ("nodes",)
