"""Small things a new user hit: each checked where it can fail."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from pytest_k3accept import cli
from pytest_k3accept.config.settings import Settings
from pytest_k3accept.evidence.store import RunState
from pytest_k3accept.observe.load import requestset
from pytest_k3accept.output import record

ROOT = Path(__file__).resolve().parents[2]
MSG = [{"role": "user", "content": "hi"}]


def test_record_validation_needs_nothing_a_plain_install_lacks() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.match(r"jsonschema\b", d) for d in deps), deps


def test_a_named_request_set_keeps_its_name_through_jsonl(tmp_path: Path) -> None:
    rs = requestset.from_requests([{"messages": MSG}, {"messages": MSG, "max_tokens": 4}],
                                  name="agent-v3")
    back = requestset.load(rs.save(tmp_path / "saved.jsonl"))
    assert (back.name, back.requests) == ("agent-v3", rs.requests)
    assert back.fingerprint() == rs.fingerprint()  # the name line is not part of the set
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"messages": MSG}) + "\n")
    assert requestset.load(plain).name == "plain"  # without the line: named after the file


def test_a_bad_name_line_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"k3_request_set": {"name": 7}}\n' + json.dumps({"messages": MSG}) + "\n")
    with pytest.raises(requestset.RequestSetError, match=r"bad.jsonl:1: k3_request_set"):
        requestset.load(bad)


def _docs_record() -> dict:
    text = (ROOT / "docs" / "report.md").read_text()
    found = re.search(r"```json\n(\{.*?\n\})\n```", text, re.S)
    assert found
    return json.loads(found.group(1))  # type: ignore[no-any-return]


def test_reproduction_requests_has_the_shape_docs_report_md_shows(tmp_path: Path) -> None:
    rs = requestset.RequestSet(requestset.from_requests([{"messages": MSG}] * 6).requests,
                               name="synthetic-200t-6", meta={
                                   "synthetic": True, "context_tokens": 200,
                                   "prefix_tokens": 0, "prefix_reuse": 0.0, "seed": 0,
                                   "shared_prefix_requests": 0, "max_prompt_deviation": 3,
                                   "measured_prompt_tokens": [200] * 6})
    state = RunState()
    # what fixtures/load.py records: the profile (naming the set's file) and the set itself
    state.add("load", "a load", {"profile": {"request_set": "requests/agents.jsonl",
                                             "concurrency": 2},
                                 "request_set": rs.describe()}, nodeid="t.py::test_load")
    state.add("load", "again", {"request_set": rs.describe()}, nodeid="t.py::test_load")
    got = record.build(state, Settings(), environ={})["reproduction"]["requests"]
    shown = _docs_record()["reproduction"]["requests"]
    assert isinstance(got["value"], dict) and set(got["value"]) == set(shown["value"])
    assert got["source"] == shown["source"]
    other = requestset.from_requests([{"messages": MSG}], name="other")
    state.add("load", "other", {"request_set": other.describe()}, nodeid="t.py::test_load")
    both = record.build(state, Settings(), environ={})["reproduction"]["requests"]["value"]
    assert [s["name"] for s in both] == ["synthetic-200t-6", "other"]


def test_help_has_no_rest_markup_and_lists_testbed_status(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "k3accept testbed status" in out


def test_the_readme_pipeline_install_has_the_charts_extra() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Against your deployment"):]
    line = next(x for x in section.splitlines() if x.startswith("pip install"))
    assert "pytest-k3accept[charts]" in line
    for ci in ("github-actions.yml", "gitlab-ci.yml"):
        assert "pytest-k3accept[charts]" in (ROOT / "docs" / "ci" / ci).read_text()


def test_the_benchmark_starts_with_tox() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    how = text[text.index("## How to run"):]
    how = how[:how.index("| option |")]
    assert "tox -e bench" in how and ".venvs" not in how


def test_ci_examples_keep_the_last_green_record_and_pass_it_as_the_baseline() -> None:
    import yaml

    gh = yaml.safe_load((ROOT / "docs" / "ci" / "github-actions.yml").read_text())
    steps = gh["jobs"]["acceptance"]["steps"]
    keep = [s for s in steps if (s.get("with") or {}).get("name") == "k3-baseline"]
    assert keep and keep[0]["if"] == "success()"  # only a green record becomes the baseline
    fetch = next(s for s in steps if "gh run download" in s.get("run", ""))
    assert "--status success" in fetch["run"] and fetch.get("continue-on-error") is True
    assert any("--k3-baseline baseline/record.json" in s.get("run", "") for s in steps)
    gl = yaml.safe_load((ROOT / "docs" / "ci" / "gitlab-ci.yml").read_text())["k3-acceptance"]
    script = " ".join(gl["before_script"] + gl["script"])
    assert "/jobs/artifacts/" in script and "--k3-baseline baseline.json" in script
    assert "--k3-summary-md summary.md" in script
    assert "team-suite/summary.md" in gl["artifacts"]["paths"]
