"""pytest wiring, one module per feature; ``plugin.py`` registers them all.

Each module here is a small pytest plugin (its own fixtures, markers and hooks) that turns
observations from the logic modules into fixtures and test outcomes. Shared helpers below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, NoReturn, TypeVar

import pytest

from ..settings import Settings
from ..state import RunState

if TYPE_CHECKING:  # pragma: no cover
    from ..procedure import DecisionProfile

SETTINGS_KEY = pytest.StashKey[Settings]()
STATE_KEY = pytest.StashKey[RunState]()
PROFILE_KEY = pytest.StashKey["DecisionProfile"]()
T = TypeVar("T")


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


def profile_of(config: pytest.Config) -> "DecisionProfile":
    """The session's ``--k3-profile`` file, read whole once (load values, ``[layers]``,
    ``[procedure]``, ``audience``); the defaults without one. A bad file is a usage error."""
    found = config.stash.get(PROFILE_KEY, None)
    if found is None:
        from ..procedure import ProcedureError, read_profile

        try:
            found = read_profile(settings_of(config).profile)
        except ProcedureError as exc:
            raise pytest.UsageError(f"--k3-profile: {exc}") from None
        config.stash[PROFILE_KEY] = found
    return found


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a private event loop in a worker thread (safe inside any test,
    also one that already runs an event loop)."""
    import asyncio
    import concurrent.futures

    async def main() -> T:
        return await make()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="k3accept") as pool:
        return pool.submit(asyncio.run, main()).result()


def progress_printer(config: pytest.Config, tag: str) -> Callable[[Any], None] | None:
    """A printer of progress lines (``[tag] line``) to the terminal, past output capture;
    None when quiet (``-q``) or without a terminal."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None or config.get_verbosity() < 0:
        return None
    capman = config.pluginmanager.get_plugin("capturemanager")

    def show(p: Any) -> None:
        if capman is None:
            terminal.write_line(f"[{tag}] {p.line()}")
            return
        with capman.global_and_fixture_disabled():
            terminal.write_line(f"[{tag}] {p.line()}")
    return show
