"""The bounded load runner: a request set under a profile -> :class:`LoadResult`.

Closed loop (``concurrency`` workers, each sending its next unit as soon as the last one
finished) or open loop (Poisson arrivals at ``rate``, seeded, optionally capped at
``concurrency`` in flight). A unit is one request or one conversation (its turns in order).
Every run is bounded by ``requests`` and by ``max_seconds``: at the time bound the runner
stops sending and cancels what is in flight. A cancelled request that had been in flight no
longer than the longest request that completed is ``cut`` (the harness ended it, not the
server: not sent, not an error; a soak bounded by time always cuts some); one in flight
longer than any that completed (or in a run where none completed) is a ``timeout`` error (a
server that stopped answering).

While it runs, a background task samples the server's KV-cache usage, running and waiting
gauges from ``/metrics`` (a cheap line scan every ``sample_interval`` s) and reports
progress; counter deltas (tokens, preemptions, prefix-cache hits, queue time) come from
full scrapes before and after, and are compared with what the run sent
(``server["other_clients"]``, :mod:`.shared`: a server that also served other clients marks
the run shared). The hot path does no logging and takes no lock; each finished request is
kept as a slim :class:`~.result.RunRecord` (numbers and packed inter-token gaps, no text)
in a :class:`~.store.RecordStore` (spilled to disk past a few thousand), achieved
concurrency is measured as the run goes (:class:`~.stats.InFlight`), and the plan is
computed, not listed, so the client's memory does not grow with the run's length
(docs/load.md, "Long runs").
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence

from . import saturation, shared, stall, stats
from .looplag import LoopLag
from .profile import LoadProfile
from .requestset import ChatRequest, RequestSet
from .requestset import from_requests as _from_requests
from .requestset import load as _load_set
from .result import LoadResult, Progress, RunRecord
from .split import SplitRun, schedule, workers
from .store import RecordStore

if TYPE_CHECKING:  # pragma: no cover
    from ..endpoint.client import RequestResult
    from ..endpoint.discover import Endpoint
    from ..metrics import MetricsScraper
    from .placement import Placement

PATH = "/v1/chat/completions"

#: the cyclic GC's thresholds while a run is in progress (see :func:`fewer_collections`)
RUN_GC_THRESHOLD = (20_000, 20, 20)
_gc_depth = 0
_gc_saved: tuple[int, int, int] | None = None


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run with the cyclic garbage collector collecting far less often, restored after.

    A run keeps every request's record alive (a slim :class:`~.result.RunRecord`, its ITL
    packed), so each full collection scans more objects as the run goes on; at 512 streams that cost ~15 % of the runner's
    CPU per request and put collection pauses inside the latencies being measured. The
    thresholds go to :data:`RUN_GC_THRESHOLD` (never lower than they were; left alone when
    the GC is disabled) while at least one run is in progress, and back when the last one
    ends, so overlapping runs (an A/B, a failover pair) restore them correctly.
    """
    global _gc_depth, _gc_saved
    if _gc_depth == 0:
        _gc_saved = gc.get_threshold()
        if _gc_saved[0] > 0:
            gc.set_threshold(*(max(a, b) for a, b in zip(_gc_saved, RUN_GC_THRESHOLD)))
    _gc_depth += 1
    try:
        yield
    finally:
        _gc_depth -= 1
        if _gc_depth == 0 and _gc_saved is not None:
            gc.set_threshold(*_gc_saved)
            _gc_saved = None


class LoadClient(Protocol):
    """What the runner needs of a client (``K3Client`` has it)."""

    base_url: str
    model: str

    async def request(self, path: str, body: dict[str, Any], *, stream: bool = False,
                      ) -> "RequestResult":
        """Send one request and measure it; never raises for HTTP errors."""


_timeout = getattr(asyncio, "timeout", None)


def _as_set(requests: Any) -> RequestSet | None:
    if requests is None or isinstance(requests, RequestSet):
        return requests
    if isinstance(requests, (str, Path)):
        return _load_set(requests)
    return _from_requests(list(requests))


def _body(req: ChatRequest, model: str, profile: LoadProfile) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": req.messages,
                            "max_tokens": req.max_tokens or profile.output_tokens}
    if req.tools:
        body["tools"] = req.tools
    body.update(req.params)
    if profile.ignore_eos:
        body["ignore_eos"] = True
    return body


