"""What ``--k3-launch`` means: the command to run and the URL it will serve on."""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchPlan:
    """A server to start: shell command, base URL, whether it is the embedded testbed."""

    command: str
    base_url: str
    testbed: bool = False


def url_from_command(command: str) -> str:
    """``http://HOST:PORT`` from a vLLM command's ``--host``/``--port`` (vLLM's defaults:
    all interfaces and port 8000, reached through 127.0.0.1)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    host, port = "127.0.0.1", "8000"
    for i, word in enumerate(words):
        for flag in ("--host", "--port"):
            value = None
            if word == flag and i + 1 < len(words):
                value = words[i + 1]
            elif word.startswith(flag + "="):
                value = word.split("=", 1)[1]
            if value is None:
                continue
            if flag == "--port":
                port = value
            elif value not in ("0.0.0.0", "::", ""):
                host = value
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def plan(launch: str, endpoint: str | None, *, testbed_port: int | None = None,
         testbed_args: tuple[str, ...] = ()) -> LaunchPlan:
    """Turn ``--k3-launch`` (and ``--k3-endpoint`` if given) into a :class:`LaunchPlan`.

    ``testbed`` (optionally followed by extra vLLM arguments, e.g. ``testbed
    --no-enable-prefix-caching``) starts the embedded CPU testbed on a free loopback port.
    """
    words = launch.strip().split(None, 1)
    if words and words[0] == "testbed":
        from ... import testbed
        from .launch import free_port

        port = testbed_port or free_port()
        extra = tuple(shlex.split(words[1])) if len(words) > 1 else ()
        cmd = testbed.testbed_launch_command(port, extra_args=extra + testbed_args)
        return LaunchPlan(cmd, f"http://127.0.0.1:{port}", testbed=True)
    return LaunchPlan(launch, endpoint or url_from_command(launch))
