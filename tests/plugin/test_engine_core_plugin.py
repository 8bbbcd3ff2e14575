"""The engine core killed in the middle of a plugin run (``--k3-launch testbed``, real vLLM
0.32): the running load ends within its bounds with the engine's HTTP 5xx, the server's life
is classified 'engine core killed' after the first response, and the record and the report
are written. The inner test signals the ``VLLM::EngineCore`` child, never the API server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_k3accept import testbed

pytestmark = [pytest.mark.live]

REAL_CACHE = testbed.cache_dir()  # read before pytester moves HOME
INNER = '''
import asyncio, os, signal, time
import pytest
from pytest_k3accept.observe.server import enginecore

@pytest.mark.asyncio
async def test_load_while_the_engine_core_dies(k3_server, k3_load):
    engine = enginecore.find(k3_server.process.pid)[0]

    async def kill():
        await asyncio.sleep(3)
        os.kill(engine, signal.SIGKILL)
    killer = asyncio.create_task(kill())
    t0 = time.monotonic()
    result = await k3_load.run(concurrency=2, requests=2, output_tokens=6000,
                               context_tokens=64, max_seconds=600)
    await killer
    assert time.monotonic() - t0 < 300
    assert result.summary["errors_by_kind"]["http-5xx"] == 2, result.line()

def test_the_server_life_is_engine_core_killed(k3_server):
    deadline = time.monotonic() + 120
    while k3_server.process.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    cls = k3_server.classify()
    assert cls.rule == "engine-core-killed", cls.summary()
'''


def test_engine_core_killed_during_a_plugin_run(pytester: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_CACHE", str(REAL_CACHE))
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess(
        "--k3-launch", "testbed --max-model-len 8192", "--k3-launch-timeout", "900",
        "--k3-record", "out/record.json", "--html", "out/report.html",
        "--self-contained-html", "-p", "no:cacheprovider", timeout=1200)
    result.assert_outcomes(passed=2)
    rec: dict[str, Any] = json.loads((pytester.path / "out" / "record.json").read_text())
    found = [e for e in rec["evidence"] if e["kind"] == "classification"
             and e["data"].get("rule") == "engine-core-killed"]
    assert found, [e["summary"] for e in rec["evidence"] if e["kind"] == "classification"]
    assert "engine core killed" in json.dumps(found[0]["data"])
    assert "after the first successful response" in found[0]["data"]["phase"]
    report = (pytester.path / "out" / "report.html").read_text()
    assert "engine core killed" in report
    assert "Traceback" not in result.stdout.str()
