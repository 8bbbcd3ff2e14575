"""Server wiring: ``k3_server``, the ``k3_startup`` marker, the timeline in the terminal summary.

Two observation modes: ``--k3-launch "COMMAND"`` (the plugin starts the server, captures its
output under ``--k3-artifacts``, waits for readiness, stops it and its children at the end)
and ``--k3-server-log PATH`` (an externally started server's log, read as it grows). With
both, the plugin launches the command and reads PATH as the server's log.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator

import pytest

from ..server.classify import Classification
from ..server.command import plan
from ..server.logread import redact
from ..server.observe import HttpRecord, ServerWatch, probe_first_response
from . import settings_of, state_of, unavailable

if TYPE_CHECKING:  # pragma: no cover
    from ..client import K3Client, RequestResult

WATCH_KEY = pytest.StashKey[ServerWatch]()
HTTP_KEY = pytest.StashKey[HttpRecord]()
NO_SERVER = ("no server observed: pass --k3-launch 'COMMAND' (or --k3-launch testbed) to let "
             "the plugin start one, or --k3-server-log PATH to read an external server's log")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "k3_startup(max_init_s=None): check that engine init completed and was recorded as its "
        "own event before (and separately from) the first successful response, optionally "
        "within max_init_s seconds of process start; needs --k3-launch or --k3-server-log")


def http_record(config: pytest.Config) -> HttpRecord:
    """The session's record of what the plugin's client saw."""
    if HTTP_KEY not in config.stash:
        config.stash[HTTP_KEY] = HttpRecord()
    return config.stash[HTTP_KEY]


def current_watch(config: pytest.Config) -> ServerWatch | None:
    """The observed server, if one was started or its log opened."""
    return config.stash.get(WATCH_KEY, None)


def _log_path(artifacts: Path) -> Path:
    artifacts.mkdir(parents=True, exist_ok=True)
    return artifacts / f"server-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6}.log"


def _record(config: pytest.Config, watch: ServerWatch, cls: Classification,
            nodeid: str = "", when: str = "") -> None:
    state = state_of(config)
    data = watch.timeline_data()
    missing = ", ".join(data["missing"]) or "none"
    state.add("timeline", f"server timeline ({watch.mode}); missing: {missing}",
              {**data, "when": when}, nodeid=nodeid)
    state.add("classification", f"server life classified as {cls.summary()}",
              {**cls.as_dict(), "mode": watch.mode, "log": str(watch.log_path), "when": when},
              nodeid=nodeid)


def observe(config: pytest.Config) -> ServerWatch:
    """The session's observed server, started or opened on first use (never raises for the
    server's own failures: they are in ``watch.error`` and recorded as evidence)."""
    watch = current_watch(config)
    if watch is not None:
        return watch
    s = settings_of(config)
    if not s.launch:
        if not s.server_log:
            unavailable(config, NO_SERVER)
        watch = ServerWatch(s.server_log, mode="log", http=http_record(config),
                            base_url=s.endpoint)
        config.stash[WATCH_KEY] = watch.start()
        watch.refresh()
        return watch
    return _launch(config)


def _launch(config: pytest.Config) -> ServerWatch:
    from ..server.launch import LaunchError, ServerProcess

    s = settings_of(config)
    assert s.launch
    env = None
    if (s.launch.split() or [""])[0] == "testbed":
        from .. import testbed

        reason = testbed.unavailable_reason()
        if reason:
            unavailable(config, f"--k3-launch testbed: {reason}")
        env = testbed.server_env()
    try:
        launch_plan = plan(s.launch, s.endpoint)
    except Exception as exc:  # e.g. the testbed model cannot be built
        unavailable(config, f"--k3-launch {s.launch!r}: cannot prepare the command: {exc}")
    captured = _log_path(s.artifacts)
    log = s.server_log or captured
    offset = log.stat().st_size if log.is_file() else 0
    proc = ServerProcess()
    watch = ServerWatch(log, mode="launch", offset=offset, http=http_record(config),
                        process=proc, base_url=launch_plan.base_url,
                        command=redact_command(launch_plan.command))
    config.stash[WATCH_KEY] = watch
    state_of(config).add("launch", f"launched {watch.command}",
                         {"log": str(log), "output": str(captured),
                          "base_url": launch_plan.base_url})
    try:
        proc.start(launch_plan.command, env=env, log_path=captured)
        watch.start(proc.started_at)
        watch.ready_at = proc.wait_ready(launch_plan.base_url, s.launch_timeout)
        watch.http.ready = True
    except LaunchError as exc:
        watch.error = str(exc)
        watch.http.ready = False
        cls = watch.stop()  # keeps its own exit code; stops what a timeout left running
        _record(config, watch, cls, when="launch failed")  # before any test is skipped/failed
    return watch


@pytest.fixture(scope="session")
def k3_server(request: pytest.FixtureRequest) -> ServerWatch:
    """The observed server (session scope): ``--k3-launch`` starts it, ``--k3-server-log``
    follows an external server's log.

    ``k3_server.timeline`` holds the startup events (``.events``, ``.missing()``,
    ``.init_seconds()``, ``.as_dict()``); ``k3_server.classify()`` returns the
    :class:`~pytest_k3accept.server.classify.Classification` of the server's life so far
    (category, phase, quoted evidence, advice); ``log_path``, ``base_url``, ``mode``. A
    launched server that failed to start is classified and recorded first, then the test is
    skipped (failed under ``--k3-require``) with the category and the evidence line. Without
    either option tests that use this fixture are skipped with the reason.
    """
    config = request.config
    watch = observe(config)
    if watch.error:
        unavailable(config, watch.failure_message(watch.classify()))
    return watch


