"""Recovery after a restart (production suite, ``--k3-launch`` only).

A copy of the launched server (same command, its own loopback port, its own log) is started
beside the session's server, given a burst of requests, killed while they are in flight (a
crash: SIGKILL to its process group, no drain), then started again with the *same* command on
the same port. Measured: how long the restart took, whether ``/health`` returns 200, whether
a new burst succeeds, and how long until ``vllm:num_requests_running`` and
``vllm:num_requests_waiting`` are back to 0 (the queue drained). The session's server under
test is never touched, so its timeline stays its own. No pytest.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SHORT = [{"role": "user", "content": "Count from one to forty in words, separated by commas."}]


@dataclass
class RestartResult:
    """The figures of one crash-and-restart cycle."""

    command: str = ""
    log: str = ""
    first_start_s: float | None = None
    in_flight_at_crash: int = 0
    in_flight_seen_by: str | None = None  # "server gauges" or "client (sent, not answered)"
    lost_at_crash: dict[str, int] = field(default_factory=dict)
    restart_s: float | None = None
    health_status: int | None = None
    after_ok: int = 0
    after_total: int = 0
    drained_s: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Restarted, /health 200, every request after the restart ok, queue drained."""
        return (self.error is None and self.health_status == 200 and self.after_total > 0
                and self.after_ok == self.after_total and self.drained_s is not None)

    def problems(self) -> list[str]:
        """What failed, in words (empty when :attr:`ok`)."""
        out = []
        if self.error:
            out.append(self.error)
        if self.error is None and self.health_status != 200:
            out.append(f"/health answered {self.health_status} after the restart")
        if self.after_total and self.after_ok < self.after_total:
            out.append(f"{self.after_total - self.after_ok} of {self.after_total} requests "
                       "after the restart failed")
        if self.error is None and self.drained_s is None:
            out.append("the queue (running + waiting requests) did not drain to 0")
        return out

    def line(self) -> str:
        """One summary line."""
        def s(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.1f} s"
        seen = f" ({self.in_flight_seen_by})" if self.in_flight_seen_by else ""
        return (f"restart recovery: crash with {self.in_flight_at_crash} requests in flight{seen} "
                f"(lost: {self.lost_at_crash or 'none'}), restart {s(self.restart_s)}, "
                f"/health {self.health_status}, {self.after_ok}/{self.after_total} ok after, "
                f"queue drained in {s(self.drained_s)}")

    def as_dict(self) -> dict[str, Any]:
        """Evidence data (kind ``restart-recovery``)."""
        return {**asdict(self), "ok": self.ok, "problems": self.problems()}


def crash_tokens(max_model_len: int | None) -> int:
    """Output tokens of each request the crash must catch in flight: as many as the context
    leaves after the short prompt (at most 16,384; 1,536 when the context is unknown). At
    ~1 ms a decode step a 2,048-token testbed finished 1,536 tokens before the crash came."""
    if not max_model_len:
        return 1536
    return max(16, min(16384, max_model_len - 128))


#: the crash comes when the server's gauges show the burst, or this many seconds after the
#: burst was sent, whichever is first; a slow /metrics answer never holds it back (on a
#: loaded CI machine one took ~25 s while the burst streamed, and the burst finished before
#: the crash came). The burst must outlast a stalled client too: on the 2-core CI VM the
#: client (and an idle process beside it) froze for 5-26 s at a burst's start while vLLM
#: kept generating, so the testbed preset sends 16 answers of ~8,000 tokens (minutes of
#: work there), not 4.
CRASH_WITHIN = 1.5


def _answer(client: Any, max_tokens: int) -> Any:
    """One streamed answer of exactly ``max_tokens`` tokens (``ignore_eos``)."""
    return client.chat(SHORT, stream=True, max_tokens=max_tokens, ignore_eos=True)


async def _burst(base_url: str, model: str, n: int, api_key: str | None,
                 timeout: float, max_tokens: int) -> list[Any]:
    from ..observe.endpoint.client import K3Client

    async with K3Client(base_url, model, api_key=api_key, timeout=timeout) as client:
        return list(await asyncio.gather(*(_answer(client, max_tokens) for _ in range(n))))


