"""The robustness check (``k3_robustness``) against NOT-vLLM stubs with planted bugs.

The real vLLM testbed run is ``tests/live/test_robustness_live.py``.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings

from fault_stub import StubServer
from pytest_k3accept.checks.robustness.run import check_endpoint
from pytest_k3accept.checks.robustness.probes import CHAT, COMPLETIONS, Probe, probes


def answer(planted: Any) -> Any:
    """A handler: 500 where ``planted(body)`` is true, else a 400/200 like a careful server."""
    def handle(req: Any) -> None:
        body = json.loads(req.body() or b"null", parse_constant=lambda c: None)
        if planted(body):
            req.send(500, b'{"error":{"message":"Internal Server Error"}}')
        elif isinstance(body, dict) and body.get("max_tokens") == 4:
            req.send(200, b'{"choices":[{"message":{"content":"ok"}}]}')
        else:
            req.send(400, b'{"error":{"message":"bad request"}}')

    def safe(req: Any) -> None:
        try:
            handle(req)
        except ValueError:
            req.send(400, b'{"error":{"message":"not JSON"}}')
    return safe


def serve(stub: StubServer, planted: Any) -> None:
    stub.route("GET", "/health", lambda r: r.send(200, b""))
    for path in (CHAT, COMPLETIONS):
        stub.route("POST", path, answer(planted))


def empty_messages(body: Any) -> bool:
    """The bug schemathesis found in an older vLLM: ``{"messages": []}`` -> 500."""
    return isinstance(body, dict) and body.get("messages") == []


def test_a_careful_server_passes() -> None:
    with StubServer() as stub:
        serve(stub, lambda body: False)
        report = check_endpoint(stub.base_url, "m", max_examples=40)
    assert report.ok and report.examples > 40 + 2 * 84  # the sweep, then the random search
    assert report.statuses.get("400", 0) > 0
    assert "every malformed request was rejected or served" in report.summary()


def test_a_planted_500_is_reported_with_the_minimal_request() -> None:
    with StubServer() as stub:
        serve(stub, empty_messages)
        report = check_endpoint(stub.base_url, "m", max_examples=200, seed=1, edges=False)
    assert not report.ok and report.minimal is not None
    probe = report.minimal.probe
    assert probe.changes == ("messages=[]",)  # shrunk: one change
    assert probe.path == CHAT
    assert probe.body == {"model": "m", "messages": [], "max_tokens": 4}
    msg = report.message()
    assert "minimal failing request (shrunk by Hypothesis): HTTP 500" in msg
    assert '"messages": []' in msg and "reproduce: curl -s -X POST" in msg
    assert report.health_after == 200


def test_a_server_that_dies_stops_the_run_at_once() -> None:
    state = {"dead": False}

    def planted(body: Any) -> bool:
        if empty_messages(body):
            state["dead"] = True
        return state["dead"]

    with StubServer() as stub:
        serve(stub, planted)
        stub.route("GET", "/health", lambda r: r.send(503 if state["dead"] else 200, b""))
        report = check_endpoint(stub.base_url, "m", max_examples=300, seed=1,
                                health_wait=0.5, edges=False)
    assert not report.ok and report.stopped is not None
    assert "/health answered 503" in report.stopped
    assert report.findings and report.findings[0].health_after == 503
    assert "smallest failing request seen" in report.message()


def huge_top_k(body: Any) -> bool:
    """The bug vLLM 0.32 really has: an integer top_k beyond 64 bits -> HTTP 500."""
    return isinstance(body, dict) and isinstance(body.get("top_k"), int) and \
        body["top_k"] >= 2**64


def test_the_edge_sweep_finds_a_one_change_bug_without_searching() -> None:
    with StubServer() as stub:
        serve(stub, huge_top_k)
        report = check_endpoint(stub.base_url, "m", max_examples=1000)
    assert not report.ok and report.minimal is not None
    assert report.minimal.probe.changes == ("top_k=1000000000000000000000000000000",)
    assert report.minimal.probe.path == COMPLETIONS  # the smaller of the two failing bodies
    assert report.examples < 300  # the random search (1000 examples) was skipped
    msg = report.message()
    assert "a single change to a valid request, from the edge-case sweep" in msg
    assert "also failed: POST /v1/chat/completions with top_k=1000000000000000000000000000000" \
        in msg


def test_unhealthy_server_is_not_probed() -> None:
    with StubServer() as stub:
        stub.route("GET", "/health", lambda r: r.send(503, b""))
        report = check_endpoint(stub.base_url, "m", max_examples=5, health_wait=0.5)
    assert not report.ran and report.examples == 0
    assert "needs a healthy server" in report.message()


def test_curl_line_never_holds_the_key() -> None:
    probe = Probe(CHAT, {"model": "m", "messages": [], "max_tokens": 4}, ("messages=[]",))
    line = probe.curl("http://h:1", "MY_KEY_VAR")
    assert line.endswith("(plus the bearer token in the environment variable MY_KEY_VAR)")
    assert "--data-binary '{\"model\": \"m\"" in line
    raw = Probe(CHAT, b"\xff\xfe", ("body is not a JSON object",))
    assert "@probe.json" in raw.curl("http://h:1") and "\\xff" in raw.shown()


@settings(max_examples=200, deadline=None)
@given(probes("m", [CHAT, COMPLETIONS], 2048))
def test_probes_are_sendable_and_described(probe: Probe) -> None:
    assert probe.path in (CHAT, COMPLETIONS) and probe.changes
    assert isinstance(probe.raw, bytes)
    assert len(probe.shown()) < 5000
    if not isinstance(probe.body, bytes):
        json.loads(probe.raw, parse_constant=lambda c: None)  # always parseable JSON


def test_generator_covers_the_issue_list() -> None:
    """Empty messages, wrong types, huge max_tokens, negatives, unknown fields, over-long
    prompts, invalid roles and non-JSON bodies all show up in a modest sample."""
    from hypothesis import find

    strategy = probes("m", [CHAT, COMPLETIONS], 2048)
    wanted = {
        "empty messages": lambda p: isinstance(p.body, dict) and p.body.get("messages") == [],
        "wrong type": lambda p: isinstance(p.body, dict)
        and isinstance(p.body.get("max_tokens"), str),
        "huge max_tokens": lambda p: isinstance(p.body, dict)
        and isinstance(p.body.get("max_tokens"), int) and p.body["max_tokens"] >= 2**31,
        "negative": lambda p: isinstance(p.body, dict)
        and isinstance(p.body.get("n"), int) and p.body["n"] < 0,
        "unknown field": lambda p: any(re.match(r"^[^=]+=", c) and c.split("=")[0] not in
                                       json.dumps(list(_known())) for c in p.changes),
        "over-long prompt": lambda p: len(p.raw) > 4 * 2048,
        "invalid role": lambda p: any(isinstance(m, dict) and m.get("role") == "bogus"
                                      for m in _messages(p)),
        "not JSON": lambda p: isinstance(p.body, bytes),
    }
    for name, cond in wanted.items():
        found = find(strategy, cond, settings=settings(max_examples=1000, database=None),
                     random=random.Random(7))
        assert cond(found), name


def _messages(p: Probe) -> list[Any]:
    msgs = p.body.get("messages") if isinstance(p.body, dict) else None
    return msgs if isinstance(msgs, list) else []


def _known() -> set[str]:
    from pytest_k3accept.checks.robustness.probes import FIELDS

    return {*FIELDS, "messages", "prompt", "model", "no model", "no messages", "no prompt"}


MARKED = '''
import pytest

@pytest.mark.k3_robustness(max_examples=200, seed=1, edges=False)
def test_endpoint_is_robust():
    pass
'''


def test_marker_reports_the_minimal_request_in_a_real_run(pytester: pytest.Pytester) -> None:
    with StubServer() as stub:
        serve(stub, empty_messages)
        pytester.makepyfile(test_suite=MARKED)
        result = pytester.runpytest("--k3-endpoint", stub.base_url, "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "minimal failing request (shrunk by Hypothesis): HTTP 500" in out
    assert '"messages": []' in out
    assert "Traceback" not in out


def test_marker_passes_on_a_careful_server(pytester: pytest.Pytester) -> None:
    with StubServer() as stub:
        serve(stub, lambda body: False)
        pytester.makepyfile(test_suite=MARKED)
        result = pytester.runpytest("--k3-endpoint", stub.base_url, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("args,words", [
    ("max_examples=0", "max_examples=...) must be a whole number > 0"),
    ("paths=['embeddings']", "paths=...) must be a non-empty list"),
    ("budget=3", "unknown argument 'budget'"),
])
def test_marker_arguments_are_checked(pytester: pytest.Pytester, args: str,
                                      words: str) -> None:
    pytester.makepyfile(test_suite=f'''
import pytest

@pytest.mark.k3_robustness({args})
def test_x():
    pass
''')
    result = pytester.runpytest("--k3-endpoint", "http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert words in result.stderr.str()


def test_marker_without_endpoint_skips(pytester: pytest.Pytester,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("K3ACCEPT_ENDPOINT", raising=False)
    pytester.makepyfile(test_suite=MARKED)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no endpoint under test*"])
