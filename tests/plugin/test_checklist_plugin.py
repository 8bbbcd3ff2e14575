"""The checklist as users meet it, without a server: a team's items registered from a
``conftest.py`` found during collection (a historic hook), session-scoped custom items, and
a misspelled ``k3_*`` marker."""

from __future__ import annotations

import json

import pytest

TEAM_CONFTEST = """
def pytest_k3accept_checklist_items(register):
    register("T1", "tool-schema", "our tool definitions validate against the schema")
"""

TEAM_TEST = """
import pytest

@pytest.mark.k3_check("T1")
def test_tools():
    pass

@pytest.mark.k3_check("tool-schema")
def test_tools_by_slug():
    pass
"""


def test_a_conftest_found_during_collection_registers_its_items(
        pytester: pytest.Pytester) -> None:
    sub = pytester.mkpydir("team")
    (sub / "conftest.py").write_text(TEAM_CONFTEST)
    (sub / "test_team.py").write_text(TEAM_TEST)
    result = pytester.runpytest("team", "--k3-record", "rec.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    rec = json.loads((pytester.path / "rec.json").read_text())
    row = {r["id"]: r for r in rec["checklist"]}["T1"]
    assert row["slug"] == "tool-schema" and row["status"] == "pass"
    assert len(row["tests"]) == 2


def test_custom_items_belong_to_their_session(pytester: pytest.Pytester) -> None:
    sub = pytester.mkpydir("team")
    (sub / "conftest.py").write_text(TEAM_CONFTEST)
    (sub / "test_team.py").write_text(TEAM_TEST)
    pytester.runpytest("team", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    pytester.makepyfile(test_other="""
import pytest

@pytest.mark.k3_check("T1")
def test_other():
    pass
""")
    result = pytester.runpytest("test_other.py", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown checklist item 'T1'*"])


def test_a_misspelled_k3_marker_is_a_usage_error_not_a_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_typo="""
import pytest

@pytest.mark.k3_headrom(concurrency=8)
def test_target():
    pass
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown marker @pytest.mark.k3_headrom; did you mean "
                                 "@pytest.mark.k3_headroom?*"])
    assert "passed" not in result.stdout.str()


def test_a_team_registered_k3_marker_is_accepted(pytester: pytest.Pytester) -> None:
    pytester.makeini("""
[pytest]
markers =
    k3_team_gate: our own gate
""")
    pytester.makepyfile(test_gate="""
import pytest

@pytest.mark.k3_team_gate
def test_gate():
    pass
""")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_broken_request_set_is_a_usage_error_before_any_server_starts(
        pytester: pytest.Pytester) -> None:
    """A bad line in the profile's request set stops the session at configure time, naming
    file, line and field; nothing is launched (the --k3-launch command would fail loudly)
    and no checklist item is marked as the deployment's fault."""
    pytester.path.joinpath("requests.jsonl").write_text(
        '{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [{"role": "user"\n')
    pytester.path.joinpath("team.toml").write_text(
        'concurrency = 2\nrequest_set = "requests.jsonl"\n')
    pytester.makepyfile(test_team="""
import pytest

@pytest.mark.k3_headroom
def test_target():
    pass
""")
    result = pytester.runpytest("--k3-profile", "team.toml", "--k3-launch",
                                "/nonexistent/never-started", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--k3-profile: request_set: *requests.jsonl:2: *invalid JSON*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert "never-started" not in result.stdout.str()