def record_first_response(config: pytest.Config, at: float | None = None,
                          detail: str = "") -> None:
    """Tell the timeline that the plugin's client got a successful response (first one wins)."""
    at = time.time() if at is None else at
    rec = http_record(config)
    if rec.first_success_at is None or at < rec.first_success_at:
        rec.first_success_at, rec.first_success_detail = at, detail
    watch = current_watch(config)
    if watch is not None:
        watch.record_first_response(at, detail)


def watch_client(config: pytest.Config, client: K3Client) -> K3Client:
    """Make ``client`` report its first success, 5xx answers (then ``/health``) and refusals."""
    inner = client.request

    async def request(path: str, body: dict[str, Any], *, stream: bool = False,
                      ) -> RequestResult:
        res = await inner(path, body, stream=stream)
        rec = http_record(config)
        if res.ok:
            record_first_response(config, time.time(),
                                  f"POST {path}{' (stream)' if stream else ''} HTTP {res.status}")
        elif res.error_kind == "http-5xx":
            if len(rec.server_errors) < 20:
                rec.server_errors.append(f"{res.status} from POST {path}: {res.error}")
            if len(rec.server_errors) == 1:  # once: does the server still call itself healthy?
                try:
                    rec.health_status = (await client.http.get("/health", timeout=2.0)
                                         ).status_code
                except Exception as exc:  # the server may be gone already
                    rec.connection_errors.append(f"GET /health: {type(exc).__name__}")
        elif res.error_kind == "connection" and len(rec.connection_errors) < 20:
            rec.connection_errors.append(f"POST {path}: {res.error}")
        return res

    setattr(client, "request", request)
    return client


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    mark = item.get_closest_marker("k3_startup")
    if mark is None:
        yield
        return
    config = item.config
    watch = observe(config)
    if watch.error:
        cls = watch.classify()
        _record(config, watch, cls, item.nodeid, "k3_startup")
        pytest.fail(f"server startup failed: {watch.failure_message(cls)}", pytrace=False)
    yield
    _check_startup(item, watch, mark.kwargs.get("max_init_s", mark.args[0] if mark.args else None))


def _check_startup(item: pytest.Item, watch: ServerWatch, max_init_s: float | None) -> None:
    config = item.config
    s = settings_of(config)
    tl = watch.timeline
    if not tl.has("first_response"):
        base_url = watch.base_url or s.endpoint
        if base_url is None:
            watch.refresh()
            if not tl.has("first_response") and not watch.classify().failed:
                unavailable(config, "k3_startup: no successful response was observed and there is "
                                    "no endpoint to ask: pass --k3-endpoint URL or make a request "
                                    "in the test (k3_client)")
        else:
            from ..endpoint import discover

            try:
                model = s.model or discover(base_url, api_key=s.api_key(), timeout=s.timeout).model
                ok, at, detail = probe_first_response(base_url, model, api_key=s.api_key(),
                                                      timeout=s.timeout)
            except Exception as exc:  # EndpointError, or whatever a dead server makes of it
                ok, at, detail = False, time.time(), f"{type(exc).__name__}: {exc}"
            if ok:
                record_first_response(config, at, detail)
            else:
                (watch.http.server_errors if detail[:3].isdigit()
                 else watch.http.connection_errors).append(f"k3_startup probe: {detail}")
                time.sleep(1.0)  # let the engine's last words reach the log
    watch.refresh()
    cls = watch.classify()
    _record(config, watch, cls, item.nodeid, "k3_startup")
    problems = []
    if not tl.has("engine_init_done"):
        problems.append("engine init completion ('init engine ... took') is not in the log")
    if not tl.has("first_response"):
        problems.append(f"no successful response after startup ({cls.summary()})")
    elif tl.has("engine_init_done") and tl.init_before_first_response() is False:
        problems.append("the first response came before engine init completed: a response "
                        "before init proves nothing about capacity")
    elif tl.has("engine_init_done") and tl.init_before_first_response() is None:
        problems.append("cannot order init and first response: one of them has no time")
    if max_init_s is not None and tl.has("engine_init_done"):
        took = tl.init_seconds()
        if took is None:
            problems.append(f"cannot check max_init_s={max_init_s}: process start time unknown")
        elif took > float(max_init_s):
            problems.append(f"engine init completed {took:.1f} s after process start, more "
                            f"than max_init_s={max_init_s}")
    if problems:
        pytest.fail("k3_startup: " + "; ".join(problems) + f" (log: {watch.log_path})",
                    pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    watch = current_watch(config)
    s = settings_of(config)
    if watch is None and s.server_log and not s.launch:
        watch = ServerWatch(s.server_log, mode="log", http=http_record(config),
                            base_url=s.endpoint).start()
        config.stash[WATCH_KEY] = watch
    if watch is not None and watch.final is None:
        _record(config, watch, watch.stop(), when="session end")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    watch = current_watch(config)
    if watch is None:
        return
    terminalreporter.write_sep("-", "k3accept server timeline")
    for line in watch.render():
        terminalreporter.write_line(line)


def redact_command(command: str) -> str:
    """Hide values of secret-looking arguments (``--api-key X`` -> ``--api-key ***``)."""
    return redact(command)