class _Plan:
    """The requests of one phase, cycling ``units`` (lists of body indices) from unit
    ``start`` until ``count`` requests, without listing them: plan unit ``k`` and the slot
    of its first request are computed when a worker takes it, so a soak bounded at a
    million requests costs no memory for the requests it has not sent."""

    def __init__(self, units: Sequence[Sequence[int]], start: int, count: int) -> None:
        kept = [list(u) for u in units if u]
        n = len(kept)
        self.rotated = [kept[(start + m) % n] for m in range(n)]
        self.offsets: list[int] = []
        k = 0
        for unit in self.rotated:
            self.offsets.append(k)
            k += len(unit)
        cycle = k
        self.cycle = cycle
        self.total = count if n else 0
        if not n:
            self.units = 0
        else:
            full, rest = divmod(self.total, cycle)
            self.units = full * n + sum(1 for o in self.offsets if o < rest)
        #: the unit index (into ``units``) after the plan's last one
        self.next = start + self.units

    def __len__(self) -> int:
        return self.units

    def unit(self, k: int) -> tuple[int, list[int]]:
        """(slot of its first request, its body indices) of plan unit ``k``."""
        full, m = divmod(k, len(self.rotated))
        first = full * self.cycle + self.offsets[m]
        return first, self.rotated[m][:self.total - first]

    def units_list(self) -> list[list[int]]:
        """Every unit of the plan (for tests and small plans)."""
        return [self.unit(k)[1] for k in range(self.units)]

    def arrivals(self, rate: float, seed: int) -> Iterator[float]:
        """An open loop's seeded Poisson schedule: the arrival time of each plan unit in
        turn, in seconds after the first (0.0). A share of a split run
        (:class:`~.split.SharePlan`) gives the times of its own units in this schedule."""
        return schedule(rate, seed)


