"""Streams that stalled while the API server still answered: a frozen engine core.

vLLM runs an API server process and an engine core process. When the engine core freezes
(a hung collective, SIGSTOP, a host swapping) the API server keeps accepting connections and
answers ``/health`` 200 (seen on vLLM 0.32: it does not ask the engine), while every stream
stops getting tokens until the client's silence bound (``timeout``) ends it. After a run
with such timeouts, :func:`annotate` asks ``/health`` once and, when it answers 200, says
so in each stalled request's message, so a frozen engine is not read as a slow one.
"""

from __future__ import annotations

from typing import Any, Sequence

#: the start of the sentence added to a stalled request's message
FROZEN = "the engine stopped producing tokens for"


def stalled(records: Sequence[Any]) -> list[Any]:
    """Requests that got HTTP 200, then timed out waiting for the next chunk."""
    return [r for r in records if r is not None and not r.ok and r.error_kind == "timeout"
            and r.status == 200 and "sent nothing for" in (r.error or "")]


def sentence(silence: float, health: int | None) -> str:
    """The frozen-engine sentence for a silence of ``silence`` s and a /health status."""
    return (f"{FROZEN} {silence:g} s while the API server answered /health {health}: the "
            "engine core is frozen or stalled (a hung collective, a stopped or swapped-out "
            "process), not slow; check the engine core process (state T or D in ps) and "
            "the server log")


async def annotate(client: Any, records: Sequence[Any]) -> int:
    """Probe ``/health`` once if some streams stalled; when it answers 2xx, prefix their
    messages with :func:`sentence`. Returns how many were annotated (never raises)."""
    found = stalled(records)
    http = getattr(client, "http", None)
    if not found or http is None:
        return 0
    try:
        resp = await http.get("/health", timeout=10.0)
        status = int(resp.status_code)
    except Exception:  # noqa: BLE001 - the API server is gone too: not a frozen engine
        return 0
    if not 200 <= status < 300:
        return 0
    silence = float(getattr(client, "timeout", 0.0) or 0.0)

    def mark(r: Any) -> bool:
        if not stalled([r]):
            return False
        r.error = f"{sentence(silence, status)} ({r.error})"
        return True
    if hasattr(records, "update"):  # a RecordStore: spilled records are written back
        return int(records.update(mark))
    return sum(1 for r in found if mark(r))
