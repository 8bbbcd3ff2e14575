"""Start variants of the ``--k3-launch`` server with changed vLLM flags, one at a time.

The prefix-cache A/B and the re-measurement procedure need the launched server with one
flag changed (``--no-enable-prefix-caching``, ``--prefix-cache-retention-interval N``).
A variant runs *beside* the session's server, on a free loopback port, and is stopped when
its ``with`` block ends (also on errors); the server under test is never touched, so its
timeline and classification stay its own.

* ``--k3-launch testbed``: the testbed command with the extra flags appended.
* ``--k3-launch "COMMAND"``: the command with its ``--port`` replaced by a free port (or one
  appended) and the extra flags appended (vLLM takes the last value of a repeated flag).
  A node with room for one instance only cannot run a variant beside it: the variant then
  fails to start, and the step that needed it says so with the variant's own log line.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from .command import LaunchPlan, plan


@dataclass
class Variant:
    """A relaunched server: URL, flags, log, process, and why it is not ready (if so)."""

    label: str
    args: tuple[str, ...]
    plan: LaunchPlan
    log_path: Path
    process: Any
    ready: bool = False
    error: str | None = None
    startup_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.plan.base_url

    def log_tail(self, lines: int = 30) -> str:
        """The variant's last log lines (for a failure message)."""
        tail = getattr(self.process, "log_tail", None)
        return str(tail(lines)) if callable(tail) else ""

    def log_text(self) -> str:
        """The variant's whole log ("" when it cannot be read)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def failure(self) -> dict[str, Any] | None:
        """Classification of a variant that did not become ready (category, quoted lines)."""
        if self.ready:
            return None
        from .classify import classify

        return classify(self.log_text(),
                        exit_code=getattr(self.process, "returncode", None)).as_dict()

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the step log (the command redacted)."""
        from ...output.redact import Redactor

        return {"label": self.label, "args": list(self.args), "base_url": self.base_url,
                "command": Redactor().command(self.plan.command), "log": str(self.log_path),
                "ready": self.ready, "error": self.error, "startup_s": self.startup_s,
                "notes": list(self.notes)}


_PORT = re.compile(r"(--port)(=|\s+)(\S+)")


def with_port(command: str, port: int) -> str:
    """``command`` serving on ``port``: its ``--port`` value replaced, or ``--port`` added."""
    if _PORT.search(command):
        return _PORT.sub(lambda m: f"{m.group(1)}{m.group(2)}{port}", command, count=1)
    return f"{command} --port {port}"


class Relauncher:
    """Starts variants of one ``--k3-launch`` value beside the session's server."""

    def __init__(self, launch: str, *, artifacts: Path, timeout: float) -> None:
        self.launch = launch
        self.artifacts = Path(artifacts)
        self.timeout = timeout

    @property
    def testbed(self) -> bool:
        """True for ``--k3-launch testbed``."""
        return self.launch.strip().split(None, 1)[0] == "testbed"

    def plan(self, args: Sequence[str]) -> LaunchPlan:
        """The launch plan of a variant with ``args`` appended, on a free port."""
        from .launch import free_port

        if self.testbed:
            return plan(self.launch, None, testbed_args=tuple(args))
        command = with_port(self.launch, free_port())
        return plan(f"{command} {shlex.join(args)}" if args else command, None)

    def start(self, args: Sequence[str], label: str) -> Variant:
        """Start one variant and wait for it; its failure is in ``error``, never raised."""
        from .launch import LaunchError, ServerProcess

        env = None
        if self.testbed:
            from ... import testbed

            env = testbed.server_env()
        self.artifacts.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log = self.artifacts / f"server-{label}-{stamp}-{time.time_ns() % 10**6}.log"
        proc = ServerProcess()
        t0 = time.monotonic()
        try:
            var = Variant(label, tuple(args), self.plan(args), log, proc)
        except Exception as exc:  # e.g. the testbed model cannot be built
            return Variant(label, tuple(args), LaunchPlan("", ""), log, proc,
                           error=f"cannot prepare the variant command: {exc}")
        try:
            proc.start(var.plan.command, env=env, log_path=log)
            proc.wait_ready(var.base_url, self.timeout)
            var.ready = True
            var.startup_s = time.monotonic() - t0
        except LaunchError as exc:
            var.error = str(exc)
        return var

    @contextlib.contextmanager
    def variant(self, args: Sequence[str], label: str) -> Iterator[Variant]:
        """``with relauncher.variant(["--no-enable-prefix-caching"], "cache-off") as v:``
        the variant runs inside the block and is stopped after it (check ``v.ready``)."""
        var = self.start(args, label)
        try:
            yield var
        finally:
            var.process.stop()
