"""Hook specifications for teams that extend the checklist or the record.

Implement them in a ``conftest.py`` (or a plugin)::

    def pytest_k3accept_checklist_items(register):
        register("T1", "tool-schema", "our tool definitions validate against the schema")

    def pytest_k3accept_record(record):
        record["team"] = {"owner": "search-agents"}
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

hookspec = pytest.hookspec if hasattr(pytest, "hookspec") else None  # pragma: no cover


def pytest_k3accept_checklist_items(register: Callable[[str, str, str], None]) -> None:
    """Register custom checklist items: ``register(id, slug, text)``.

    Called once at configure time; the items appear in the report's checklist table after
    C1-C12 and can be named in ``@pytest.mark.k3_check("T1")``.
    """


def pytest_k3accept_record(record: dict[str, Any]) -> None:
    """Inspect or extend the reproduction record just before it is written.

    Values added must be JSON-serializable; secrets are redacted after this hook runs.
    """
