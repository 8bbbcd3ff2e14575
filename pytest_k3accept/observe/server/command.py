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


def testbed_words(words: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """Split the words after ``testbed`` into the model variant (``--variant NAME`` or
    ``--variant=NAME``, default ``tiny``) and the vLLM arguments; ValueError for a missing or
    unknown variant, naming the valid ones."""
    from ...testbed import VARIANTS

    variant, rest, i = "tiny", [], 0
    while i < len(words):
        word = words[i]
        if word == "--variant" or word.startswith("--variant="):
            if word == "--variant":
                if i + 1 >= len(words):
                    raise ValueError("--k3-launch testbed --variant: give a model variant "
                                     f"({', '.join(VARIANTS)})")
                value, i = words[i + 1], i + 2
            else:
                value, i = word.split("=", 1)[1], i + 1
            if value not in VARIANTS:
                raise ValueError(f"--k3-launch testbed --variant {value!r}: no such testbed "
                                 f"model; choose one of {', '.join(VARIANTS)}")
            variant = value
            continue
        rest.append(word)
        i += 1
    return variant, tuple(rest)


def plan(launch: str, endpoint: str | None, *, testbed_port: int | None = None,
         testbed_args: tuple[str, ...] = ()) -> LaunchPlan:
    """Turn ``--k3-launch`` (and ``--k3-endpoint`` if given) into a :class:`LaunchPlan`.

    ``testbed`` (optionally followed by ``--variant NAME``, a testbed model of
    ``k3accept testbed model``, and by extra vLLM arguments, e.g. ``testbed --variant hybrid
    --no-enable-prefix-caching``) starts the embedded CPU testbed on a free loopback port.
    """
    words = launch.strip().split(None, 1)
    if words and words[0] == "testbed":
        from ... import testbed
        from .launch import free_port

        variant, extra = testbed_words(tuple(shlex.split(words[1])) if len(words) > 1 else ())
        port = testbed_port or free_port()
        cmd = testbed.testbed_launch_command(port, variant=variant,
                                             extra_args=extra + testbed_args)
        return LaunchPlan(cmd, f"http://127.0.0.1:{port}", testbed=True)
    return LaunchPlan(launch, endpoint or url_from_command(launch))
