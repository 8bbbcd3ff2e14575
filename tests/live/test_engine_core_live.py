"""The engine core frozen or killed while the API server lives, on a real vLLM 0.32 server:
the ``VLLM::EngineCore`` child of the server process is signalled (SIGSTOP / SIGCONT with its
own ``VLLM::Worker`` children, each seen stopped before the test goes on), never the API
server.

Seen here (and asserted): under SIGSTOP the API server keeps answering ``/health`` 200 and
streams stop getting tokens until the client's silence bound ends them as ``timeout``;
SIGCONT brings them back; under SIGKILL the streams end at once with "EngineCore encountered
an issue" (an error event after HTTP 200), ``/health`` answers 503, the API server exits
within seconds (status 0), and the log holds only the API server's ``EngineDeadError``:
classified ``killed``, "engine core killed", after the first response. One server, tests
in order (the last kills it). Bounds are minutes: this VM can freeze a process for 25 s.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any, Iterator

import httpx
import pytest

from engine_signals import signal_engine as _signal, state as _state, tree as _tree

from pytest_k3accept.observe.endpoint.client import K3Client
from pytest_k3accept.observe.endpoint.discover import discover
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.runner import run_load
from pytest_k3accept.observe.load.stall import FROZEN
from pytest_k3accept.observe.server import enginecore
from pytest_k3accept.observe.server.classify import classify

pytestmark = [pytest.mark.live]

LONG = LoadProfile(name="long-streams", context_tokens=64, output_tokens=6000,
                   concurrency=3, requests=3, max_seconds=600)


@pytest.fixture(scope="module")
def server(testbed_factory: Any) -> Iterator[Any]:
    srv = testbed_factory(max_model_len=8192, timeout=900)  # a loaded VM starts slowly
    yield srv
    for engine in enginecore.find(srv.process.pid):
        for pid in _tree(engine):
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
    srv.process.stop()


def _engine(server: Any) -> int:
    found = enginecore.find(server.process.pid)
    assert len(found) == 1, f"no single EngineCore child of {server.process.pid}: {found}"
    return found[0]


def _health(server: Any) -> int | str:
    try:
        return httpx.get(server.base_url + "/health", timeout=10).status_code
    except httpx.HTTPError as exc:
        return type(exc).__name__


async def _run_with(server: Any, profile: LoadProfile, silence: float,
                    *signals: tuple[float, int]) -> Any:
    """Run ``profile`` with a client whose silence bound is ``silence`` s, sending each
    signal to the engine core ``delay`` s after the previous one (and /health 1 s later):
    the result, the /health answers and the process states seen after each signal."""
    ep = discover(server.base_url, timeout=60)
    engine = _engine(server)
    client = K3Client(ep.base_url, ep.model, timeout=silence)
    task = asyncio.create_task(run_load(client, None, profile, metrics=False))
    seen: list[Any] = []
    states: list[dict[int, str]] = []
    for delay, sig in signals:
        await asyncio.sleep(delay)
        states.append(await asyncio.to_thread(_signal, engine, sig))
        await asyncio.sleep(1)
        seen.append(await asyncio.to_thread(_health, server))
    try:
        return await task, seen, states
    finally:
        await client.aclose()


def test_a_frozen_engine_core_ends_streams_at_the_silence_bound(server: Any) -> None:
    t0 = time.monotonic()
    res, health, states = asyncio.run(_run_with(server, LONG, 20, (3, signal.SIGSTOP)))
    took = time.monotonic() - t0
    after = {pid: _state(pid) for pid in states[0]}
    _signal(_engine(server), signal.SIGCONT)
    assert set(states[0].values()) <= {"T", "t"}, states  # the premise: the engine is frozen
    assert health == [200]  # the API server answers while its engine is stopped
    assert res.summary["errors_by_kind"]["timeout"] == LONG.requests, (
        res.line(), f"engine states after SIGSTOP {states[0]}, at the run's end {after}")
    for r in res.records:
        assert r.error.startswith(f"{FROZEN} 20 s while the API server answered /health 200: "
                                  "the engine core is frozen or stalled"), r.error
        assert "after HTTP 200" in r.error and r.chunks > 0  # partial output kept
    assert took < 5 * 60  # bounded: the silence bound, not the 6000-token generation


def test_sigcont_mid_run_is_recovered_from(server: Any) -> None:
    profile = LONG.replace("test", output_tokens=200)
    res, health, _ = asyncio.run(_run_with(server, profile, 120, (2, signal.SIGSTOP),
                                        (3, signal.SIGCONT)))
    assert health[0] == 200
    assert res.summary["ok"] == profile.requests, res.line()
    assert res.completion_tokens == 200 * profile.requests


def test_a_killed_engine_core_is_an_engine_death_with_its_phase(server: Any) -> None:
    profile = LONG
    t0 = time.monotonic()
    res, health, _ = asyncio.run(_run_with(server, profile, 60, (3, signal.SIGKILL)))
    assert time.monotonic() - t0 < 5 * 60
    assert health[0] in (503, "ConnectError"), health  # 503 while it lives, then gone
    assert res.summary["errors_by_kind"]["http-5xx"] == profile.requests, res.line()
    assert all("EngineCore encountered an issue" in (r.error or "") for r in res.records)
    deadline = time.monotonic() + 120
    while server.process.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    code = server.process.proc.poll()
    assert code is not None, "the API server outlived its engine core by 2 minutes"
    cls = classify(server.log_text(), exit_code=code)
    assert cls.category == "killed" and cls.rule == "engine-core-killed", cls.summary()
    assert "engine core killed" in cls.summary()
    assert cls.stage == "serving" and "after the first successful response" in cls.phase
    # the consequence quoted: the API server's client seeing its engine core gone (a death
    # line since round 23; 0.28 and 0.32 both log it before the requests' EngineDeadError)
    assert "engine core exited unexpectedly" in cls.evidence[1].text