async def _crash_under_burst(base_url: str, model: str, n: int, api_key: str | None,
                             timeout: float, max_tokens: int, headers: dict[str, str],
                             proc: Any, out: "RestartResult") -> list[Any]:
    """Send ``n`` long streamed requests, SIGKILL ``proc`` while they are in flight and
    return their results. ``out.in_flight_at_crash`` is what the server's gauges showed, or,
    when no scrape answered in time, the requests the client had sent and not seen answered."""
    from ..observe.endpoint.client import K3Client

    async with K3Client(base_url, model, api_key=api_key, timeout=timeout) as client:
        burst = [asyncio.ensure_future(_answer(client, max_tokens)) for _ in range(n)]
        end = time.monotonic() + CRASH_WITHIN
        while (left := end - time.monotonic()) > 0 and not all(t.done() for t in burst):
            scrape = asyncio.ensure_future(asyncio.to_thread(_gauges, base_url, headers,
                                                             timeout))
            scrape.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved
            await asyncio.wait({scrape}, timeout=left)
            if scrape.done() and not scrape.cancelled() and scrape.exception() is None:
                running, waiting = scrape.result()
                if running + waiting > 0:
                    out.in_flight_at_crash = int(running + waiting)
                    out.in_flight_seen_by = "server gauges"
                    break
            await asyncio.sleep(max(0.0, min(0.1, end - time.monotonic())))
        if out.in_flight_seen_by is None:
            out.in_flight_at_crash = sum(1 for t in burst if not t.done())
            out.in_flight_seen_by = "client (sent, not answered)"
        await asyncio.to_thread(_crash, proc)  # SIGKILL: no graceful drain
        return list(await asyncio.gather(*burst))


def _crash(proc: Any) -> None:
    """Kill the server's whole process group at once (SIGTERM would let uvicorn drain)."""
    import os
    import signal

    try:
        os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
    except (ProcessLookupError, PermissionError, TypeError):
        pass
    proc.stop(0.0)


def _gauges(base_url: str, headers: dict[str, str], timeout: float) -> tuple[float, float]:
    from ..observe.metrics import MetricsScraper

    with MetricsScraper(base_url, headers=headers, timeout=timeout) as scraper:
        snap = scraper.scrape()
    return snap.running() or 0.0, snap.waiting() or 0.0


def _health(base_url: str, headers: dict[str, str], timeout: float) -> int | None:
    import httpx

    try:
        return httpx.get(f"{base_url}/health", headers=headers, timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def run_restart(launch: str, *, artifacts: Path, api_key: str | None, requests: int,
                start_timeout: float, drain_timeout: float, timeout: float = 30.0,
                ) -> RestartResult:
    """Start a copy of ``launch``, crash it under a burst, restart it, measure recovery.
    Every process it starts is stopped before it returns."""
    from ..observe.endpoint.auth import auth_headers
    from ..observe.endpoint.discover import EndpointError, discover
    from ..observe.metrics import MetricsUnavailable
    from ..output.redact import Redactor
    from ..observe.server.relaunch import Relauncher
    from ..observe.server.launch import LaunchError, ServerProcess

    relauncher = Relauncher(launch, artifacts=artifacts, timeout=start_timeout)
    plan = relauncher.plan([])
    env = None
    if relauncher.testbed:
        from .. import testbed

        env = testbed.server_env()
    artifacts.mkdir(parents=True, exist_ok=True)
    log = artifacts / f"server-restart-{time.strftime('%Y%m%d-%H%M%S')}.log"
    out = RestartResult(command=Redactor().command(plan.command), log=str(log))
    headers = auth_headers(api_key)
    first, second = ServerProcess(), ServerProcess()
    phase = "first start"
    try:
        t0 = time.monotonic()
        first.start(plan.command, env=env, log_path=log)
        first.wait_ready(plan.base_url, start_timeout)
        out.first_start_s = time.monotonic() - t0
        found = discover(plan.base_url, api_key=api_key, timeout=timeout)
        model, tokens = found.model, crash_tokens(found.max_model_len)

        # answers as long as the context allows (ignore_eos): the crash finds them in flight
        # even on a fast machine
        lost = asyncio.run(_crash_under_burst(plan.base_url, model, requests, api_key, timeout,
                                              tokens, headers, first, out))
        for res in lost:
            if not res.ok:
                kind = res.error_kind or "error"
                out.lost_at_crash[kind] = out.lost_at_crash.get(kind, 0) + 1
        phase, t1 = "restart", time.monotonic()
        second.start(plan.command, env=env, log_path=log)
        second.wait_ready(plan.base_url, start_timeout)
        out.restart_s = time.monotonic() - t1
        out.health_status = _health(plan.base_url, headers, timeout)
        after = asyncio.run(_burst(plan.base_url, model, requests, api_key, timeout, 16))
        out.after_total, out.after_ok = len(after), sum(1 for r in after if r.ok)
        t2 = time.monotonic()
        while time.monotonic() - t2 < drain_timeout:
            if sum(_gauges(plan.base_url, headers, timeout)) == 0:
                out.drained_s = time.monotonic() - t2
                break
            time.sleep(0.5)
    except (LaunchError, EndpointError) as exc:
        out.error = f"the server copy did not come up ({phase}): {str(exc).splitlines()[0]}"
    except MetricsUnavailable as exc:
        out.error = f"the restarted server's queue could not be read: {exc}"
    finally:
        first.stop()
        second.stop()
    return out
