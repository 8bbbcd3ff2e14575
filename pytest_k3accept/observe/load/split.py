"""A load run split over worker processes: partition, the worker's part, the exact merge.

``processes = N`` in a profile splits one run's plan into N :class:`~.placement.Share` s
(:func:`partition`), runs each in its own worker through a :class:`~.placement.Placement`
(:mod:`.placement.local`: processes here), and merges what they send back (:func:`merge`):

* **closed loop**: the ``concurrency`` streams are divided (N=3 of 8: 3, 3, 2); within each
  period of ``concurrency`` plan units, a share owns as many consecutive units as it has
  streams, so its request count follows its streams and the shares' units together are
  exactly the plan's;
* **open loop**: the one seeded arrival schedule (:func:`schedule`) is dealt out
  unit by unit (unit ``k`` to share ``k % N``); every worker computes the same schedule and
  sends its own units at their global times, from one agreed wall-clock start. An in-flight
  cap is divided like streams;
* **merge**: records concatenated (every percentile is computed over all of them, never
  averaged), request spans concatenated for the achieved concurrency, ``not_sent`` summed,
  ``stopped_by`` "time" when any share hit the time bound, client CPU summed over workers
  with each worker's own saturation judged (:mod:`.saturation`). A worker that died leaves a
  partial run: the records it delivered while it ran (:class:`~.placement.Delivery`) and the
  other shares' are kept, and the summary says ``partial``: per lost worker, what happened,
  how many of its records were kept and how many of its requests were lost (in flight at
  its last delivery, or not sent by then); ``lost_requests`` is exactly the planned requests
  of the lost shares less the records they delivered.

The controller's side: this module and :class:`SplitRun` (what ``run_load`` drives instead
of its single ``_Run``); the worker's side is :mod:`.shares` (``run_share``). Nothing here
imports the runner, so the runner imports it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, cast

from . import saturation, stats
from .placement import Placement, Share, ShareResult, named
from .profile import LoadProfile, ProfileError
from .store import RecordStore

if TYPE_CHECKING:  # pragma: no cover
    from ..endpoint.discover import Endpoint
    from .result import Progress, RunRecord
    from .runner import _Plan

#: ``processes = "auto"`` splits a run whose profile asks for at least this rate (req/s) ...
AUTO_RATE = 1000.0
#: ... or at least this many streams: one process's measured ceiling against the benchmark's
#: stub is ~3,000 req/s at ~330 us CPU a request (docs/benchmarks.md), and a real server's
#: streamed tokens cost the client more per request
AUTO_STREAMS = 256


def resolve(profile: LoadProfile, capacity: int) -> tuple[int, str | None]:
    """(worker processes, a note or None) for ``profile`` on a placement of ``capacity``.

    ``"auto"`` is one per core when the profile's load is one a single process would
    saturate (:data:`AUTO_RATE`, :data:`AUTO_STREAMS`), else 1, never more than the streams
    of a closed loop or an open loop's in-flight cap. More processes than cores run as
    asked, with a note: they share the cores, so each gets less than one and the run may be
    client-limited."""
    streams = None if profile.open_loop else (profile.concurrency or 1)
    cap = streams if streams is not None else profile.concurrency
    if profile.processes == "auto":
        heavy = ((profile.rate or 0.0) >= AUTO_RATE
                 or (profile.concurrency or 0) >= AUTO_STREAMS)
        n = capacity if heavy else 1
        return (min(n, cap) if cap else n), None
    n = int(profile.processes)
    if cap is not None and n > cap:
        what = "streams (concurrency)" if streams is not None else "the in-flight cap"
        raise ProfileError(f"{profile.name}: processes: {n} worker processes for {cap} "
                           f"{what}: each process needs at least one; use processes <= {cap}")
    if n > capacity:
        return n, (f"processes = {n} on {capacity} cores: the workers share the cores, so "
                   "each gets less than one and the run can be client-limited by the machine "
                   "itself (ran as asked, not clamped)")
    return n, None


def schedule(rate: float, seed: int) -> Iterator[float]:
    """Arrival times (s after the first, which is 0.0) of a seeded Poisson process: an open
    loop's schedule (the runner's, and every share's of a split run)."""
    rng = random.Random(seed)
    at = 0.0
    while True:
        yield at
        at += rng.expovariate(rate)


