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

@pytest.hookspec(historic=True)
def pytest_k3accept_checklist_items(register: Callable[[str, str, str], None]) -> None:
    """Register custom checklist items: ``register(id, slug, text)``.

    A historic hook: called at configure time for the plugins known then, and again for
    each ``conftest.py`` or plugin registered later (during collection). The items belong
    to this session; they appear in the report's checklist table after C1-C12 and can be
    named in ``@pytest.mark.k3_check("T1")``.
    """


@pytest.hookspec
def pytest_k3accept_record(record: dict[str, Any]) -> None:
    """Inspect or extend the reproduction record just before it is written.

    Values added must be JSON-serializable; secrets are redacted after this hook runs.
    """
