"""Where pipelines look, as users get it (pytester runs of real test files): the Markdown
summary under GitHub Actions and ``--k3-summary-md``, the verdict in the JUnit XML, usage
errors and an unreachable endpoint in the artifacts.

The live run talks to the real vLLM CPU testbed; the usage-error runs stop before any server
would be asked (that is the point), the unreachable endpoint is a closed port.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

OUT = ["--k3-record", "out/record.json", "--html", "out/report.html", "--self-contained-html",
       "--k3-summary-md", "out/summary.md", "-p", "no:cacheprovider"]

LIVE_SUITE = '''
import pytest

@pytest.mark.k3_check("C6")
@pytest.mark.asyncio
async def test_answers(k3_client):
    res = await k3_client.chat([{"role": "user", "content": "hi"}], max_tokens=2)
    assert res.ok, res.error

@pytest.mark.k3_check("C4")
def test_driver_too_old():
    assert False, "driver 575.57.08 < 580"

def test_uses_verdict(k3_verdict):
    assert k3_verdict.name
'''


@pytest.fixture(autouse=True)
def _ini(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    for name in ("GITHUB_STEP_SUMMARY", "GITHUB_RUN_ID", "GITHUB_REPOSITORY", "CI_JOB_URL",
                 "K3ACCEPT_SUMMARY_MD"):
        monkeypatch.delenv(name, raising=False)


def _junit_properties(path: Path) -> list[tuple[str, str]]:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    props = suite.find("properties")
    return [] if props is None else [(p.get("name") or "", p.get("value") or "")
                                     for p in props.findall("property")]


@pytest.mark.live
def test_step_summary_and_junit_verdict_of_a_real_run(
        pytester: pytest.Pytester, testbed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    step = pytester.path / "step-summary.md"
    step.write_text("## an earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/k3")
    pytester.makepyfile(test_live=LIVE_SUITE)
    result = pytester.runpytest("--k3-endpoint", testbed.base_url, "--junitxml", "out/junit.xml",
                                *OUT)
    result.assert_outcomes(passed=2, failed=1)
    text = step.read_text()
    assert text.startswith("## an earlier step\n")  # appended, never overwritten
    assert "## K3 acceptance verdict: **move-environment**" in text
    assert "| C4 driver-r580 | ❌ FAIL | `test_live.py::test_driver_too_old` (fail) |" in text
    assert "| C6 request-set | ✅ pass |" in text
    assert f"- record: `{pytester.path / 'out' / 'record.json'}`" in text
    assert "(https://github.com/acme/k3/actions/runs/42)" in text
    own = (pytester.path / "out" / "summary.md").read_text()
    assert own == text[len("## an earlier step\n"):].rstrip("\n") + "\n"
    result.stdout.fnmatch_lines(["summary: written to $GITHUB_STEP_SUMMARY",
                                 f"summary: written to {pytester.path / 'out' / 'summary.md'}"])

    props = _junit_properties(pytester.path / "out" / "junit.xml")
    assert ("k3_verdict", "move-environment") in props
    reasons = [v for k, v in props if k == "k3_verdict_reason"]
    assert reasons and any("C4 driver-r580" in r for r in reasons)
    assert ("k3_C4", "fail") in props and ("k3_C6", "pass") in props
    assert ("k3_C1", "not-checked") in props
    # each test carries its checklist ids once (k3_verdict adds C11 to the same property)
    xml = (pytester.path / "out" / "junit.xml").read_text()
    case = re.search(r'<testcase [^>]*name="test_uses_verdict".*?</testcase>', xml, re.S)
    assert case and case.group(0).count('name="k3_checklist"') == 1


def _assert_usage_error_in_artifacts(pytester: pytest.Pytester, result: pytest.RunResult,
                                     message: str) -> None:
    assert result.ret == 4
    out = pytester.path / "out"
    rec = json.loads((out / "record.json").read_text())
    assert rec["session"]["exit_status"] == 4
    assert any(message in n for n in rec["notes"]), rec["notes"]
    verdict = rec["verdict"]
    assert verdict["name"] == "undecided"
    assert any(message in r for r in verdict["reasons"]), verdict["reasons"]
    assert not any("run the target load" in a.lower() for a in verdict["advice"])
    assert any("usage error" in a for a in verdict["advice"])
    page = (out / "report.html").read_text()
    assert 'id="k3-ship"' in page and message in page.replace("&#x27;", "'")
    md = (out / "summary.md").read_text()
    assert message in md.replace("&gt;", ">") and md.count(message) == 1


def test_a_bad_profile_field_reaches_record_report_and_summary(
        pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", profile='concurrency = "eight"\n')
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--k3-profile", "profile.toml", *OUT)
    result.stderr.fnmatch_lines(["ERROR: --k3-profile: profile.toml: concurrency:*"])
    _assert_usage_error_in_artifacts(pytester, result, "profile.toml: concurrency:")


def test_an_unknown_slo_name_reaches_the_artifacts(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", profile="concurrency = 2\n[slo]\nttft_p99x = 2.0\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--k3-profile", "profile.toml", *OUT)
    _assert_usage_error_in_artifacts(pytester, result, "ttft_p99x: unknown SLO")


def test_a_bad_marker_keyword_reaches_the_artifacts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x='''
import pytest

@pytest.mark.k3_driver(minimum="580")
def test_driver():
    pass
''')
    result = pytester.runpytest(*OUT)
    result.stderr.fnmatch_lines(["ERROR: test_x.py::test_driver: @k3_driver got unknown*"])
    _assert_usage_error_in_artifacts(pytester, result, "@k3_driver got unknown argument")


UNREACHABLE_SUITE = '''
import pytest

@pytest.mark.parametrize("n", range(5))
def test_needs_the_server(k3_endpoint, n):
    pass
'''


def test_an_unreachable_endpoint_is_said_once_and_named_by_the_advice(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=UNREACHABLE_SUITE)
    result = pytester.runpytest("--k3-endpoint", "http://127.0.0.1:9", "--k3-require", *OUT)
    result.assert_outcomes(errors=5)
    # pytest's own short summary is left out: under CI (env CI set) it prints each error's
    # message in full, elsewhere cut to the terminal's width
    text = result.stdout.str().split("short test summary info")[0]
    assert text.count("cannot reach http://127.0.0.1:9/v1/models") == 2  # error + verdict
    assert "During handling of the above exception" not in text
    assert text.count("(said in full at test_x.py::test_needs_the_server[0])") == 4
    rec = json.loads((pytester.path / "out" / "record.json").read_text())
    verdict = rec["verdict"]
    assert verdict["name"] == "undecided"
    assert [a for a in verdict["advice"] if a.startswith("The endpoint was unreachable")]
    assert not any("Run the target load" in a for a in verdict["advice"])


def test_without_require_the_skips_say_it_once_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="import pytest\n" + "\n".join(
        f"@pytest.mark.k3_check('C6')\ndef test_{i}(k3_endpoint):\n    pass\n"
        for i in range(4)))
    result = pytester.runpytest("--k3-endpoint", "http://127.0.0.1:9", "-rs", *OUT)
    result.assert_outcomes(skipped=4)
    text = result.stdout.str()
    assert text.count("cannot reach http://127.0.0.1:9/v1/models") == 2  # skip + verdict
    assert text.count("(said in full at test_x.py::test_0)") == 3
    rec = json.loads((pytester.path / "out" / "record.json").read_text())
    [c6] = [c for c in rec["checklist"] if c["id"] == "C6"]
    assert len(c6["tests"]) == 4  # the checklist keeps each test's full message
    assert all("cannot reach" in t["message"] for t in c6["tests"])


def test_a_test_deciding_more_items_by_fixture_carries_k3_checklist_once(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x='''
import pytest

@pytest.mark.k3_check("C6")
def test_layers(k3_layers, k3_verdict):
    pass
''')
    result = pytester.runpytest("--junitxml", "out/junit.xml", *OUT)
    result.assert_outcomes(passed=1)
    xml = (pytester.path / "out" / "junit.xml").read_text()
    assert re.findall(r'<property name="k3_checklist" value="([^"]*)"', xml) == ["C6,C12,C11"]
    props = _junit_properties(pytester.path / "out" / "junit.xml")
    assert [k for k, _ in props].count("k3_verdict") == 1
    assert ("k3_C12", "pass") in props


def test_another_plugin_s_usage_error_leaves_the_plugin_inert(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('''
import pytest

def pytest_configure(config):
    raise pytest.UsageError("--other-option: bad value")
''')
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--html", "out/report.html", "-p", "no:cacheprovider")
    assert result.ret == 4
    assert not (pytester.path / "out" / "report.html").exists()


def test_a_bad_option_value_reaches_the_artifacts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--k3-timeout", "abc", *OUT)
    result.stderr.fnmatch_lines(["ERROR: --k3-timeout: 'abc' is not a number of seconds*"])
    _assert_usage_error_in_artifacts(pytester, result, "--k3-timeout: 'abc' is not a number")


def test_a_bad_option_value_from_the_environment_reaches_the_artifacts(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_ENDPOINT", "gpu-node:8000")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(*OUT)
    _assert_usage_error_in_artifacts(pytester, result, "--k3-endpoint: 'gpu-node:8000' is not")
