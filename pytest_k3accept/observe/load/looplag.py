"""How late the client's event loop ran during a load run (:class:`LoopLag`).

Every latency the runner measures is a difference of two clock readings taken by code the
event loop runs: the request's start, and the moment the loop got round to the first chunk
the socket already held. When the loop is late (its process starved of CPU by the server
on the same machine, a long callback, a garbage collection of a large heap), the second
reading is late by as much, and nothing in the latency itself shows it. A run's CPU share
can be low while this happens: a process that is not scheduled uses no CPU (seen on a 2-core
machine with vLLM CPU beside the client: timers 8-17 s late, the client at a fraction of a
core).

So a probe task sleeps :data:`INTERVAL` s in a loop for as long as the run lasts and notes how
much later than asked each sleep ended. Its figures (:meth:`LoopLag.figures`) go into the
run's summary (``client_loop_lag``), its worst lateness into the load evidence, and a
lateness of :data:`~.saturation.MIN_LOOP_LAG` or more is a sign that the client was the limit
(:func:`~.saturation.client_limit`). The probe costs 20 wake-ups a second.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

__all__ = ["INTERVAL", "LoopLag"]

#: how often the probe asks to be woken (seconds)
INTERVAL = 0.05
#: a wake-up this much late or more is counted in ``late_wakeups`` (scheduling jitter of a
#: loaded machine stays below it)
LATE = 0.02


class LoopLag:
    """A probe of the running event loop: :meth:`start` it when the run starts, :meth:`stop`
    it when the run ends, then read :meth:`figures`."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        self.samples = 0
        self.worst = 0.0
        self.late_wakeups = 0
        self.late_seconds = 0.0  # summed lateness of the late wake-ups
        self._task: asyncio.Task[None] | None = None

    def start(self) -> "LoopLag":
        """Start the probe on the running loop (returns ``self``)."""
        self._task = asyncio.get_running_loop().create_task(self._probe())
        return self

    async def stop(self) -> None:
        """Stop the probe (its figures stay)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def note(self, late: float) -> None:
        """Count one wake-up that came ``late`` s after it was due."""
        self.samples += 1
        late = max(0.0, late)
        if late > self.worst:
            self.worst = late
        if late >= LATE:
            self.late_wakeups += 1
            self.late_seconds += late

    async def _probe(self) -> None:
        clock, interval = time.perf_counter, self.interval
        while True:
            due = clock() + interval
            await asyncio.sleep(interval)
            self.note(clock() - due)

    def figures(self) -> dict[str, Any] | None:
        """``{"interval", "samples", "max", "late_wakeups", "late_seconds"}`` (seconds), or
        None when the probe never woke (a run shorter than one interval: not measured)."""
        if not self.samples:
            return None
        return {"interval": self.interval, "samples": self.samples, "max": self.worst,
                "late_wakeups": self.late_wakeups, "late_seconds": self.late_seconds}

    @property
    def max(self) -> float | None:
        """The worst lateness in seconds; None when not measured."""
        return self.worst if self.samples else None