def divide(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` whole numbers differing by at most one (larger first)."""
    base, rest = divmod(total, parts)
    return [base + (1 if i < rest else 0) for i in range(parts)]


def partition(endpoint: "Endpoint", profile: LoadProfile, bodies: list[dict[str, Any]],
              units: list[list[int]], start: int, requests: int, n: int) -> list[Share]:
    """The ``n`` shares of one plan (``_Plan(units, start, requests)``), see the module doc."""
    if profile.open_loop:
        caps: list[int | None] = (list(divide(profile.concurrency, n)) if profile.concurrency
                                  else [None] * n)
        bounds = [(n, i, i + 1) for i in range(n)]
    else:
        streams = divide(profile.concurrency or 1, n)
        caps = list(streams)
        edges = [sum(streams[:i]) for i in range(n + 1)]
        bounds = [(edges[-1], edges[i], edges[i + 1]) for i in range(n)]
    return [Share(index=i, count=n, endpoint=endpoint, profile=profile, bodies=bodies,
                  units=units, start=start, requests=requests, period=period, lo=lo, hi=hi,
                  streams=caps[i]) for i, (period, lo, hi) in enumerate(bounds)]


class SharePlan:
    """The part of a ``_Plan`` one share owns, seen as a plan of its own.

    Local unit ``j`` is the share's ``j``-th owned plan unit; its requests get local slots
    (0, 1, ... in the order units are taken, which both loops do in turn), so a worker's
    ``_Run`` keeps its records densely like a single-process run."""

    def __init__(self, plan: "_Plan", period: int, lo: int, hi: int) -> None:
        self.plan, self.period, self.lo, self.width = plan, period, lo, hi - lo
        full, rest = divmod(len(plan), period)
        self.units = full * self.width + min(max(rest - lo, 0), self.width)
        self.total = sum(len(plan.unit(self.global_unit(j))[1]) for j in range(self.units))
        self._next, self._slot = 0, 0

    def global_unit(self, j: int) -> int:
        """The plan's index of local unit ``j``."""
        cycle, m = divmod(j, self.width)
        return cycle * self.period + self.lo + m

    def __len__(self) -> int:
        return self.units

    def unit(self, j: int) -> tuple[int, list[int]]:
        """(local slot of its first request, its body indices) of local unit ``j``."""
        if j < self._next:  # out of turn (never in the runner's loops): count again
            self._next, self._slot = 0, 0
        while self._next < j:
            self._slot += len(self.plan.unit(self.global_unit(self._next))[1])
            self._next += 1
        indices = self.plan.unit(self.global_unit(j))[1]
        first = self._slot
        self._next, self._slot = j + 1, first + len(indices)
        return first, indices

    def arrivals(self, rate: float, seed: int) -> Iterator[float]:
        """The global schedule's arrival times of this share's units, in turn."""
        owned = (self.global_unit(j) for j in range(self.units))
        nxt = next(owned, None)
        for k, at in enumerate(schedule(rate, seed)):
            if nxt is None:
                return
            if k == nxt:
                yield at
                nxt = next(owned, None)


#: how :func:`.saturation.client_limit` opens its sentence and where its signs end
_SAID = ("the client itself was the limit: ", "; the load offered")


@dataclass
class Merged:
    """The shares of one run merged: what ``run_load`` builds its result from."""

    records: RecordStore
    #: achieved concurrency over the merged run (see :func:`achieved`)
    achieved: dict[str, float]
    elapsed: float
    started_at: float
    stopped_by: str
    not_sent: int
    #: each worker's CPU seconds (None: lost) and what its share's profile asked
    cpu: list[float | None]
    results: list[ShareResult] = field(default_factory=list)
    shares: list[Share] = field(default_factory=list)
    #: requests each share's plan holds (for what a lost share did not bring back)
    planned: list[int] = field(default_factory=list)

    def annotate(self, summary: dict[str, Any], placement: str, note: str | None) -> None:
        """Add the split's figures to ``summary``: processes, CPU per worker and in all,
        each worker's saturation, and what was lost (``partial``)."""
        e = self.elapsed
        used = [c for c in self.cpu if c is not None]
        summary["processes"] = len(self.shares)
        summary["placement"] = placement
        summary["workers"] = [r.worker for r in self.results]  # where each share ran
        summary["client_cpu_share"] = math.fsum(used) / e if e > 0 and used else None
        summary["client_cpu_by_process"] = [
            (c / r.elapsed if c is not None and r.elapsed > 0 else None)
            for c, r in zip(self.cpu, self.results)]
        lags = [r.loop_lag for r in self.results]
        summary["client_loop_lag_by_process"] = lags
        worst = [lag["max"] for lag in lags if lag]
        summary["client_loop_lag"] = (
            {"max": max(worst), "samples": sum(lag["samples"] for lag in lags if lag),
             "late_wakeups": sum(lag["late_wakeups"] for lag in lags if lag),
             "late_seconds": math.fsum(lag["late_seconds"] for lag in lags if lag),
             "interval": next(lag["interval"] for lag in lags if lag)} if worst else None)
        limited: list[str] = []
        sep = tail = ""
        for share, r in zip(self.shares, self.results):
            if r.partial:
                continue
            said = saturation.client_limit(
                concurrency=None if share.profile.open_loop else share.streams,
                rate=(share.profile.rate / share.count if share.profile.rate else None),
                started=len(r.records), elapsed=r.elapsed, cpu_seconds=r.cpu_seconds,
                achieved=r.achieved or stats.concurrency(r.spans, r.elapsed), lag=r.lag,
                span=r.span, loop_lag=r.loop_lag["max"] if r.loop_lag else None)
            if said:
                signs, sep, tail = said.removeprefix(_SAID[0]).partition(_SAID[1])
                limited.append(f"process {r.index + 1} of {len(self.shares)} ({r.worker}): "
                               f"{signs}")
        summary["client_limited"] = (_SAID[0] + "; ".join(limited) + sep + tail
                                     if limited else None)
        planned: list[int | None] = list(self.planned) or [None] * len(self.results)
        lost = [(r, n) for r, n in zip(self.results, planned) if r.partial]
        summary["partial"] = ("; ".join(f"process {r.index + 1} of {len(self.shares)} lost: "
                                        f"{r.error}; {kept(r, n)}" for r, n in lost)
                              if lost else None)
        summary["lost_requests"] = (sum(n - len(r.records) for r, n in lost if n is not None)
                                    if self.planned else None)
        if note:
            summary["processes_note"] = note


def kept(result: ShareResult, planned: int | None) -> str:
    """What a lost share left, exactly: the records it delivered (kept, in the merge) and
    the requests lost, split as its last delivery counted them (in flight then, or not yet
    sent then: some of those may have started after it, none of them came back)."""
    k, last = len(result.records), result.last_delivery
    if planned is None:
        return f"its {k} delivered records are kept"
    lost = planned - k
    if last is None:
        return (f"no record was delivered before it was lost: all {planned} requests of its "
                "share are lost")
    return (f"its {k} records delivered up to its last delivery {last.at:.1f} s after its "
            f"start are kept, {lost} of its {planned} requests lost ({last.in_flight} in "
            f"flight then, {planned - last.started} not yet sent then)")


def merge(results: Sequence[ShareResult], shares: Sequence[Share],
          start_at: float | None = None, planned: Sequence[int] = ()) -> Merged:
    """The shares' results as one run: records and spans concatenated in share order (a
    summary of them is the summary of every request), the elapsed time the longest share's,
    ``not_sent`` summed, "time" when any share stopped at the time bound."""
    by_index = {r.index: r for r in results}
    ordered = [by_index.get(s.index) or ShareResult.lost(s.index, "no result came back")
               for s in shares]
    records = concat(r.records for r in ordered)
    elapsed = max((r.elapsed for r in ordered), default=0.0)
    ran = [r for r in ordered if not r.partial]
    started = [r.started_at for r in ran if r.started_at]
    return Merged(records=records, achieved=achieved(ordered, elapsed), elapsed=elapsed,
                  started_at=start_at if start_at is not None else min(started, default=0.0),
                  stopped_by="time" if any(r.stopped_by == "time" for r in ran) else "count",
                  not_sent=sum(r.not_sent for r in ran), cpu=[r.cpu_seconds for r in ordered],
                  results=list(ordered), shares=list(shares), planned=list(planned))


def concat(parts: Iterable[Iterable["RunRecord"]]) -> RecordStore:
    """The shares' records one after the other, in one :class:`~.store.RecordStore` (the
    one place a merge builds its records; past a few thousand they go to disk)."""
    return RecordStore.merged(parts)


def achieved(results: Sequence[ShareResult], elapsed: float) -> dict[str, float]:
    """Achieved concurrency of the merged run over ``elapsed``: exact from every request's
    span when each share sent them; else the mean from the shares' busy time (exact: the
    sum of ``mean * elapsed``) and the max as the sum of the shares' peaks (at most that;
    equal when they peaked together, as the streams of a closed loop do)."""
    if all(r.spans or not r.records for r in results):
        return stats.concurrency([sp for r in results for sp in r.spans], elapsed)
    figures = [r.achieved or stats.concurrency(r.spans, r.elapsed) for r in results]
    if elapsed <= 0:
        return {"mean": 0.0, "max": 0.0}
    busy = math.fsum(f["mean"] * r.elapsed for f, r in zip(figures, results))
    return {"mean": busy / elapsed, "max": float(sum(f["max"] for f in figures))}


def workers(target: Any, profile: LoadProfile, placement: Placement | None,
            ) -> tuple[int, Placement | None, str | None]:
    """(worker processes, the placement, a note) for a run of ``profile`` against
    ``target``: 1 and no placement for a single-process run. Raises ProfileError."""
    if profile.processes == 1 and not profile.cluster:
        return 1, None, None
    if placement is None:  # a cluster: Ray actors there (even one), else processes here
        placement = (named("ray", cluster=profile.cluster) if profile.cluster
                     else named("local"))
    n, note = resolve(profile, placement.capacity())
    if n == 1 and not profile.cluster:
        return 1, None, None
    if not hasattr(target, "client") or not hasattr(target, "base_url"):
        raise ProfileError(f"{profile.name}: processes: {n} worker processes need an Endpoint "
                           "to make their own clients from, got "
                           f"{type(target).__name__} (pass the Endpoint, not a client)")
    return n, placement, note


class _Achieved:
    """The merged run's achieved concurrency, as the runner reads its in-flight meter."""

    def __init__(self, figures: dict[str, float]) -> None:
        self.figures = figures

    def result(self, elapsed: float) -> dict[str, float]:
        """The merged figures (computed over the merged run's elapsed time)."""
        return dict(self.figures)


class SplitRun:
    """A run split over worker processes, seen by ``run_load`` as its single ``_Run``: it
    drives the placement, counts progress from the workers and hands back the merged
    records. The controller (the caller's process) keeps the ``/metrics`` monitor."""

    def __init__(self, endpoint: "Endpoint", profile: LoadProfile,
                 bodies: list[dict[str, Any]], units: list[list[int]], plan: "_Plan",
                 n: int, placement: Placement, note: str | None) -> None:
        self.shares = partition(endpoint, profile, bodies, units, plan.next - len(plan),
                                plan.total, n)
        self.placement, self.note = placement, note
        self.planned = [SharePlan(plan, s.period, s.lo, s.hi).total for s in self.shares]
        self.total = plan.total
        self.each = [(0, 0, 0)] * n
        self.schedule_lag: float | None = None
        self.schedule_span: float | None = None
        self.merged: Merged | None = None

    def update(self, index: int, done: int, errors: int, in_flight: int) -> None:
        """A worker's counts (the placement's progress callback)."""
        self.each[index] = (done, errors, in_flight)

    @property
    def done(self) -> int:
        """Requests finished, all shares."""
        return sum(d for d, _, _ in self.each)

    @property
    def errors(self) -> int:
        """Requests failed, all shares."""
        return sum(e for _, e, _ in self.each)

    @property
    def in_flight(self) -> int:
        """Requests in flight, all shares."""
        return sum(f for _, _, f in self.each)

    async def drive(self, max_seconds: float) -> str:
        """Run every share through the placement (``max_seconds`` is each share's bound)."""
        results = await self.placement.run(self.shares, progress=self.update)
        ran = [r.started_at for r in results if r.started_at and not r.partial]
        self.merged = merge(results, self.shares, min(ran) if ran else time.time(),
                            self.planned)
        self.each = [(len(r.records), sum(1 for x in r.records if not x.ok), 0)
                     for r in self.merged.results]
        return self.merged.stopped_by

    def _done(self) -> Merged:
        if self.merged is None:
            raise RuntimeError("the split run has not been driven")
        return self.merged

    @property
    def started_at(self) -> float:
        """The agreed start (``time.time()``)."""
        return self._done().started_at

    @property
    def elapsed(self) -> float:
        """From the agreed start to the last share's end."""
        return self._done().elapsed

    def conclude(self, t_end: float) -> tuple[RecordStore, _Achieved, int]:
        """The merged records, achieved concurrency and requests not sent."""
        m = self._done()
        return m.records, _Achieved(m.achieved), m.not_sent

    def annotate(self, summary: dict[str, Any]) -> None:
        """The split's figures in ``summary`` (see :meth:`Merged.annotate`)."""
        self._done().annotate(summary, self.placement.name, self.note)
