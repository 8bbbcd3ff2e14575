"""pytest entry point of pytest-k3accept: options, hookspecs and the feature wiring.

Registered through ``[project.entry-points.pytest11] k3accept``; disable with
``-p no:k3accept``. Importing this module is cheap: it opens no socket and loads no NVML;
fixtures do their work only when a test asks for them.
"""

from __future__ import annotations

import importlib
import sys
import types

import pytest

from .config import settings as _settings
from .evidence.store import RunState
from .fixtures import SETTINGS_KEY, STATE_KEY

#: the usage error of a bad ``--k3-*`` value, raised once the wiring is configured
_BAD_OPTION_KEY = pytest.StashKey[pytest.UsageError]()

#: feature wiring modules, each a small pytest plugin of its own
WIRING: tuple[str, ...] = (
    "pytest_k3accept.fixtures.checks",
    "pytest_k3accept.fixtures.endpoint",
    "pytest_k3accept.fixtures.server",
    "pytest_k3accept.fixtures.load",
    "pytest_k3accept.fixtures.host",
    "pytest_k3accept.fixtures.decide",
    "pytest_k3accept.fixtures.baseline",
    "pytest_k3accept.fixtures.robustness",
    "pytest_k3accept.fixtures.report",
    "pytest_k3accept.fixtures.summary",
    "pytest_k3accept.fixtures.suites",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    _settings.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs as hooks

    pluginmanager.add_hookspecs(hooks)
    if pluginmanager.get_name(sys.modules[__name__]) != "k3accept" and not (
            pluginmanager.has_plugin("k3accept")):
        # loaded with ``-p pytest_k3accept.plugin``: hold the entry point's name so that
        # the installed entry point does not register this module a second time
        pluginmanager.register(types.SimpleNamespace(), "k3accept")
    for name in WIRING:
        if pluginmanager.get_plugin(name) is None:
            pluginmanager.register(importlib.import_module(name), name)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    worker = getattr(config, "workerinput", {}).get("workerid")
    try:
        settings = _settings.from_config(config)
    except pytest.UsageError as exc:
        # a bad --k3-* value stops the run (exit code 4), but only once the other wiring is
        # configured (pytest_configure_last): the settings that say where the record,
        # report and summary go are built with the bad value at its default, so the message
        # reaches them like any other usage error
        settings = _settings.from_config(config, lenient=True)
        config.stash[_BAD_OPTION_KEY] = exc
    config.stash[SETTINGS_KEY] = settings
    config.stash[STATE_KEY] = RunState(run_prefix=f"{worker}-" if worker else "")


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> object:
    """A usage error reaches the terminal (pytest prints it as ``ERROR: ...``) with secrets
    redacted, as everything else the plugin writes: a key pasted into an option, a URL with
    credentials or a token in its query, a request-set value quoted back."""
    try:
        return (yield)
    except pytest.UsageError as exc:
        from .fixtures.report import REDACTOR_KEY
        from .output.redact import Redactor

        pair = config.stash.get(REDACTOR_KEY, None)
        red = pair[0] if pair else Redactor.from_settings(config.stash.get(SETTINGS_KEY, None))
        clean = red.text(str(exc))
        if clean == str(exc):
            raise
        raise pytest.UsageError(clean) from None


@pytest.hookimpl(trylast=True, specname="pytest_configure")
def pytest_configure_last(config: pytest.Config) -> None:
    exc = config.stash.get(_BAD_OPTION_KEY, None)
    if exc is not None:
        raise exc
    _term_as_interrupt(config)


def _term_as_interrupt(config: pytest.Config) -> None:
    """SIGTERM (a CI runner cancelling the job, ``timeout``) ends the session as Ctrl-C does:
    pytest finishes it, so the record, the report and the redacted server log are written
    and the launched server is stopped, instead of the process dying with its results (and a
    server log not yet redacted). Only where SIGTERM still has its default action (a handler
    someone installed is left alone), only in the main thread, once: a second SIGTERM kills
    as before."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt("SIGTERM")

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) is interrupt:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    signal.signal(signal.SIGTERM, interrupt)
    config.add_cleanup(restore)
