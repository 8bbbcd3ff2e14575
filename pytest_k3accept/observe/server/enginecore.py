"""The engine core process: found in a server's process tree, and told dead-from-outside.

vLLM V1 runs the API server and, as its child, the engine core (process title
``VLLM::EngineCore``; ``EngineCore_DP0`` ... with data parallelism). When the engine core
is killed from outside (SIGKILL, the kernel OOM killer) the API server lives on for a few
seconds: streams end with "EngineCore encountered an issue", new requests get HTTP 500,
``/health`` answers 503, then the API server exits (with status 0 on vLLM 0.32). The log
then holds the API server's ``EngineDeadError`` and nothing from the engine core itself:
:func:`killed_from_outside` reads that (the classification asks it only while the API
server runs or after it exited 0, as seen; a non-zero exit stays the engine-dead rule's),
:func:`find` finds the process (Linux ``/proc``).
"""

from __future__ import annotations

import os
from typing import Any, Iterable

#: the first evidence line of an engine core killed from outside
KILLED = ("engine core killed: the EngineCore process died without an error of its own "
          "while the API server lived (HTTP 500 'EngineCore encountered an issue', /health "
          "503, then the server exits)")
ADVICE = ("The engine core process was killed from outside while the API server lived (it "
          "logged no error of its own): check the kernel log (dmesg) for the OOM killer, the "
          "container's memory limit, and whoever sends signals to the server's processes. "
          "Init had completed and the log shows no failure of the engine: this is not "
          "evidence about capacity, the network or the environment.")


def killed_from_outside(errors: Iterable[Any], startup: Iterable[str]) -> bool:
    """True when the engine core is seen logging its startup (``(EngineCore`` lines among
    the timeline's ``startup`` lines) and every failure/exception line (``errors``: LogLines)
    is the API server's (``(APIServer pid=N)``): the engine died without a word. An excerpt
    without the engine's startup cannot tell a silent death from a cut log: False."""
    texts = [str(getattr(ln, "text", ln)).lstrip() for ln in errors]
    engine_seen = any(line.lstrip().startswith("(EngineCore") for line in startup)
    return engine_seen and bool(texts) and all(t.startswith("(APIServer") for t in texts)


def _tree(proc: str) -> tuple[dict[int, list[int]], dict[int, bytes]]:
    """Children by parent pid and command lines by pid, read from ``proc`` (empty without it)."""
    children: dict[int, list[int]] = {}
    titles: dict[int, bytes] = {}
    try:
        names = [n for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return children, titles
    for name in names:
        try:
            with open(f"{proc}/{name}/stat", "rb") as fh:
                stat = fh.read()
            with open(f"{proc}/{name}/cmdline", "rb") as fh:
                titles[int(name)] = fh.read(4096)
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    return children, titles


def descendants(pid: int, proc: str = "/proc") -> list[int]:
    """Pids of ``pid``'s descendants (children first, then theirs); empty when none or no
    ``/proc``. The engine core's own are its ``VLLM::Worker`` processes on vLLM 0.32."""
    children, _ = _tree(proc)
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(0), [])
        found += kids
        todo += kids
    return found


def find(server_pid: int, proc: str = "/proc") -> list[int]:
    """Pids of the engine core processes among ``server_pid``'s descendants (by process
    title / command line containing ``EngineCore``); empty when none or no ``/proc``."""
    _, titles = _tree(proc)
    return sorted(pid for pid in descendants(server_pid, proc)
                  if b"EngineCore" in titles.get(pid, b""))
