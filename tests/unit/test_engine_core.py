"""The engine core dead or frozen while the API server lives (pure parts; the real signals
are in tests/live/test_engine_core_live.py): a real vLLM 0.32 log of a SIGKILLed engine core
is 'engine core killed', an excerpt without the engine's own lines is not; stalled streams
get the frozen-engine sentence only when /health still answers 2xx; the engine core is found
in a process tree by its title."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pytest_k3accept.observe.endpoint.client import RequestResult
from pytest_k3accept.observe.load import stall
from pytest_k3accept.observe.server import enginecore
from pytest_k3accept.observe.server.classify import classify

LOG = Path(__file__).parents[1] / "data" / "engine" / "sigkill-engine-core-vllm-0.32.log"


def test_a_real_sigkilled_engine_core_is_engine_core_killed() -> None:
    cls = classify(LOG.read_text(), exit_code=0)  # vLLM 0.32's API server exits 0 after it
    assert cls.category == "killed" and cls.rule == "engine-core-killed"
    assert cls.summary().startswith('killed (after the first successful response): '
                                    '"engine core killed: the EngineCore process died')
    # the consequence quoted: the API server's client seeing its engine core gone (a death
    # line since round 23; the requests' EngineDeadError comes after it)
    assert "engine core exited unexpectedly" in cls.evidence[1].text and cls.stage == "serving"
    assert "dmesg" in cls.advice


def test_an_excerpt_without_the_engines_own_lines_stays_serving() -> None:
    api_only = "\n".join(ln for ln in LOG.read_text().splitlines()
                         if ln.startswith("(APIServer") and "ERROR" in ln)
    assert classify(api_only).category == "serving"
    engine_error = LOG.read_text() + ("\n(EngineCore pid=31394) ERROR 12-01 14:13:07 "
                                      "[core.py:1000] EngineCore encountered a fatal error.\n")
    assert classify(engine_error, exit_code=0).rule != "engine-core-killed"
    assert classify(LOG.read_text(), exit_code=1).rule == "engine-dead"  # not what was seen


class _Resp:
    def __init__(self, status: int) -> None:
        self.status_code = status


class _Http:
    def __init__(self, status: int | Exception) -> None:
        self.status, self.calls = status, 0

    async def get(self, path: str, timeout: float) -> _Resp:
        self.calls += 1
        if isinstance(self.status, Exception):
            raise self.status
        return _Resp(self.status)


class _Client:
    def __init__(self, status: int | Exception) -> None:
        self.http, self.timeout = _Http(status), 20.0


def _stalled() -> RequestResult:
    return RequestResult(ok=False, status=200, error_kind="timeout", chunks=5, stream=True,
                         error="the server sent nothing for 20 s after HTTP 200 and 5 stream "
                               "chunks (partial output kept) (...): the stream stalled")


def test_stalled_streams_say_the_engine_froze_only_while_health_answers() -> None:
    recs: list[Any] = [_stalled(), RequestResult(ok=True, status=200), None,
                       RequestResult(ok=False, status=None, error_kind="timeout",
                                     error="no answer from x within 20 s")]
    client = _Client(200)
    assert asyncio.run(stall.annotate(client, recs)) == 1
    assert recs[0].error.startswith("the engine stopped producing tokens for 20 s while the "
                                    "API server answered /health 200: the engine core is "
                                    "frozen or stalled")
    assert recs[0].error.endswith("the stream stalled)") and recs[3].error.startswith("no answer")
    for status in (503, ConnectionError("refused")):
        rec = _stalled()
        assert asyncio.run(stall.annotate(_Client(status), [rec])) == 0
        assert rec.error.startswith("the server sent nothing")
    idle = _Client(200)
    assert asyncio.run(stall.annotate(idle, [RequestResult(ok=True)])) == 0
    assert idle.http.calls == 0  # no probe without a stalled stream


def test_the_engine_core_is_found_by_its_title(tmp_path: Path) -> None:
    def proc(pid: int, ppid: int, title: bytes) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_bytes(f"{pid} (python) S {ppid} 1 1".encode())
        (tmp_path / str(pid) / "cmdline").write_bytes(title)
    proc(10, 1, b"python\0-m\0vllm.entrypoints.openai.api_server\0")
    proc(11, 10, b"VLLM::EngineCore\0\0\0")
    proc(12, 11, b"VLLM::Worker\0")
    proc(13, 10, b"python\0-c\0from multiprocessing.resource_tracker import main\0")
    proc(20, 1, b"VLLM::EngineCore\0")  # another server's engine
    assert enginecore.find(10, str(tmp_path)) == [11]
    assert enginecore.find(99, str(tmp_path)) == []
    assert enginecore.find(10, str(tmp_path / "missing")) == []
    assert sorted(enginecore.descendants(10, str(tmp_path))) == [11, 12, 13]
    assert enginecore.descendants(11, str(tmp_path)) == [12]  # the engine core's worker
    assert enginecore.descendants(12, str(tmp_path)) == []
