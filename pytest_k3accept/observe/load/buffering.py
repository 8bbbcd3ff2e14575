"""A stream that arrived in one burst: a buffering proxy between client and server (pure).

A reverse proxy that buffers the response (nginx's ``proxy_buffering on``, the default,
many ingress controllers) holds the event stream back and delivers it whole: every chunk
lands within a few milliseconds, after a silence as long as the whole generation. Nothing
fails, but TTFT then equals e2e and the inter-token gaps are zeros: every latency figure but
e2e is wrong. :func:`is_burst` tells such a stream from the client's own chunk arrival times
(``ttft`` and ``itl`` of a :class:`~pytest_k3accept.observe.endpoint.client.RequestResult`);
:func:`judge` turns a run's streams into the message that replaces TTFT/ITL/TPOT figures.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

#: the sentence shown instead of TTFT/ITL figures (the first part is what tests match)
BUFFERED = ("a proxy between the client and the server buffers the stream: TTFT is not "
            "measurable through it")
#: all content chunks of a burst arrive within this many seconds ...
BURST_SPREAD_S = 0.005
#: ... after a silence (the time to the first chunk) at least this long ...
MIN_SILENCE_S = 0.02
#: ... and this many times the spread
SILENCE_FACTOR = 10.0
#: a stream with fewer content chunks says nothing about buffering
MIN_CHUNKS = 3


def is_burst(record: Any) -> bool | None:
    """True when a successful stream that came through a proxy (``record.proxy``: its
    ``Server``/``Via`` header) had all its content chunks arrive within
    :data:`BURST_SPREAD_S` after a long silence; None when it cannot tell (not a stream,
    failed, no proxy named, or fewer than :data:`MIN_CHUNKS` content chunks). A proxy that
    hides itself (passes the server's own ``Server`` header on) is not detected."""
    if not getattr(record, "ok", False) or not getattr(record, "stream", True):
        return None
    if not getattr(record, "proxy", None):
        return None  # straight from the server: a burst is what the server sent (a starved
        #              API server delivers a fast engine's tokens at once), the TTFT is real
    ttft = getattr(record, "ttft", None)
    gaps = list(getattr(record, "itl", None) or ())
    if ttft is None or len(gaps) + 1 < MIN_CHUNKS or not math.isfinite(ttft):
        return None
    spread = math.fsum(g for g in gaps if math.isfinite(g))
    return spread <= BURST_SPREAD_S and ttft >= max(MIN_SILENCE_S, SILENCE_FACTOR * spread)


def judge(records: Iterable[Any]) -> dict[str, Any]:
    """``{"streams", "bursts", "unreliable"}`` of a run: ``unreliable`` is the message when
    at least half of the streams that can tell arrived in one burst, else None."""
    verdicts = [v for v in (is_burst(r) for r in records) if v is not None]
    return verdict(len(verdicts), sum(1 for v in verdicts if v))


def verdict(streams: int, bursts: int) -> dict[str, Any]:
    """:func:`judge` of a run whose ``streams`` that can tell include ``bursts`` bursts
    (:func:`~.stats.summarize` counts them in its one pass over the records)."""
    unreliable = None
    if streams and bursts * 2 >= streams:
        unreliable = (f"{BUFFERED} ({bursts} of {streams} streams arrived in one burst: "
                      f"every chunk within {BURST_SPREAD_S * 1000:g} ms after a silence as "
                      "long as the whole answer); TTFT, ITL and TPOT are not reported. Turn "
                      "buffering off for the event stream (nginx: proxy_buffering off, or the "
                      "X-Accel-Buffering: no header) or measure at the server")
    return {"streams": streams, "bursts": bursts, "unreliable": unreliable}