class _Run:
    """State of one measured phase (warm-up or run); counters are plain ints."""

    def __init__(self, client: LoadClient, bodies: list[dict[str, Any]],
                 plan: _Plan, profile: LoadProfile) -> None:
        self.client, self.bodies, self.plan, self.profile = client, bodies, plan, profile
        self.total = plan.total
        # records in slot order (:class:`~.store.RecordStore`: spilled to disk past a few
        # thousand), in-flight starts and finished records waiting for an earlier slot:
        # what is held grows with what is in flight, never with the run's length
        self.records = RecordStore()
        self.active: dict[int, float] = {}  # slot -> start (perf_counter)
        self.waiting: dict[int, RunRecord] = {}  # finished, behind an unfinished slot
        self.flushed = 0  # the slots below it are in ``records`` (or were never sent)
        self.started = self.high = 0  # requests started; 1 + the highest slot started
        self.meter = stats.InFlight()  # achieved concurrency, measured as it goes
        #: a split run's worker (:mod:`.shares`) sets a list here: every ended request goes
        #: in as (slot, start, end, record), in the order they end, for its next delivery;
        #: None (a single-process run) keeps nothing more than the records
        self.outbox: list[tuple[int, float, float, RunRecord]] | None = None
        self.done = self.errors = self.in_flight = 0
        #: the longest a successful request took (s): a request cut at the time bound
        #: younger than this is cut, not late
        self.longest_ok = 0.0
        #: open loop: how late the latest request started against its seeded arrival time,
        #: less the time spent waiting for a free slot of a concurrency cap (the server's
        #: doing), and the schedule's span; None in a closed loop
        self.schedule_lag: float | None = None
        self.schedule_span: float | None = None
        self.stopping = False
        self.tasks: list[asyncio.Task[None]] = []
        from ..endpoint.client import RequestResult

        self.result_type = RequestResult

    async def one(self, slot: int, body_index: int) -> None:
        RequestResult = self.result_type
        perf = time.perf_counter
        self.in_flight += 1
        self.started += 1
        self.high = max(self.high, slot + 1)
        self.active[slot] = t = perf()
        self.meter.start(t)
        try:
            if self.profile.timeout is not None and _timeout is not None:
                async with _timeout(self.profile.timeout):
                    res = await self.client.request(PATH, self.bodies[body_index],
                                                    stream=self.profile.stream)
            else:
                res = await self.client.request(PATH, self.bodies[body_index],
                                                stream=self.profile.stream)
        except (TimeoutError, asyncio.TimeoutError):
            res = RequestResult(ok=False, error_kind="timeout", stream=self.profile.stream,
                                error=f"no complete answer within timeout = "
                                      f"{self.profile.timeout} s", started_at=time.time())
        except Exception as exc:  # noqa: BLE001 - a worker must never die
            kind = "connection" if isinstance(exc, OSError) else "protocol"
            res = RequestResult(ok=False, error_kind=kind, error=f"{type(exc).__name__}: {exc}",
                                stream=self.profile.stream, started_at=time.time())
        end, start = perf(), self.active.pop(slot)
        self.meter.end(end, start)
        if res.ok and end - start > self.longest_ok:
            self.longest_ok = end - start
        self.waiting[slot] = kept = RunRecord.of(res)  # the text, tool calls, error body go
        if self.outbox is not None:
            self.outbox.append((slot, start, end, kept))
        while self.flushed in self.waiting:  # slots finish nearly in order
            self.records.append(self.waiting.pop(self.flushed))
            self.flushed += 1
        self.in_flight -= 1
        self.done += 1
        if not res.ok:
            self.errors += 1

    async def unit(self, u: int) -> None:
        first, indices = self.plan.unit(u)
        for slot, body_index in enumerate(indices, first):
            if self.stopping:
                return
            await self.one(slot, body_index)

    async def closed(self, workers: int) -> None:
        nxt = 0

        async def worker() -> None:
            nonlocal nxt
            while nxt < len(self.plan) and not self.stopping:
                u = nxt
                nxt += 1
                await self.unit(u)
        self.tasks = [asyncio.create_task(worker()) for _ in range(min(workers, len(self.plan)))]
        await asyncio.gather(*self.tasks)

    async def open(self, rate: float, cap: int | None, seed: int) -> None:
        due = self.plan.arrivals(rate, seed)
        sem = asyncio.Semaphore(cap) if cap else None
        first = time.perf_counter()
        at = first + next(due) if len(self.plan) else first
        waited = 0.0

        async def capped(u: int, due: float) -> None:
            # the request starts now, when the loop first runs its task: its lag behind
            # the seeded arrival time, less the slot waits (the server's doing)
            lag = max(0.0, time.perf_counter() - due)
            self.schedule_lag = max(self.schedule_lag or 0.0, lag)
            try:
                await self.unit(u)
            finally:
                if sem is not None:
                    sem.release()
        for u in range(len(self.plan)):
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if sem is not None:
                w0 = time.perf_counter()
                await sem.acquire()
                waited += time.perf_counter() - w0
            if self.stopping:
                break
            self.schedule_span = at - first
            self.tasks.append(asyncio.create_task(capped(u, at + waited)))
            if u + 1 < len(self.plan):
                at = first + next(due)
        await asyncio.gather(*self.tasks)

    async def drive(self, max_seconds: float) -> str:
        """Run the plan; at ``max_seconds`` cancel what is left. Returns what stopped it."""
        p = self.profile
        main = asyncio.ensure_future(
            self.open(p.rate, p.concurrency, p.seed) if p.rate is not None
            else self.closed(p.concurrency or 1))
        done, _ = await asyncio.wait({main}, timeout=max_seconds)
        if main in done:
            main.result()
            return "count"
        self.stopping = True
        for t in [main, *self.tasks]:
            t.cancel()
        await asyncio.gather(main, *self.tasks, return_exceptions=True)
        return "time"

    def conclude(self, t_end: float) -> tuple[RecordStore, "stats.InFlight", int]:
        """Records of started requests in slot order (cut ones as timeouts, also into the
        outbox), the achieved concurrency meter (cut ones end at ``t_end``), and how many
        were not sent."""
        for slot in range(self.flushed, self.high):
            r = self.waiting.pop(slot, None)
            if r is None:
                start = self.active.pop(slot, None)
                if start is None:
                    continue  # never started (a conversation's later turn): not sent
                r = cut_record(t_end - start, self.longest_ok, self.profile)
                self.meter.end(t_end, start)
                if self.outbox is not None:
                    self.outbox.append((slot, start, t_end, r))
            self.records.append(r)
        self.flushed = self.high
        return self.records, self.meter, self.total - self.started


def cut_record(age: float, longest_ok: float, profile: LoadProfile) -> RunRecord:
    """The record of a request still in flight at the run's time bound, ``age`` seconds
    after it started: ``cut`` (not an error) when a request that long completed, else a
    ``timeout`` (longer than any that completed: the server was not answering it)."""
    bound = f"at the run's time bound (max_seconds = {profile.max_seconds:g} s)"
    if 0.0 < age <= longest_ok:
        return RunRecord(False, error_kind=stats.CUT, stream=profile.stream,
                         error=f"cut {bound} after {age:.1f} s in flight, no longer than the "
                               f"longest request that completed ({longest_ok:.1f} s): not "
                               "counted as sent or as an error")
    return RunRecord(False, error_kind="timeout", stream=profile.stream,
                     error=f"cancelled {bound} after {age:.1f} s in flight, longer than any "
                           f"request that completed ({longest_ok:.1f} s)")


