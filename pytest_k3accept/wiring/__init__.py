"""pytest wiring, one module per feature; ``plugin.py`` registers them all.

Each module here is a small pytest plugin (its own fixtures, markers and hooks) that turns
observations from the logic modules into fixtures and test outcomes. Shared helpers below.
"""

from __future__ import annotations

from typing import NoReturn

import pytest

from ..settings import Settings
from ..state import RunState

SETTINGS_KEY = pytest.StashKey[Settings]()
STATE_KEY = pytest.StashKey[RunState]()


def settings_of(config: pytest.Config) -> Settings:
    """The session's validated settings."""
    return config.stash[SETTINGS_KEY]


def state_of(config: pytest.Config) -> RunState:
    """The session's observations."""
    return config.stash[STATE_KEY]


def unavailable(config: pytest.Config, reason: str) -> NoReturn:
    """Skip the test with ``reason``, or fail it (no traceback) under ``--k3-require``."""
    if settings_of(config).require:
        pytest.fail(f"{reason} [--k3-require makes this an error]", pytrace=False)
    pytest.skip(reason)
