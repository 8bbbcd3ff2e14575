"""Production acceptance: the target load (expected input context, concurrent agent sessions,
reuse of the fixed prefix and tool definitions) with its SLOs and headroom, failover headroom
(the load of N replicas on N-1), recovery after a restart (``/health`` returns, the queue
drains), and the verdict:

* stable headroom at the target -> ``keep`` (strengthen monitoring);
* stable only at reduced context/concurrency -> ``accept-limits`` (the contract) or scale;
* repeated OOM at the target, or no failover headroom -> ``scale`` (multi-node / other env);
* weights fail to load on the supported topology -> ``move-environment``.

The target load is the profile's (``--k3-profile``), else the preset's ``[targets]``; SLOs
the profile's ``[slo]``, else the preset's.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_k3accept.suites.support import verdict_problem
from pytest_k3accept.fixtures import settings_of, state_of

pytestmark = pytest.mark.k3_suite("production")


@pytest.mark.k3_check("C9")
@pytest.mark.k3_expect("target", "slo")
@pytest.mark.asyncio
async def test_target_load_slos_and_headroom(k3_load: Any, k3_gpu: Any) -> None:
    """The target load runs within its SLOs with headroom (free KV cache at peak, no
    preemptions, no errors, no lasting queue); GPU memory at peak is recorded where a GPU
    source exists. The markers judge the run after the body."""
    result = await k3_load.run()
    assert result.summary["ok"] > 0, f"no request of the target load succeeded: {result.line()}"


@pytest.mark.k3_check("C10")
@pytest.mark.k3_expect("target", failover=True)
def test_failover_headroom() -> None:
    """Failover headroom: the target load of N replicas carried by N-1 (replicas from the
    --k3-endpoint URLs or ``replicas`` in the profile's [headroom]); the marker runs it."""


@pytest.mark.k3_check("S5")
def test_restart_recovery(request: pytest.FixtureRequest, k3_preset: Any) -> None:
    """After a crash under load and a restart with the same command, ``/health`` returns 200,
    new requests succeed and the queue drains (``--k3-launch`` only: a copy of the launched
    server beside the session's, so a node must have room for it)."""
    from pytest_k3accept.fixtures.server import launch_line
    from pytest_k3accept.suites.restart import run_restart

    s = settings_of(request.config)
    if not s.launch:
        pytest.skip("not run: recovery after a restart needs --k3-launch (the plugin cannot "
                    "restart a server it did not start); with a fixed endpoint, restart it "
                    "yourself and run this suite again")
    sp = k3_preset.suites
    result = run_restart(launch_line(request.config) or s.launch, artifacts=s.artifacts,
                         api_key=s.api_key(),
                         requests=sp.restart_requests,
                         start_timeout=min(s.launch_timeout, sp.restart_timeout),
                         drain_timeout=sp.drain_timeout, timeout=s.timeout)
    state_of(request.config).add("restart-recovery", result.line(), result.as_dict(),
                                 nodeid=request.node.nodeid)
    assert result.ok, "; ".join(result.problems()) + f" (log: {result.log})"


@pytest.mark.k3_check("C11")
def test_verdict(k3_verdict: Any) -> None:
    """The production verdict: keep, or accept the reduced limits as the service contract;
    scale, move-environment and undecided fail here with the reasons and the advice."""
    problem = verdict_problem(k3_verdict)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
