"""The report, the record and redaction as users get them: pytester runs of real test files.

Live runs talk to the real vLLM CPU testbed; the others need no server (they still make the
plugin engaged with ``--k3-record`` or an unreachable ``--k3-endpoint``).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept.output import record

jsonschema = pytest.importorskip("jsonschema")
try:  # load matplotlib (and numpy) out here: pytester's in-process runs drop the modules
    import matplotlib.backends.backend_agg  # noqa: F401  # they import, and numpy cannot
    import matplotlib.figure  # noqa: F401  # be imported twice in one process
except ImportError:  # charts are optional
    pass

HOSTILE = '<script>document.body.setAttribute("data-pwned", "1")</script>'
OUT = ["--k3-record", "out/record.json", "--html", "out/report.html", "--self-contained-html",
       "--junitxml", "out/junit.xml", "-p", "no:cacheprovider"]

LIVE_SUITE = '''
import pytest
from pytest_k3accept.fixtures import state_of

HOSTILE = %r

@pytest.mark.k3_check("C6")
@pytest.mark.asyncio
async def test_model_output(request, k3_client):
    res = await k3_client.completion(HOSTILE, max_tokens=2, echo=True)
    assert res.ok, res.error
    state_of(request.config).add("response", "model output: " + res.text,
                                 {"output": res.text, "lines": [res.text]},
                                 nodeid=request.node.nodeid)
    print("model said", res.text)
    assert HOSTILE in res.text

@pytest.mark.k3_check("C9")
def test_discovered(k3_endpoint):
    assert k3_endpoint.version == "0.32.0"
''' % HOSTILE


@pytest.fixture(autouse=True)
def _ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def blob(report: Path) -> dict[str, Any]:
    """pytest-html 4's data blob (``<div id="data-container" data-jsonblob="...">``)."""
    found = re.search(r'id="data-container" data-jsonblob="([^"]*)"', report.read_text())
    assert found, "no data blob in the report"
    return json.loads(html.unescape(found.group(1)))  # type: ignore[no-any-return]


def valid_record(path: Path) -> dict[str, Any]:
    """Load a record and assert it matches the shipped schema."""
    rec = json.loads(path.read_text())
    assert record.validate(rec) == []
    return rec  # type: ignore[no-any-return]


def run_live_report(pytester: pytest.Pytester, base_url: str) -> pytest.RunResult:
    """The live suite against a real server, with report, record and JUnit XML."""
    pytester.makepyfile(test_live=LIVE_SUITE)
    return pytester.runpytest("--k3-endpoint", base_url, *OUT)


@pytest.mark.live
def test_real_run_record_report_and_junit(pytester: pytest.Pytester, testbed: Any) -> None:
    result = run_live_report(pytester, testbed.base_url)
    result.assert_outcomes(passed=2)
    out = pytester.path / "out"
    rec = valid_record(out / "record.json")
    rep = rec["reproduction"]
    assert rep["vllm_version"]["value"] == "0.32.0"
    assert rep["model"]["value"] == "k3-testbed" and rep["max_context"]["value"] == 2048
    assert rep["endpoint"]["value"] == [testbed.base_url]
    items = {c["id"]: c for c in rec["checklist"]}
    assert items["C6"]["status"] == "pass"
    assert items["C6"]["tests"][0]["nodeid"] == "test_live.py::test_model_output"
    assert {t["outcome"] for t in rec["tests"]} == {"passed"}

    page = (out / "report.html").read_text()
    assert HOSTILE not in page and 'id="k3-summary"' in page
    assert page.count('<tr class="k3-') >= 12
    assert '<a href="#test_live.py::test_model_output">' in page
    data = blob(out / "report.html")
    assert data["environment"]["K3 vLLM version"] == "0.32.0"
    [run] = data["tests"]["test_live.py::test_model_output"]
    extra_html = [e["content"] for e in run["extras"] if e["format_type"] == "html"]
    assert extra_html and "&lt;script&gt;" in extra_html[0] and HOSTILE not in extra_html[0]
    assert "&lt;script&gt;" in run["log"] and HOSTILE not in run["log"]
    assert [e["name"] for e in run["extras"] if e["format_type"] == "json"] == [
        "k3accept evidence"]

    junit = (out / "junit.xml").read_text()
    assert re.search(r'name="test_model_output".*?<property name="k3_checklist" value="C6"',
                     junit, re.S)
    result.stdout.fnmatch_lines(["*- k3accept -*", "verdict: *", "checklist C1 C2 C3*",
                                 f"record: {out / 'record.json'}"])


