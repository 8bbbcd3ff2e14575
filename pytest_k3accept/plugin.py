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


@pytest.hookimpl(trylast=True, specname="pytest_configure")
def pytest_configure_last(config: pytest.Config) -> None:
    exc = config.stash.get(_BAD_OPTION_KEY, None)
    if exc is not None:
        raise exc
