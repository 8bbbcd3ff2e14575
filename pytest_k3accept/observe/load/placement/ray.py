"""Shares as Ray actors on an existing Ray cluster (``cluster = "ray://HEAD:10001"``).

Large deployments often run on Ray already (vLLM's own multi-node executor); a split run can
then use that cluster instead of this machine: one actor per share (one CPU each), spread
over the cluster's nodes (``scheduling_strategy="SPREAD"``), each running
:func:`~pytest_k3accept.observe.load.shares.run_share` in its own event loop. The schedule
and the exact merge are the shared code's (:mod:`..shares`); this module only places the
workers, agrees their start and brings their :class:`ShareResult` back through Ray's object
store. Nothing of a protocol of its own: Ray's client, actors and object store.

* **Connecting**: ``"ray://HOST:PORT"`` through the Ray Client (this process stays a client,
  not a node of the cluster), ``"auto"``: ``RAY_ADDRESS``, else the cluster running on this
  machine (``ray.init(address="auto")``). A TCP probe first says at once that nothing
  listens; ``ray.init`` runs in a thread bounded by ``connect_timeout`` (120 s: the Ray Client
  server starts a server process per client, seconds on a busy machine, and Ray's client
  needs up to a minute to fail when that process dies; Ray's own client gives
  up after ~30 s of no answer, a driver waits for a GCS for minutes). A connection this placement opened is
  closed after the run; one the caller opened is used and left open. When the Ray Client
  server could not start the server process it runs for this client ("Initialization failure
  from server": the process died or did not answer in time on a busy head), the connection
  is tried once more (a second ``connect_timeout``), as it was seen to fail once and not the
  next time. A ``ray.init`` still waiting at the bound leaves no half-open client behind: Ray
  would refuse every later ``ray.init`` of the process ("ray client is already connected"),
  so it is disconnected, and the next connect waits for it to unwind (bounded) and closes a
  half-open client left by anything else.
* **The start**: every actor is created and reports where it runs (its constructor has
  imported the HTTP stack); then every one gets the same ``start_at`` = now + ``start_margin``
  (the nodes' clocks must agree to well under that: NTP does).
* **The records, while it runs**: each actor's share delivers a :class:`~.Batch` of its
  ended requests every :data:`~.DELIVER_EVERY` s into a deque on the actor; the controller
  polls ``drain()`` (a threaded actor answers while ``run`` runs) about as often, one call
  outstanding per actor, each answer fetched on its own (a dead actor's never costs the
  others theirs), into the share's :class:`~.Delivery`. At the run's end one more
  ``drain()`` takes the rest. No queue actor, no protocol of its own: actor calls.
* **A lost worker**: an actor whose node died, or that was killed, raises in
  ``ray.get``; its share comes back as :meth:`~.Delivery.lost`, saying which actor on which
  node and what Ray said, **with the records it delivered** (lost: what was in flight, what
  ended after its last drained batch, what it had not sent); the other shares' results are
  kept and the run is partial. An actor the cluster cannot place within ``ready_timeout``
  (fewer free CPUs than shares) and one still running ``max_seconds`` + :data:`~.GRACE_S`
  after the start are lost too (killed).
* **The nodes** need ``pytest-k3accept`` importable with the same version as here (the actor
  class is this module's) and the client's Ray and Python versions equal to the cluster's.

``ShareResult.worker`` says where each share ran: ``ray actor 1a2b3c4d on node 10.0.0.7
(5e6f7a8b), pid 4242``.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import socket
import threading
import time
from typing import Any, Sequence

from . import (DELIVER_EVERY, GRACE_S, Batch, Delivery, PlacementError, ProgressCallback,
               Share, ShareResult)

log = logging.getLogger(__name__)

#: what to install for this placement
EXTRA = "pip install 'pytest-k3accept[ray]'"
#: the Ray Client server's default port (``ray start --ray-client-server-port``)
CLIENT_PORT = 10001
#: seconds between the agreed start and the moment it is agreed
START_MARGIN = 0.5
#: seconds ``ray.init`` may take (Ray's client fails a connection whose server process the
#: Ray Client server could not start after that server's wait, 30 s by default, plus its own
#: clean-up: well inside this bound)
CONNECT_TIMEOUT = 120.0
#: seconds the cluster may take to place every actor and have it ready
READY_TIMEOUT = 120.0
_POLL = 0.25
#: seconds to fetch a drain() answer that Ray says is ready (it may live on another node)
FETCH_TIMEOUT = 30.0


def import_ray(cluster: str) -> Any:
    """The ``ray`` module, or :class:`PlacementError` naming the extra."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise PlacementError(
            f"cluster = {cluster!r} places the load's processes on a Ray cluster, but Ray "
            f"is not installed here ({exc}): {EXTRA} (or the Ray version the cluster runs: "
            "a Ray client must match it)") from None