SUITE_FAILING = '''
import pytest
from pytest_k3accept.fixtures import state_of

@pytest.fixture
def broken():
    raise RuntimeError("fixture exploded")

@pytest.mark.k3_check("C4")
def test_fails(request):
    state_of(request.config).add("load", "a load", {"concurrency": 4, "summary": {
        "requests": 4, "ok": 3, "errors": 1, "ttft": {"p50": 0.1, "p90": 0.2, "p99": 0.3}}},
        nodeid=request.node.nodeid)
    assert 1 == 2

@pytest.mark.k3_check("C5")
def test_errors(broken):
    pass

@pytest.mark.k3_check("C6")
def test_passes():
    pass

def test_skips():
    pytest.skip("nothing to see")
'''


def test_failed_and_errored_run_still_gets_a_valid_record(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_failing=SUITE_FAILING)
    result = pytester.runpytest(*OUT)
    result.assert_outcomes(passed=1, failed=1, errors=1, skipped=1)
    out = pytester.path / "out"
    rec = valid_record(out / "record.json")
    assert rec["session"]["exit_status"] == 1 and rec["session"]["interrupted"] is False
    assert {t["nodeid"].split("::")[1]: t["outcome"] for t in rec["tests"]} == {
        "test_fails": "failed", "test_errors": "error", "test_passes": "passed",
        "test_skips": "skipped"}
    status = {c["id"]: c["status"] for c in rec["checklist"]}
    assert (status["C4"], status["C5"], status["C6"]) == ("fail", "fail", "pass")
    assert rec["reproduction"]["concurrency"]["value"] == 4
    junit = (out / "junit.xml").read_text()
    assert re.search(r'name="test_fails".*?<property name="k3_checklist" value="C4" ?/>',
                     junit, re.S)
    data = blob(out / "report.html")
    [run] = data["tests"]["test_failing.py::test_fails"]
    assert any("k3-load" in e["content"] for e in run["extras"] if e["format_type"] == "html")
    assert any(e["format_type"] == "image" for e in run["extras"])


SUITE_INTERRUPTED = '''
import pytest
from pytest_k3accept.fixtures import state_of

@pytest.mark.k3_check("C2")
def test_first(request):
    state_of(request.config).add("timeline", "init done", {"events": {"start": 1.0, "ready": 2.0}},
                                 nodeid=request.node.nodeid)

def test_ctrl_c():
    raise KeyboardInterrupt

def test_never_runs():
    pass
'''


def test_interrupted_run_still_writes_the_record(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_interrupted=SUITE_INTERRUPTED)
    result = pytester.runpytest_subprocess(*OUT)
    assert result.ret == 2
    out = pytester.path / "out"
    rec = valid_record(out / "record.json")
    assert rec["session"]["interrupted"] is True and rec["session"]["exit_status"] == 2
    assert [t["nodeid"].split("::")[1] for t in rec["tests"]] == ["test_first"]
    assert [c["status"] for c in rec["checklist"] if c["id"] == "C2"] == ["pass"]
    assert "The run was interrupted" in (out / "report.html").read_text()
    result.stdout.fnmatch_lines(["*- k3accept -*", "record: *record.json"])


SUITE_XDIST = '''
import os
import pytest
from pytest_k3accept.fixtures import state_of

@pytest.mark.parametrize("n", range(4))
@pytest.mark.k3_check("C9")
def test_worker(request, n):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    state_of(request.config).add("load", f"run {n} on {worker}", {"worker": worker,
        "concurrency": n + 1, "summary": {"ttft": {"p50": 0.1, "p90": 0.2, "p99": 0.3}}},
        nodeid=request.node.nodeid)
'''


def test_xdist_workers_ship_their_evidence(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_xdist=SUITE_XDIST)
    result = pytester.runpytest("-n", "2", *OUT)
    result.assert_outcomes(passed=4)
    rec = valid_record(pytester.path / "out" / "record.json")
    loads = [e for e in rec["evidence"] if e["kind"] == "load"]
    assert len(loads) == 4 and {e["data"]["worker"] for e in loads} == {"gw0", "gw1"}
    assert len(rec["tests"]) == 4 and rec["session"]["xdist_workers"] == 2
    assert rec["reproduction"]["concurrency"]["value"] == 4
    assert [c["status"] for c in rec["checklist"] if c["id"] == "C9"] == ["pass"]
    data = blob(pytester.path / "out" / "report.html")
    for runs in data["tests"].values():
        assert any(e["format_type"] == "html" for e in runs[0]["extras"])


def test_works_without_pytest_html(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_failing=SUITE_FAILING)
    result = pytester.runpytest("-p", "no:html", "--k3-record", "r.json")
    result.assert_outcomes(passed=1, failed=1, errors=1, skipped=1)
    assert valid_record(pytester.path / "r.json")["session"]["exit_status"] == 1


