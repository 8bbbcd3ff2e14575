"""The acceptance checklist C1-C12 and the place that decides each item.

Each test contributes to checklist items through its markers: ``k3_check("C6")`` names items
explicitly, and the plugin's other markers imply theirs (``k3_driver`` -> C4, ...; see
:data:`MARKER_ITEMS`). After the session, an item is ``pass`` when every test that decided it
passed, ``fail`` when any of them failed, ``skip`` when any was skipped and none failed (one
pass beside one skip is not a pass), and ``not-checked`` when no test touched it. No pytest import: the collector is fed plain outcomes.

**Never a pass without its evidence.** An item in :data:`ITEM_EVIDENCE` passes only when the
session also holds evidence that decides it (a headroom judgement for C9, an environment
check of C4 whose facts were known for C4, ...): a test that passes for C9 without any load
measured leaves C9 ``not-checked``, with the reason. C6, C11, C12 and a team's own items are
decided by their tests alone (their evidence is the test's own assertion).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

#: id -> (slug, what the item asks)
ITEMS: dict[str, tuple[str, str]] = {
    "C1": ("oom-phase", "each OOM is classified: during weight loading, during KV-cache sizing, "
           "or after the first request"),
    "C2": ("init-vs-first-response", "model init completion and first response are recorded "
           "as two separate events"),
    "C3": ("cuda13-image", "the image and its CUDA 13 runtime path are confirmed"),
    "C4": ("driver-r580", "host driver is R580 or newer"),
    "C5": ("topology", "hardware matches the official parallel topology (GPU count, TP/EP/DP, "
           "NVLink vs RDMA all-to-all path)"),
    "C6": ("request-set", "the real agent request set (system prompt, tool definitions, "
           "representative inputs) is fixed"),
    "C7": ("one-variable", "context length and concurrency were changed one at a time"),
    "C8": ("prefix-cache-ab", "prefix caching on vs off compared on the same request set"),
    "C9": ("metrics-saved", "peak memory, cache-hit state, latency and error rate are saved"),
    "C10": ("failover-headroom", "headroom for failure recovery at the target load is checked "
            "separately"),
    "C11": ("load-vs-capacity", "a loading failure and a capacity shortage are recorded as "
            "different verdicts"),
    "C12": ("layers", "which layers can be changed here (host driver, container, network) is "
            "recorded"),
}

#: markers that imply checklist items (extended by later features; teams use ``k3_check``)
MARKER_ITEMS: dict[str, tuple[str, ...]] = {
    "k3_driver": ("C4",),
    "k3_cuda": ("C3",),
    "k3_topology": ("C5",),
    "k3_startup": ("C1", "C2"),
    "k3_headroom": ("C9",),
}

#: marker keyword arguments that imply further items (``k3_headroom(failover=True)`` -> C10)
MARKER_KWARG_ITEMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("k3_headroom", "failover"): ("C10",),
}

PASS, FAIL, SKIP, NOT_CHECKED = "pass", "fail", "skip", "not-checked"

#: item -> (evidence tags any one of which can decide it, what is missing in words); a tag is
#: an evidence kind, ``environment:<item>`` (an environment check of that item whose facts
#: were known) or ``failover`` (a failover load or judgement)
ITEM_EVIDENCE: dict[str, tuple[tuple[str, ...], str]] = {
    "C1": (("classification", "failure-split"), "no classification of the server's life"),
    "C2": (("timeline",), "no startup timeline"),
    "C3": (("environment:C3",), "no CUDA / image facts were known"),
    "C4": (("environment:C4",), "no host driver facts were known"),
    "C5": (("environment:C5", "all2all"), "no topology facts were known"),
    "C7": (("procedure", "remeasure"), "no re-measurement procedure ran"),
    "C8": (("prefix-cache-ab",), "no prefix-cache A/B ran"),
    "C9": (("load", "headroom"), "no load was measured"),
    "C10": (("failover",), "no failover load was measured"),
}


def evidence_tags(evidence: Iterable[Any]) -> set[str]:
    """The tags of :data:`ITEM_EVIDENCE` that a session's evidence carries (duck-typed on
    ``kind``, ``data`` and ``typed``: this module does not import the evidence package)."""
    tags: set[str] = set()
    for ev in evidence:
        kind, data = ev.kind, ev.data if isinstance(ev.data, Mapping) else {}
        if kind == "environment":
            if data.get("ok") is not None:
                tags.add(f"environment:{data.get('item', '')}")
            continue
        tags.add(kind)
        if kind in ("load", "headroom") and (data.get("failover") is True
                                            or (data.get("load_factor") or 1.0) > 1.0):
            tags.add("failover")
    return tags


def normalize(item: str, custom: Mapping[str, tuple[str, str]] | None = None) -> str:
    """Accept ``"C4"``, ``"c4"`` or a slug (``"driver-r580"``, or a ``custom`` item's);
    return the id or raise ValueError listing the known items."""
    known_items = all_items(custom)
    key = item.strip().upper()
    if key in known_items:
        return key
    for cid, (slug, _) in known_items.items():
        if slug == item.strip().lower():
            return cid
    known = ", ".join(f"{k} ({v[0]})" for k, v in known_items.items())
    raise ValueError(f"unknown checklist item {item!r}; known items: {known}")


def all_items(custom: Mapping[str, tuple[str, str]] | None = None,
              ) -> dict[str, tuple[str, str]]:
    """Built-in items followed by a session's custom ones."""
    return {**ITEMS, **(custom or {})}


@dataclass
class ItemResult:
    """The decided state of one checklist item with the tests that decided it."""

    id: str
    slug: str
    text: str
    status: str = NOT_CHECKED
    tests: list[dict[str, str]] = field(default_factory=list)
    #: why a status is not what the tests alone say (a pass without its evidence)
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id, "slug": self.slug, "text": self.text,
                                  "status": self.status, "tests": list(self.tests)}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Checklist:
    """Collects per-test outcomes for checklist items and decides each item."""

    outcomes: list[tuple[str, str, str, str]] = field(default_factory=list)
    #: a team's own items (id -> slug, text), registered for this session only
    custom: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: the session's evidence (set by the session's RunState): an item of
    #: :data:`ITEM_EVIDENCE` passes only with evidence that decides it
    evidence_of: Callable[[], Iterable[Any]] | None = field(default=None, repr=False,
                                                            compare=False)

    def register(self, cid: str, slug: str, text: str) -> None:
        """Add a team's own checklist item (shown in the report's table after C1-C12)."""
        cid = cid.strip().upper()
        if cid in ITEMS:
            raise ValueError(f"{cid} is a built-in checklist item")
        self.custom[cid] = (slug, text)

    def items(self) -> dict[str, tuple[str, str]]:
        """Built-in items followed by this session's custom ones."""
        return all_items(self.custom)

    def normalize(self, item: str) -> str:
        """:func:`normalize` with this session's custom items."""
        return normalize(item, self.custom)

    def add(self, items: Iterable[str], nodeid: str, outcome: str, message: str = "") -> None:
        """Record that test ``nodeid`` ended with ``outcome`` (pass/fail/skip) for items."""
        for item in items:
            self.outcomes.append((self.normalize(item), nodeid, outcome, message))

    def results(self) -> dict[str, ItemResult]:
        """Decide every item: ``fail`` when any deciding test failed, ``pass`` only when every
        deciding test passed, ``skip`` when some (or all) were skipped and none failed, and
        ``not-checked`` when no test touched it."""
        table = {cid: ItemResult(cid, slug, text) for cid, (slug, text) in self.items().items()}
        seen: dict[str, set[str]] = {}
        for cid, nodeid, outcome, message in self.outcomes:
            if cid not in table:  # an id no one registered here (a merged worker's)
                table[cid] = ItemResult(cid, "", "")
            table[cid].tests.append({"nodeid": nodeid, "outcome": outcome, "message": message})
            seen.setdefault(cid, set()).add(outcome)
        for cid, outcomes in seen.items():
            table[cid].status = (FAIL if FAIL in outcomes else SKIP if SKIP in outcomes
                                 else PASS if PASS in outcomes else NOT_CHECKED)
        if self.evidence_of is not None:
            tags = evidence_tags(self.evidence_of())
            for cid, (needs, missing) in ITEM_EVIDENCE.items():
                r = table.get(cid)
                if r is not None and r.status == PASS and not tags.intersection(needs):
                    r.status = NOT_CHECKED
                    r.note = (f"its tests passed, but {missing} in this session: an item is "
                              "never a pass without the evidence that decides it")
        return table

    def statuses(self) -> Mapping[str, str]:
        """id -> status, for the verdict."""
        return {cid: r.status for cid, r in self.results().items()}
