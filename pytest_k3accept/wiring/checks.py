"""Checklist wiring: the ``k3_check`` marker and per-test outcomes -> checklist items."""

from __future__ import annotations

from typing import Generator

import pytest

from .. import checklist
from . import settings_of, state_of

ITEMS_KEY = pytest.StashKey[tuple[str, ...]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "k3_check(*items): the checklist items (C1-C12 or a slug such as 'request-set', or a "
        "team item) that this test decides; shown in the report's checklist table")
    config.hook.pytest_k3accept_checklist_items(register=checklist.register_item)


def items_of(item: pytest.Item) -> tuple[str, ...]:
    """Checklist ids a test decides: explicit ``k3_check`` plus those its markers imply."""
    found: list[str] = []
    for mark in item.iter_markers():
        if mark.name == "k3_check":
            for arg in mark.args:
                try:
                    found.append(checklist.normalize(str(arg)))
                except ValueError as exc:
                    raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
        found.extend(checklist.MARKER_ITEMS.get(mark.name, ()))
        for (name, kwarg), implied in checklist.MARKER_KWARG_ITEMS.items():
            if mark.name == name and mark.kwargs.get(kwarg):
                found.extend(implied)
    return tuple(dict.fromkeys(found))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        ids = items_of(item)
        item.stash[ITEMS_KEY] = ids
        if ids:
            item.user_properties.append(("k3_checklist", ",".join(ids)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None],
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    ids = item.stash.get(ITEMS_KEY, ())
    decided = report.when == "call" or (report.when == "setup" and not report.passed)
    if ids and decided:
        outcome = {"passed": checklist.PASS, "failed": checklist.FAIL}.get(
            report.outcome, checklist.SKIP)
        if hasattr(report, "wasxfail"):
            outcome = checklist.SKIP
        message = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2])
        elif report.failed:
            message = report.longreprtext.strip().splitlines()[-1][:500] if (
                report.longreprtext.strip()) else "failed"
        state_of(item.config).checklist.add(ids, item.nodeid, outcome, message)
    if report.when == "call" or not report.passed:
        state_of(item.config).tests.append(
            {"nodeid": item.nodeid, "when": report.when, "outcome": report.outcome,
             "duration": report.duration, "checklist": list(ids)})
    return report


__all__ = ["items_of", "settings_of"]