def test_unused_plugin_is_inert(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain='''
def test_prints():
    print('config: api_key = "not-really-a-secret"')
    assert False
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(['*api_key = "not-really-a-secret"*'])
    assert "- k3accept -" not in result.stdout.str()


SECRET_SUITE = '''
import logging
import os
import pytest
from pytest_k3accept.fixtures import state_of

KEY = os.environ["K3_TEST_KEY"]

def pytest_k3accept_record(record):
    record["team"] = {"note": "added by a hook: " + KEY}

@pytest.mark.k3_check("C9")
def test_uses_the_server(request, record_property, k3_endpoint):
    print("the key is", KEY)
    logging.getLogger("team").warning("calling with key %s", KEY)
    record_property("key", KEY)
    state_of(request.config).add("load", "key " + KEY, {"headers": {"Authorization": "Bearer " + KEY}},
                                 nodeid=request.node.nodeid)

def test_fails_with_the_key():
    assert KEY == "something else"
'''


def grep_artifacts(pytester: pytest.Pytester, result: pytest.RunResult, secret: str,
                   ) -> list[str]:
    """Every artifact of a run (terminal, record, report and its assets, JUnit XML, pytest
    log file, server logs) that still contains ``secret``."""
    leaks = [name for name, text in (("stdout", result.stdout.str()),
                                     ("stderr", result.stderr.str())) if secret in text]
    files = [p for p in pytester.path.rglob("*") if p.is_file() and p.suffix != ".py"]
    assert {"record.json", "report.html", "junit.xml", "pytest.log"} <= {p.name for p in files}
    leaks += [str(p) for p in files if secret.encode() in p.read_bytes()]
    return leaks


def run_secret_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, secret: str,
                     launch: str) -> pytest.RunResult:
    monkeypatch.setenv("K3_TEST_KEY", secret)
    pytester.makeconftest(SECRET_SUITE.split("@pytest.mark")[0])
    pytester.makepyfile(test_secret=SECRET_SUITE)
    return pytester.runpytest(
        "--k3-api-key-env", "K3_TEST_KEY", "--k3-launch", launch, "--k3-artifacts", "arts",
        "--log-file", "out/pytest.log", "--log-file-level", "DEBUG", "-o", "log_cli=true",
        "-rA", "-v", *OUT)


def test_secret_grep_with_a_failing_launch(pytester: pytest.Pytester,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "k3plantedOffline0042"
    launch = f"python -c 'import sys; print(sys.argv)' --api-key {secret}"
    result = run_secret_suite(pytester, monkeypatch, secret, launch)
    result.assert_outcomes(failed=1, skipped=1)
    assert grep_artifacts(pytester, result, secret) == []
    [log] = (pytester.path / "arts").glob("*.log")
    assert "'--api-key', '***'" in log.read_text()  # the server's own output, redacted
    result.stdout.fnmatch_lines(["FAILED test_secret.py::test_fails_with_the_key - "
                                 "AssertionError: assert '***'*"])


@pytest.mark.live
def test_secret_grep_with_a_launched_testbed(pytester: pytest.Pytester, testbed_cache: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_CACHE", testbed_cache)  # pytester moved HOME
    secret = "k3plantedLive9913"
    result = run_secret_suite(pytester, monkeypatch, secret, f"testbed --api-key {secret}")
    result.assert_outcomes(passed=1, failed=1)
    assert grep_artifacts(pytester, result, secret) == []
    rec = valid_record(pytester.path / "out" / "record.json")
    assert rec["team"] == {"note": "added by a hook: ***"}
    assert rec["reproduction"]["launch_args"]["value"][-2:] == ["--api-key", "***"]
    assert list((pytester.path / "arts").glob("*.log"))


def test_a_failing_hook_and_an_unwritable_path_are_reported(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('''
def pytest_k3accept_record(record):
    raise ValueError("team hook broke")
''')
    pytester.makepyfile(test_failing=SUITE_FAILING)
    (pytester.path / "blocker").write_text("a file, not a directory")
    result = pytester.runpytest("--k3-record", "blocker/record.json")
    result.assert_outcomes(passed=1, failed=1, errors=1, skipped=1)
    result.stdout.fnmatch_lines(["record: NOT written to *blocker/record.json: *"])
    pytester.runpytest("--k3-record", "r.json")
    rec = valid_record(pytester.path / "r.json")
    assert any("pytest_k3accept_record hook failed: ValueError: team hook broke" in n
               for n in rec["notes"])
