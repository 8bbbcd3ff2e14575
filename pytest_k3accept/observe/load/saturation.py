"""Was the client itself the limit of a load run? (:func:`client_limit`)

One Python process drives the whole load. When it runs out of CPU, the load it *offers* is
not the load the profile asked for, and every latency it measures includes its own queueing:
a headroom or SLO judgement made then describes the client, not the server. Three signs, each
measured by the runner, never guessed:

* **client CPU near one core**: the runner's process used >= :data:`CPU_SHARE` of one core
  over the run (``time.process_time``; the event loop is one thread, so one core is its
  ceiling);
* **open loop: the arrival schedule fell behind**: a request started more than
  :data:`LAG_SHARE` of the schedule's span (and at least :data:`MIN_LAG` s) after its seeded
  arrival time, not counting the time spent waiting for a free slot of a concurrency cap
  (that wait is the server's doing). Compared with the schedule itself, not with ``rate``:
  a Poisson schedule of a few requests is often slower or faster than ``rate`` by chance. A
  slow server does not cause this in an open loop: arrivals do not wait for answers;
* **closed loop: fewer in flight than the requested concurrency**: the time-weighted mean of
  requests in flight stayed below :data:`INFLIGHT_SHARE` of ``concurrency`` in a run long
  enough (>= :data:`MIN_WAVES` waves of requests) that the ramp-up and the last wave do not
  explain it, *and* the client's CPU was near its ceiling (a closed loop keeps ``concurrency``
  in flight by construction unless the client is too slow to start the next request).

* **the event loop ran late**: the runner's loop probe (:mod:`.looplag`) woke
  :data:`MIN_LOOP_LAG` s or more after it was due at least once: every latency read while
  the loop was that late is late by as much, whatever the CPU share (a starved process uses
  no CPU).

Any one sign is enough: a client at a full core still meeting the offered load measures
latencies that include its own event-loop queueing.

The answer is ``None`` (the client was not the limit) or one sentence naming the signs with
their figures; ``"unknown"`` is not used, because each sign is measured on the client itself.
"""

from __future__ import annotations

from typing import Any, Mapping

#: a share of one core at or above which the client is taken as saturated
CPU_SHARE = 0.9
#: an open loop whose last start was this share of its schedule's span late fell behind
LAG_SHARE = 0.1
#: ... and at least this many seconds late (timer and event-loop jitter stay below it)
MIN_LAG = 0.25
#: a closed loop whose mean in flight stayed under this share of its concurrency
INFLIGHT_SHARE = 0.8
#: requests per stream below which a closed loop's ramp-up and tail explain a low mean
MIN_WAVES = 4
#: an event loop that woke this many seconds late (or more) read latencies that late: a
#: tenth of a second is more than a timer's jitter on a loaded machine and as much as a
#: short request's whole TTFT
MIN_LOOP_LAG = 0.1


def client_limit(*, concurrency: int | None, rate: float | None, started: int,
                 elapsed: float, cpu_seconds: float | None,
                 achieved: Mapping[str, float] | None, lag: float | None = None,
                 span: float | None = None, loop_lag: float | None = None) -> str | None:
    """The sentence saying how the client limited the run, or None when it did not.
    ``loop_lag``: the worst lateness of the event loop's probe (:mod:`.looplag`), None when
    not measured."""
    if elapsed <= 0:
        return None
    signs: list[str] = []
    share = None if cpu_seconds is None else cpu_seconds / elapsed
    hot = share is not None and share >= CPU_SHARE
    if hot:
        signs.append(f"the client used {share:.0%} of one core")
    if rate is not None and lag is not None and span is not None:
        if lag >= MIN_LAG and lag > LAG_SHARE * span:
            signs.append(f"its requests started up to {lag:.2f} s {_BEHIND} {rate:g}/s "
                         f"schedule ({started} started in {elapsed:.1f} s, the schedule "
                         f"spanned {span:.1f} s)")
    elif concurrency and achieved and hot and started >= MIN_WAVES * concurrency:
        mean = float(achieved.get("mean") or 0.0)
        if mean < INFLIGHT_SHARE * concurrency:
            signs.append(f"it kept {mean:.1f} {_FEWER} {concurrency} requested")
    if loop_lag is not None and loop_lag >= MIN_LOOP_LAG:
        signs.append(f"its event loop ran up to {loop_lag:.2f} s late (a timer due every "
                     f"{_probe_ms()} ms; latencies read meanwhile are late by as much, as when "
                     "the server on the same machine starves the client of CPU)")
    if not signs:
        return None
    return ("the client itself was the limit: " + ", ".join(signs) + "; the load offered "
            "may be less than the profile asked for and its latencies include the client's "
            "own queueing (spread the load over processes or machines)")


#: the words of the two signs that say the load offered fell short of the profile's
_BEHIND = "behind the"
_FEWER = "requests in flight of the"


def offered_less(limited: str | None) -> bool:
    """True when a :func:`client_limit` sentence says the client offered less load than
    asked (its schedule fell behind, or fewer requests in flight than the concurrency): a
    headroom or SLO *pass* then describes a smaller load, so it is unknown at the target.
    The other signs (a full core, a late event loop) leave the offered load whole and only
    add the client's own queueing to latencies (a pass stays a pass, conservatively)."""
    if not limited:
        return False
    return any(f" {w} " in limited for w in (_BEHIND, _FEWER))


def _probe_ms() -> str:
    from .looplag import INTERVAL

    return f"{INTERVAL * 1000:g}"


def of_run(profile: Any, summary: Mapping[str, Any], achieved: Mapping[str, float],
           elapsed: float, cpu_seconds: float | None, lag: float | None = None,
           span: float | None = None, loop_lag: float | None = None) -> str | None:
    """:func:`client_limit` for a runner's run (``profile``: a LoadProfile)."""
    return client_limit(concurrency=profile.concurrency if not profile.open_loop else None,
                        rate=profile.rate, started=int(summary.get("requests") or 0),
                        elapsed=elapsed, cpu_seconds=cpu_seconds, achieved=achieved,
                        lag=lag, span=span, loop_lag=loop_lag)