async def run_load(target: "Endpoint | LoadClient", requests: Any, profile: LoadProfile, *,
                   metrics: "MetricsScraper | bool | None" = True,
                   progress: Callable[[Progress], Any] | None = None,
                   progress_interval: float = 1.0, sample_interval: float = 0.25,
                   telemetry: Any = None, placement: "Placement | None" = None) -> LoadResult:
    """Run ``requests`` (a :class:`RequestSet`, a list of requests/mappings, a file path, or
    None: the profile's ``request_set`` file, else a synthetic set built from ``profile``)
    against ``target`` under ``profile``.

    ``metrics``: True scrapes ``{base_url}/metrics`` of the target, a ``MetricsScraper``
    scrapes that one, False/None none. ``progress`` is called with a :class:`Progress`
    every ``progress_interval`` s. ``telemetry``: an optional, already running GPU sampler
    (``k3_gpu`` / ``GpuTelemetry``, or a callable returning a dict); its figures for the
    run go to ``LoadResult.gpu`` (see :func:`.monitor.gpu_figures`). ``profile.processes``
    > 1 splits the run over worker processes (:mod:`.split`), placed by ``placement``
    (default :class:`~.placement.local.LocalPlacement`); ``target`` must then be an Endpoint.
    """
    from .monitor import Monitor, gpu_figures

    n, place, note = workers(target, profile, placement)  # a bad value: ProfileError

    own = not hasattr(target, "request")  # an Endpoint: make (and later close) a client
    limit = profile.timeout or profile.max_seconds
    client: LoadClient = target.client(timeout=limit) if own else target  # type: ignore
    mon = Monitor(client, metrics, sample_interval)
    try:
        rs = _as_set(requests if requests is not None else profile.request_set)
        if rs is None:
            from .synthetic import generate

            rs = await generate(client, profile)
        bodies = [_body(r, client.model, profile) for r in rs.requests]
        index = {id(r): i for i, r in enumerate(rs.requests)}
        units = [[index[id(r)] for r in unit] for unit in rs.units()]
        warm_plan = _Plan(units, 0, profile.warmup)
        plan = _Plan(units, warm_plan.next, profile.requests)
        await mon.open()
        if len(warm_plan):
            warm = _Run(client, bodies, warm_plan, profile)
            await warm.drive(profile.max_seconds)
            await mon.settle(warm.done - warm.errors)  # warm-ups answered
            warm.records.close()
        run: "_Run | SplitRun" = (
            _Run(client, bodies, plan, profile) if place is None else
            SplitRun(target, profile, bodies, units, plan, n, place, note))  # type: ignore[arg-type]
        await mon.baseline()
        started_at, t0, cpu0 = time.time(), time.perf_counter(), time.process_time()
        watcher = asyncio.create_task(mon.watch(run, t0, progress, progress_interval))
        probe = LoopLag().start()  # how late this loop ran (observe.load.looplag)
        try:
            with fewer_collections():
                stopped_by = await run.drive(profile.max_seconds)
        finally:
            await probe.stop()
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        t_end, cpu = time.perf_counter(), time.process_time() - cpu0
        elapsed = t_end - t0
        if isinstance(run, SplitRun):  # the workers' run, from their agreed start
            started_at, elapsed = run.started_at, run.elapsed
        if progress is not None and mon.reported:  # a closing line after progress lines
            mon.report(run, t0, progress)
        recs, meter, not_sent = run.conclude(t_end)
        await stall.annotate(client, recs)  # streams stalled while /health said 200
        summary = stats.summarize(recs, elapsed)
        if recs.spill_error:
            summary["spill_error"] = recs.spill_error
        achieved = meter.result(elapsed)
        summary["client_cpu_share"] = cpu / elapsed if elapsed > 0 else None
        # (a split run's workers probe their own loops: SplitRun.annotate puts theirs)
        summary["client_loop_lag"] = probe.figures()
        summary["client_limited"] = saturation.of_run(profile, summary, achieved, elapsed, cpu,
                                                      run.schedule_lag, run.schedule_span,
                                                      probe.max)
        summary["processes"] = n
        if isinstance(run, SplitRun):  # CPU and saturation per worker, what was lost
            run.annotate(summary)
        server = await mon.final(summary["ok"])
        if server is not None:  # did the server serve other clients during the run?
            server["other_clients"] = shared.compare(summary, server)
        gpu = gpu_figures(telemetry, started_at, time.time())
    finally:
        await mon.close()
        if own:
            await client.aclose()  # type: ignore[attr-defined]  # a K3Client we made
    return LoadResult(profile=profile, records=recs, elapsed=elapsed, started_at=started_at,
                      stopped_by=stopped_by, not_sent=not_sent, summary=summary,
                      achieved_concurrency=achieved,
                      endpoint=client.base_url,
                      mode="open" if profile.open_loop else "closed",
                      request_set=rs.describe(), server=server, server_error=mon.error,
                      gpu=gpu)
