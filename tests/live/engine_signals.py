"""Signals to a vLLM server's engine core and its ``VLLM::Worker`` children, for the live tests
that freeze the engine (SIGSTOP / SIGCONT) or kill it: on vLLM 0.32 the engine core runs its
model in worker children, so stopping the engine core alone lets them finish a step; every
process of the tree is signalled and, after SIGSTOP, seen stopped before the test goes on."""

from __future__ import annotations

import os
import signal
import time

from pytest_k3accept.observe.server import enginecore


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the engine core's ``VLLM::Worker`` children on 0.32)."""
    return [pid, *enginecore.descendants(pid)]


def state(pid: int) -> str:
    """The process's state letter (``T``: stopped), ``gone`` when it has exited."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return "gone"
    return stat[stat.rfind(b")") + 2:].split()[0].decode()


def signal_engine(engine: int, sig: int) -> dict[int, str]:
    """Send ``sig`` to the engine core and its children; after SIGSTOP wait (up to 10 s,
    sending it again each second) until every one of them is seen stopped: the test's
    premise is a frozen engine, so a stop that did not take is made to take (a CI run saw
    three streams finish their 6000 tokens at the unstopped pace after a SIGSTOP). The
    states seen last, by pid."""
    pids = tree(engine) if sig != signal.SIGKILL else [engine]
    for pid in pids:
        os.kill(pid, sig)
    if sig == signal.SIGSTOP:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(state(p) not in ("T", "t") for p in pids):
            time.sleep(1)
            for pid in pids:
                if state(pid) not in ("T", "t", "gone"):
                    os.kill(pid, sig)
    return {pid: state(pid) for pid in pids}
