"""Where the shares of a load run in several processes go: the :class:`Placement` protocol.

A load profile with ``processes = N`` (N > 1) is split by the controller (the process that
called :func:`~pytest_k3accept.observe.load.runner.run_load`) into N :class:`Share` s of one
plan: a closed loop's streams are divided (each share runs the plan units its streams own),
an open loop's one seeded arrival schedule is partitioned (each share sends the units it owns
at their times in the *global* schedule). The controller keeps the ``/metrics`` monitor, the
warm-up and the merge; the workers only send requests. A placement decides where each share's
worker runs: :mod:`.local` (processes on this machine), ``ray`` (Ray actors), one module per
placement, like pytest-xdist's schedulers.

How a placement is called, and what it must return
--------------------------------------------------
The controller calls, from inside its running event loop::

    results = await placement.run(shares, progress=callback_or_None)

``shares`` is a sequence of :class:`Share` (``share.index`` is 0..len-1, in order). The
placement must:

1. start one worker per share, each with **its own event loop**, and in it make everything a
   share needs *before* the start (imports, the HTTP client): the worker calls::

       from pytest_k3accept.observe.load.shares import run_share
       result = await run_share(share, start_at)        # -> ShareResult

   (or ``run_share_sync(share, start_at)``, which runs ``asyncio.run`` around it);
   ``run_share`` waits until the wall-clock instant ``start_at`` (``time.time()`` units)
   itself, so the placement only has to hand every worker the **same** ``start_at``;
2. agree that instant once every worker is ready (a worker reports ready when it is about to
   call ``run_share``; ``start_at`` = the time the last one was ready + a small margin, e.g.
   0.2 s; never a fixed guess made before the workers started);
3. return ``list[ShareResult]``, exactly one per share, **in share order**, with
   ``result.index == share.index``;
4. bring the records back **while the share runs**: the worker passes ``deliver=`` to
   ``run_share``, which calls it every :data:`DELIVER_EVERY` s (and once at the end) with a
   :class:`Batch` of the requests that ended since the last one; the placement carries each
   batch to the controller (a pipe, a Ray actor method the controller polls) and adds it to
   the share's :class:`Delivery`, whose :meth:`Delivery.complete` / :meth:`Delivery.lost`
   make the share's :class:`ShareResult`. So a worker lost mid-run loses only what was in
   flight, what ended after its last delivery and what it had not sent;
5. never raise because a worker died, hung or could not start: its entry is
   :meth:`Delivery.lost` with a message saying what happened (which worker, its pid or
   actor/node, exit code or exception, after how long) and the records it delivered; the
   controller keeps them and the other shares' results and marks the run partial (what was
   kept and what was lost, per worker: :meth:`~..split.Merged.annotate`). A worker still
   running ``share.max_seconds + GRACE_S`` after ``start_at`` is lost (stop it). Raise
   :class:`PlacementError` only when the placement cannot run at all (e.g. Ray not
   installed, no cluster), with a message saying what to do;
6. optionally call ``progress(index, done, errors, in_flight)`` (plain ints, from the
   controller's event loop thread) as a worker's counts change, at most a few times a
   second (a batch's counts); a placement that cannot may ignore it.

``Share`` and ``ShareResult`` are plain picklable dataclasses (pickle protocol 5; the records
are :class:`~pytest_k3accept.observe.load.result.RunRecord`, whose ITL is a packed
``array('d')``); a share's ``endpoint`` carries the API key, so it must travel only to
workers the caller trusts. ``capacity()`` says how many workers a placement can run side by
side (cores here, CPUs of a cluster): ``processes = "auto"`` and the note on more processes
than that read it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from ..store import RecordStore

if TYPE_CHECKING:  # pragma: no cover
    from ...endpoint.discover import Endpoint
    from ..profile import LoadProfile
    from ..result import RunRecord

#: seconds past a share's ``max_seconds`` (after ``start_at``) before its worker is lost
GRACE_S = 30.0
#: seconds between a running share's deliveries of its ended requests (:class:`Batch`)
DELIVER_EVERY = 0.5

#: ``progress(index, done, errors, in_flight)``
ProgressCallback = Callable[[int, int, int, int], None]


#: placements by name: ``"module:Class"`` (one module per placement, imported when named)
PLACEMENTS: dict[str, str] = {
    "local": "pytest_k3accept.observe.load.placement.local:LocalPlacement",
    "ray": "pytest_k3accept.observe.load.placement.ray:RayPlacement",
}


def named(name: str, **options: Any) -> "Placement":
    """A new placement of kind ``name`` (:data:`PLACEMENTS`), made with ``options``. Imported
    by name, so the runner, which makes the default one, never imports a placement module
    (and a placement's worker, which imports the runner, makes no import cycle)."""
    import importlib

    if name not in PLACEMENTS:
        raise PlacementError(f"placement {name!r}: unknown; known: {', '.join(PLACEMENTS)}")
    module, _, cls = PLACEMENTS[name].partition(":")
    made: Placement = getattr(importlib.import_module(module), cls)(**options)
    return made


class PlacementError(RuntimeError):
    """A placement could not run the shares at all; the message says what to do."""


@dataclass(frozen=True)
class Share:
    """One worker's part of a split run (plain data; picklable).

    The plan is the controller's: ``bodies`` (the request bodies), ``units`` (lists of body
    indices: a request, or a conversation's turns), the plan's first unit ``start`` and its
    request count ``requests`` (as :class:`~pytest_k3accept.observe.load.runner._Plan`).
    The share owns plan unit ``k`` when ``lo <= k % period < hi``; ``streams`` is its closed
    loop's streams, or its part of an open loop's in-flight cap (None: no cap). ``profile``
    is the run's profile (its ``rate`` and ``seed`` are the *global* schedule's).
    """

    index: int
    count: int
    endpoint: "Endpoint"
    profile: "LoadProfile"
    bodies: list[dict[str, Any]]
    units: list[list[int]]
    start: int
    requests: int
    period: int
    lo: int
    hi: int
    streams: int | None

    @property
    def max_seconds(self) -> float:
        """The share's time bound (the run's)."""
        return float(self.profile.max_seconds)


@dataclass
class ShareResult:
    """What one worker sends back: its records and the figures the merge needs.

    ``spans`` are (start, end) of each record's request, in seconds since the share's start
    (the agreed ``start_at``; comparable across workers and machines). ``elapsed`` is from
    that start to the share's last request's end (or its time bound); ``cpu_seconds`` the
    worker process's CPU time over its run (``time.process_time``). ``lag`` / ``span``: an
    open loop's schedule lag and span (see :mod:`..saturation`), None in a closed loop.
    ``error`` is None for a share that ran to its end; else why it is lost (``partial``).
    ``achieved`` is the share's own achieved concurrency (``{"mean", "max"}`` over its
    ``elapsed``) for a worker that keeps no spans (the runner measures it as it goes); the
    merge uses ``spans`` when every share sent them, else these figures. ``loop_lag``: the
    worker's event-loop probe (:meth:`..looplag.LoopLag.figures`; None: not measured).
    """

    index: int
    records: Sequence["RunRecord"] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)
    elapsed: float = 0.0
    cpu_seconds: float | None = None
    stopped_by: str = "count"
    not_sent: int = 0
    lag: float | None = None
    span: float | None = None
    started_at: float = 0.0
    #: what ran it: ``"pid 1234"``, ``"actor ... on node ..."``
    worker: str = ""
    error: str | None = None
    achieved: dict[str, float] | None = None
    #: the counts of the last :class:`Batch` the worker delivered (its ``ended`` emptied);
    #: None when none came (what a lost share's message says was kept and lost)
    last_delivery: "Batch | None" = None
    loop_lag: dict[str, Any] | None = None

    @property
    def partial(self) -> bool:
        """True when the share did not run to its end (its worker was lost)."""
        return self.error is not None

    @classmethod
    def lost(cls, index: int, error: str, *, worker: str = "", elapsed: float = 0.0,
             records: Sequence["RunRecord"] = (),
             spans: Sequence[tuple[float, float]] = (),
             last_delivery: "Batch | None" = None) -> "ShareResult":
        """A share whose worker died or hung: ``error`` says what happened; ``records``
        (and their ``spans``) are what it delivered before."""
        return cls(index, records=records, spans=list(spans), elapsed=elapsed,
                   cpu_seconds=None, stopped_by="lost", worker=worker, error=error,
                   last_delivery=last_delivery)


