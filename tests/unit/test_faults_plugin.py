"""Faults as a user meets them: pytester runs of real suites against NOT-vLLM stubs.

(The real-vLLM faults - key, disabled stats, killed server - are in tests/live.)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from fault_stub import StubServer, chunk
from pytest_k3accept.observe.server.launch import free_port

SUITE = '''
import pytest

pytestmark = pytest.mark.asyncio

def test_endpoint(k3_endpoint):
    assert not k3_endpoint.is_vllm and k3_endpoint.version is None

async def test_chat(k3_client):
    res = await k3_client.chat([{"role": "user", "content": "hi"}], stream=True)
    assert res.ok and res.text == "abc" and res.completion_tokens == 3

def test_metrics(k3_metrics):
    raise AssertionError("unreachable: the stub has no metrics")
'''


def test_non_vllm_server_runs_what_it_can(pytester: pytest.Pytester, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    with StubServer() as stub:
        pytester.makepyfile(test_suite=SUITE)
        result = pytester.runpytest("--k3-endpoint", stub.base_url, "-rs",
                                    f"--k3-record={record}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*k3_metrics: *404: not available from this server*"])
    assert record.is_file()  # the record is still written


def test_stalled_stream_ends_at_the_timeout(pytester: pytest.Pytester) -> None:
    def stall(req: Any) -> None:
        req.body()
        req.start_stream()
        req.event(chunk("a"))
        req.server.stub.stall(60)

    pytester.makepyfile(test_suite='''
import pytest

@pytest.mark.asyncio
async def test_stall(k3_client):
    res = await k3_client.chat([{"role": "user", "content": "hi"}], stream=True)
    assert res.error_kind == "timeout" and res.text == "a"
    print("ERROR:", res.error)
''')
    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", stall)
        t0 = time.monotonic()
        result = pytester.runpytest("--k3-endpoint", stub.base_url, "--k3-timeout", "1", "-s")
    assert time.monotonic() - t0 < 30
    result.assert_outcomes(passed=1)
    assert "ERROR: the server sent nothing for 1 s after HTTP 200" in result.stdout.str()


def test_server_that_accepts_but_never_answers(pytester: pytest.Pytester) -> None:
    with StubServer() as stub:
        stub.route("GET", "/v1/models", lambda req: req.server.stub.stall(60))
        pytester.makepyfile(test_suite=SUITE)
        result = pytester.runpytest("--k3-endpoint", stub.base_url, "--k3-timeout", "1",
                                    "-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines([f"*cannot reach {stub.base_url}/v1/models: no answer within "
                                 "1 s*"])


def test_wrong_model_name_is_a_clear_skip(pytester: pytest.Pytester) -> None:
    with StubServer() as stub:
        pytester.makepyfile(test_suite=SUITE)
        result = pytester.runpytest("--k3-endpoint", stub.base_url, "--k3-model", "kimi-k3",
                                    "-rs")
    result.assert_outcomes(skipped=3)
    assert (f"model 'kimi-k3' is not served at {stub.base_url}; it serves ['stub-model']. "
            "Fix --k3-model") in result.stdout.str()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_launched_server_that_never_opens_its_port(pytester: pytest.Pytester,
                                                    tmp_path: Path) -> None:
    """Bounded wait, then a message with the time waited; the process is stopped."""
    port = free_port()
    pidfile = tmp_path / "pid"
    pytester.makepyfile(test_suite=SUITE)
    t0 = time.monotonic()
    result = pytester.runpytest_subprocess(
        "--k3-launch", f"echo $$ > {pidfile}; exec sleep 120",
        "--k3-endpoint", f"http://127.0.0.1:{port}", "--k3-launch-timeout", "3",
        f"--k3-artifacts={tmp_path / 'artifacts'}", "-rs", timeout=120)
    assert time.monotonic() - t0 < 60
    result.assert_outcomes(skipped=3)
    out = result.stdout.str()
    assert "did not become ready within 3." in out and "connection refused" in out
    pid = int(pidfile.read_text())
    assert not _alive(pid), f"the launched command (pid {pid}) outlived the session"


def test_hostile_error_bodies_in_a_run(pytester: pytest.Pytester) -> None:
    def hostile(req: Any) -> None:
        req.body()
        req.send(500, json.dumps({"error": {"message": "\x1b[2J<script>alert(1)</script>"
                                                      + "X" * 200_000}}).encode())

    pytester.makepyfile(test_suite='''
import pytest

@pytest.mark.asyncio
async def test_hostile(k3_client):
    res = await k3_client.chat([{"role": "user", "content": "hi"}])
    assert res.error_kind == "http-5xx"
    assert "\\x1b" not in res.error and len(res.error) < 1100
    assert isinstance(res.error_body, str) and "truncated" in res.error_body
''')
    with StubServer() as stub:
        stub.route("POST", "/v1/chat/completions", hostile)
        result = pytester.runpytest("--k3-endpoint", stub.base_url)
    result.assert_outcomes(passed=1)