def address_of(cluster: str) -> str:
    """What ``ray.init`` is given: ``"auto"`` is ``RAY_ADDRESS`` when set, else ``"auto"``."""
    if cluster == "auto":
        return os.environ.get("RAY_ADDRESS", "").strip() or "auto"
    return cluster


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``ray://HOST[:PORT]`` address (default port 10001), else None."""
    if not address.startswith("ray://"):
        return None
    rest = address[len("ray://"):].split("/", 1)[0]
    host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    return host.strip("[]"), int(port) if port.isdigit() else CLIENT_PORT


def probe(cluster: str, address: str, timeout: float) -> None:
    """Raise :class:`PlacementError` when nothing accepts TCP at a ``ray://`` address."""
    where = host_port(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=timeout).close()
    except OSError as exc:
        raise PlacementError(
            f"Ray cluster {cluster!r} is not reachable: nothing accepts connections at "
            f"{where[0]}:{where[1]} ({type(exc).__name__}: {exc}); is the head node up and "
            "its Ray Client server port reachable from here (ray start --head "
            "--ray-client-server-port PORT)?") from None


def _client_context(ray: Any) -> Any:
    """Ray's default Ray Client context (None for a ``ray`` without the client)."""
    stub = getattr(getattr(getattr(ray, "util", None), "client", None), "ray", None)
    try:
        return stub.get_context() if stub is not None else None
    except Exception:  # noqa: BLE001 - another Ray's layout: nothing to close
        return None


#: a ``ray.init`` of this process that was still waiting at its bound, being closed
_unfinished: list[threading.Thread] = []


def close_half_open(ray: Any) -> bool:
    """Start disconnecting a Ray Client connection that is not initialized but holds a client
    worker (a ``ray.init`` still waiting, or one that failed half way); True when there was
    one. The context is disconnected itself (Ray's module-level ``disconnect`` only reaches
    contexts that finished connecting), in a thread of its own: Ray's client joins its
    streams, which end only when the Ray Client server gives up on its side (its
    ``RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S``), and a ``ray.init`` blocked on its Init
    answer wakes on that shutdown."""
    ctx = _client_context(ray)
    if ctx is None or getattr(ctx, "client_worker", None) is None:
        return False
    threading.Thread(target=ctx.disconnect, name="k3-ray-close", daemon=True).start()
    return True


def _settle(ray: Any, timeout: float) -> str | None:
    """Wait up to ``timeout`` s for an earlier ``ray.init`` of this process that is still
    unwinding (its own clean-up must end before a new connection, or it would close that
    one), then close a half-open client; a reason when it is still waiting."""
    for thread in list(_unfinished):
        thread.join(max(0.1, timeout))
        if thread.is_alive():
            return ("an earlier ray.init of this process is still waiting for the cluster "
                    f"({timeout:g} s more did not end it)")
        _unfinished.remove(thread)
    if close_half_open(ray):
        log.warning("k3accept: a half-open Ray Client connection (an earlier ray.init that "
                    "did not complete) was closed before connecting")
    return None


#: Ray's word for the Ray Client server's failure to start this client's server process
INIT_FAILURE = "Initialization failure from server"