#: one ended request of a batch: (local slot, start, end, record), the times in seconds
#: since the share's start
Ended = tuple[int, float, float, "RunRecord"]


@dataclass
class Batch:
    """What a running share delivers every :data:`DELIVER_EVERY` s: the requests that ended
    since its last batch and its counts at that instant (``at``: seconds since the share's
    start). The counts and ``ended`` are read in one step of the worker's event loop, so
    every request ended by then is in this batch or an earlier one: ``done`` is the number
    delivered so far, ``started - done`` was in flight, ``final`` marks the share's last
    batch (its requests cut at the time bound among them)."""

    index: int
    at: float
    started: int
    done: int
    errors: int
    in_flight: int
    ended: list[Ended] = field(default_factory=list)
    final: bool = False


class Delivery:
    """A share's records as its batches arrive (the controller's side; any batch order):
    kept in slot order in a :class:`~..store.RecordStore` (spilled past a few thousand),
    those that ended behind a request still in flight held until it comes. What a
    worker's own ``_Run`` keeps, rebuilt from its batches: the same records in the same
    order once every batch is in."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.records = RecordStore()
        self.spans: list[tuple[float, float]] = []
        self.last: Batch | None = None
        self._waiting: dict[int, "RunRecord"] = {}
        self._next = 0

    def add(self, batch: Batch) -> None:
        """Take one batch in (its records, spans and counts)."""
        waiting = self._waiting
        for slot, start, end, record in batch.ended:
            waiting[slot] = record
            self.spans.append((start, end))
        while self._next in waiting:
            self.records.append(waiting.pop(self._next))
            self._next += 1
        if self.last is None or batch.at >= self.last.at:
            self.last = dataclasses.replace(batch, ended=[])

    @property
    def delivered(self) -> int:
        """Records delivered so far."""
        return len(self.records) + len(self._waiting)

    def _flush(self) -> RecordStore:
        """Every record delivered, in slot order (slots never sent are skipped)."""
        for slot in sorted(self._waiting):
            self.records.append(self._waiting.pop(slot))
        self._next = 0
        return self.records

    def complete(self, result: ShareResult) -> ShareResult:
        """``result`` (a finished share's figures) with the delivered records and spans."""
        result.records, result.spans = self._flush(), self.spans
        result.last_delivery = self.last
        return result

    def take(self, batch: Batch, progress: ProgressCallback | None) -> None:
        """:meth:`add` ``batch`` and pass its counts to ``progress`` (a broken printer
        must not end the run)."""
        self.add(batch)
        if progress is not None:
            try:
                progress(self.index, batch.done, batch.errors, batch.in_flight)
            except Exception:  # noqa: BLE001 - a broken printer must not end the run
                pass

    def lost(self, error: str, *, worker: str = "", elapsed: float = 0.0) -> ShareResult:
        """The share lost with what it delivered (see :meth:`ShareResult.lost`)."""
        return ShareResult.lost(self.index, error, worker=worker, elapsed=elapsed,
                                records=self._flush(), spans=self.spans,
                                last_delivery=self.last)


class Placement(Protocol):
    """Runs the shares of one split run somewhere (see the module docstring for the rules)."""

    #: short name for messages and the record: ``"local"``, ``"ray"``
    name: str

    def capacity(self) -> int:
        """How many workers can run side by side (one core each)."""

    async def run(self, shares: Sequence[Share], *,
                  progress: ProgressCallback | None = None) -> list[ShareResult]:
        """Run every share (one worker each, one agreed start), one result per share."""
