"""Server wiring: ``k3_server``, the server the plugin launched (``--k3-launch``)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from ..server.command import LaunchPlan, plan
from . import settings_of, state_of, unavailable


@dataclass
class LaunchedServer:
    """A server started by the plugin: plan, process, log file and readiness."""

    plan: LaunchPlan
    log_path: Path
    process: object
    started_at: float
    ready_at: float | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.plan.base_url


def _log_path(artifacts: Path) -> Path:
    artifacts.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return artifacts / f"server-{stamp}.log"


def start(config: pytest.Config) -> LaunchedServer:
    """Start the server of ``--k3-launch`` and wait for it; never raises for its failures."""
    from ..server.launch import LaunchError, ServerProcess

    s = settings_of(config)
    assert s.launch
    launch_plan = plan(s.launch, s.endpoint)
    env = None
    if launch_plan.testbed:
        from .. import testbed

        reason = testbed.unavailable_reason()
        if reason:
            unavailable(config, f"--k3-launch testbed: {reason}")
        testbed.build_model("tiny")
        env = testbed.server_env()
    proc = ServerProcess()
    server = LaunchedServer(launch_plan, _log_path(s.artifacts), proc, time.time())
    try:
        proc.start(launch_plan.command, env=env, log_path=server.log_path)
        server.started_at = proc.started_at
        server.ready_at = proc.wait_ready(launch_plan.base_url, s.launch_timeout)
    except LaunchError as exc:
        server.error = str(exc)
    return server


@pytest.fixture(scope="session")
def k3_server(request: pytest.FixtureRequest) -> Iterator[LaunchedServer]:
    """The server started by ``--k3-launch`` (session scope), stopped at the end.

    ``--k3-launch testbed`` starts the embedded CPU vLLM testbed; any other value is a shell
    command (its URL is ``--k3-endpoint``, or ``--host``/``--port`` of the command). The
    server's output goes to a log file under ``--k3-artifacts``. Without ``--k3-launch``
    tests that use this fixture are skipped (failed under ``--k3-require``).
    """
    config = request.config
    s = settings_of(config)
    if not s.launch:
        unavailable(config, "no server launched by the plugin: pass --k3-launch 'COMMAND' "
                            "(or --k3-launch testbed)")
    server = start(config)
    state_of(config).add("launch", f"launched {redact_command(server.plan.command)}",
                         {"log": str(server.log_path), "base_url": server.base_url,
                          "error": server.error})
    try:
        if server.error:
            unavailable(config, f"the launched server did not become ready: {server.error} "
                                f"(log: {server.log_path})")
        yield server
    finally:
        server.process.stop()  # type: ignore[attr-defined]


_SECRET_ARG = re.compile(r"(--[\w-]*(?:key|token|secret|password)[\w-]*[= ])(\S+)", re.I)


def redact_command(command: str) -> str:
    """Hide values of secret-looking arguments (``--api-key X`` -> ``--api-key ***``)."""
    return _SECRET_ARG.sub(r"\1***", command)