def _attempt(ray: Any, address: str, timeout: float) -> BaseException | None:
    """One bounded ``ray.init``: None when connected, the exception it raised, or
    :class:`TimeoutError` when it was still waiting at ``timeout`` (then its connection is
    being closed, and the next connect waits for it: :func:`_settle`)."""
    failed: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False,
                     namespace="k3accept")
        except BaseException as exc:  # noqa: BLE001 - a GCS that never answers: SystemExit
            failed.append(exc)
    thread = threading.Thread(target=init, name="k3-ray-connect", daemon=True)
    thread.start()
    thread.join(max(0.1, timeout))
    if thread.is_alive():
        _unfinished.append(thread)
        close_half_open(ray)
        return TimeoutError()
    return failed[0] if failed else None


def connect(ray: Any, cluster: str, timeout: float = CONNECT_TIMEOUT) -> bool:
    """Connect to ``cluster`` within ``timeout`` s (twice that when the Ray Client server
    failed to start this client's server and the second try is made); True when this call
    opened the connection (then the caller closes it), False when Ray was already
    initialized."""
    if ray.is_initialized():
        return False
    address = address_of(cluster)
    shown = cluster if address == cluster else f"{cluster} = {address}"
    t0 = time.monotonic()
    probe(shown, address, min(5.0, timeout))
    versions = (f"this client runs Ray {getattr(ray, '__version__', '?')} on Python "
                f"{'.'.join(map(str, __import__('sys').version_info[:3]))}, which the "
                "cluster's must match")
    busy = _settle(ray, timeout)
    if busy:
        raise PlacementError(f"Ray cluster {shown!r}: not connecting: {busy} ({versions})")
    t_try = time.monotonic()
    exc = _attempt(ray, address, timeout - (t_try - t0))
    earlier = ""
    if exc is not None and not isinstance(exc, TimeoutError) and INIT_FAILURE in _said(exc):
        earlier = (f"; a first try failed after {time.monotonic() - t_try:.1f} s the same "
                   f"way ({INIT_FAILURE})")
        log.warning("k3accept: Ray cluster %r: the Ray Client server could not start this "
                    "client's server (%s); trying once more", shown, _said(exc))
        exc = _attempt(ray, address, timeout)
    if exc is None:
        return True
    if isinstance(exc, TimeoutError):
        raise PlacementError(f"Ray cluster {shown!r} did not answer within {timeout:g} s "
                             "(ray.init still waiting; its connection is being closed)"
                             f"{earlier}; check the address ({versions})")
    said = _said(exc)
    hint = (" The Ray Client server gave up waiting for the server process it starts "
            "per client (RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S, 30 s by default, read "
            "by the head node): a busy head needs it longer." if INIT_FAILURE in said else "")
    raise PlacementError(f"Ray cluster {shown!r}: connecting failed after "
                         f"{time.monotonic() - t0:.1f} s: {type(exc).__name__}: {said} "
                         f"({versions}){earlier}.{hint}")


def _said(exc: BaseException) -> str:
    """The first line of what an exception says (its repr when it says nothing)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


class _ShareWorker:
    """The actor: one share, run when :meth:`run` is called. A threaded actor: while
    ``run`` runs, :meth:`drain` (the controller's poll) hands over the batches the share
    delivered so far (a deque: appended by the run's event loop, emptied by the poll)."""

    def __init__(self, share: Share) -> None:
        from collections import deque

        from ...endpoint import client as _client  # noqa: F401 - the HTTP stack, before ready

        self.share = share
        self.batches: deque[Batch] = deque()
        self.label = ""

    def where(self) -> str:
        """Where this actor runs: actor, node IP and id, pid."""
        ray = importlib.import_module("ray")
        ctx = ray.get_runtime_context()
        self.label = (f"ray actor {str(ctx.get_actor_id())[:8]} on node "
                      f"{ray.util.get_node_ip_address()} ({str(ctx.get_node_id())[:8]}), "
                      f"pid {os.getpid()}")
        return self.label

    def run(self, start_at: float) -> ShareResult:
        """Run the share from ``start_at``, delivering its batches to :meth:`drain`; its
        figures (the records come through :meth:`drain`)."""
        from ..shares import run_share_sync

        result = run_share_sync(self.share, start_at, deliver=self.batches.append)
        result.worker = self.label or result.worker
        return result

    def drain(self) -> list[Batch]:
        """The batches delivered since the last call, oldest first."""
        out: list[Batch] = []
        while self.batches:
            out.append(self.batches.popleft())
        return out


def _what(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}"


class RayPlacement:
    """One Ray actor per share on ``cluster`` (see the module docstring)."""

    name = "ray"

    def __init__(self, cluster: str, *, connect_timeout: float = CONNECT_TIMEOUT,
                 ready_timeout: float = READY_TIMEOUT,
                 start_margin: float = START_MARGIN) -> None:
        self.cluster = cluster
        self.connect_timeout, self.ready_timeout = connect_timeout, ready_timeout
        self.start_margin = start_margin
        self._ray: Any = None
        self._owned = False
        #: where each share of the last run ran (share order; "" when never placed)
        self.where: list[str] = []
        #: the live actor handles of the current run (share order), for tests
        self.actors: list[Any] = []

    def _connect(self) -> Any:
        if self._ray is None:
            ray = import_ray(self.cluster)
            self._owned = connect(ray, self.cluster, self.connect_timeout)
            self._ray = ray
        return self._ray

    def close(self) -> None:
        """Close the connection this placement opened (none opened: nothing)."""
        if self._ray is not None and self._owned:
            self._ray.shutdown()
        self._ray, self._owned = None, False

    def capacity(self) -> int:
        """CPUs of the cluster (connects: a :class:`PlacementError` says why not)."""
        ray = self._connect()
        try:
            return max(1, int(ray.cluster_resources().get("CPU", 1)))
        except Exception as exc:  # noqa: BLE001 - connected, but the cluster is gone
            self.close()
            raise PlacementError(f"Ray cluster {self.cluster!r}: reading its resources "
                                 f"failed: {_what(exc)}") from None

    async def run(self, shares: Sequence[Share], *,
                  progress: ProgressCallback | None = None) -> list[ShareResult]:
        """Create one actor per share, start them at one instant, collect their results."""
        ray = self._connect()
        try:
            return await self._run(ray, shares, progress)
        finally:
            for actor in self.actors:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            self.actors = []
            self.close()

    async def _run(self, ray: Any, shares: Sequence[Share],
                   progress: ProgressCallback | None) -> list[ShareResult]:
        remote = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0,
                            max_concurrency=2)(_ShareWorker)
        n = len(shares)
        self.actors = [remote.options(scheduling_strategy="SPREAD").remote(s) for s in shares]
        self.where = [""] * n
        results: dict[int, ShareResult] = {}
        t_ready = time.time()
        pending = {s.index: self.actors[k].where.remote() for k, s in enumerate(shares)}
        while pending:
            done = await self._wait(ray, list(pending.values()))
            for k, s in enumerate(shares):
                ref = pending.get(s.index)
                if ref is None or ref not in done:
                    continue
                del pending[s.index]
                try:
                    self.where[k] = str(ray.get(ref))
                except Exception as exc:  # noqa: BLE001 - could not start: lost
                    results[s.index] = ShareResult.lost(
                        s.index, f"worker {s.index + 1} of {n} (a Ray actor) could not "
                        f"start: {_what(exc)}; the other shares' records are kept")
            waited = time.time() - t_ready
            if pending and waited > self.ready_timeout:
                free = ray.available_resources().get("CPU", 0)
                for index in list(pending):
                    del pending[index]
                    results[index] = ShareResult.lost(
                        index, f"worker {index + 1} of {n} (a Ray actor) was not placed "
                        f"and ready within {self.ready_timeout:g} s (the cluster has "
                        f"{free:g} CPUs free; each share needs one); the other shares' "
                        "records are kept")
        start_at = time.time() + self.start_margin
        running = {s.index: (k, self.actors[k].run.remote(start_at))
                   for k, s in enumerate(shares) if s.index not in results}
        got = {s.index: Delivery(s.index) for s in shares}
        drains: dict[int, Any] = {}  # share -> its outstanding drain() call
        deadline = start_at + max(s.max_seconds for s in shares) + GRACE_S
        next_drain = time.time() + DELIVER_EVERY
        while running:
            done = await self._wait(ray, [ref for _, ref in running.values()]
                                    + list(drains.values()))
            for index, ref in list(drains.items()):
                if ref in done:
                    del drains[index]
                    await self._take(ray, ref, got[index], progress)
            for index, (k, ref) in list(running.items()):
                if ref not in done:
                    continue
                del running[index]
                try:
                    figures = ray.get(ref)
                    last = [drains.pop(index)] if index in drains else []
                    for left in await asyncio.to_thread(
                            ray.get, [*last, self.actors[k].drain.remote()], timeout=30.0):
                        self._add(left, got[index], progress)
                    results[index] = got[index].complete(figures)
                except Exception as exc:  # noqa: BLE001 - the actor or its node died
                    if index in drains:  # an answer that came back before it died counts
                        await self._take(ray, drains.pop(index), got[index], progress)
                    results[index] = got[index].lost(
                        f"worker {index + 1} of {n} ({self.where[k] or 'a Ray actor'})"
                        f" was lost mid-run, {time.time() - start_at:.1f} s after the start: "
                        f"{_what(exc)}; the other shares' records are kept",
                        worker=self.where[k], elapsed=max(0.0, time.time() - start_at))
            if running and time.time() > deadline:
                for index, (k, _) in list(running.items()):
                    del running[index]
                    drains.pop(index, None)
                    ray.kill(self.actors[k], no_restart=True)
                    results[index] = got[index].lost(
                        f"worker {index + 1} of {n} ({self.where[k]}) was still "
                        f"running {GRACE_S:g} s past its max_seconds, stopped; the other "
                        "shares' records are kept", worker=self.where[k],
                        elapsed=max(0.0, time.time() - start_at))
            if running and time.time() >= next_drain:
                next_drain = time.time() + DELIVER_EVERY
                for index, (k, _) in running.items():
                    if index not in drains:
                        drains[index] = self.actors[k].drain.remote()
        return [results[s.index] for s in shares]

    async def _take(self, ray: Any, ref: Any, into: Delivery,
                    progress: ProgressCallback | None) -> None:
        """A finished drain() call's batches into ``into`` (a dead actor's: nothing; its
        run's ref says what happened).

        Fetched with a real timeout, in a thread: ``ray.wait`` saying the answer is ready
        means it exists in the cluster, not that it is here; through the Ray Client a batch
        large enough to live in the object store of the actor's node must still be pulled,
        and a ``ray.get(ref, timeout=0)`` that timed out would drop a batch already taken
        off the actor's deque (a precaution: not seen to happen)."""
        try:
            batches = await asyncio.to_thread(ray.get, ref, timeout=FETCH_TIMEOUT)
        except Exception:  # noqa: BLE001 - the actor or its node died
            return
        self._add(batches, into, progress)

    @staticmethod
    def _add(batches: list[Batch], into: Delivery, progress: ProgressCallback | None) -> None:
        for batch in batches[:-1]:
            into.add(batch)
        if batches:  # one progress call per drain: the latest counts
            into.take(batches[-1], progress)

    async def _wait(self, ray: Any, refs: list[Any]) -> set[Any]:
        """The refs of ``refs`` that are ready within a poll (waited in a thread: the
        controller's event loop keeps sampling ``/metrics`` meanwhile)."""
        ready, _ = await asyncio.to_thread(ray.wait, refs, num_returns=len(refs),
                                           timeout=_POLL)
        return set(ready)
