"""docs/custom-suites.md, executed as written: its file blocks (each marked
``<!-- file: NAME -->``) are copied verbatim into a fresh directory and its run command
(``<!-- command: run -->``) runs there, in a subprocess like a CI job, against the real vLLM
CPU testbed. Only the endpoint URL is replaced (the testbed's) and ``--k3-preset testbed``
appended (the testbed has no GPU), exactly as the guide's testbed paragraph says.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "custom-suites.md"
BLOCK = re.compile(r"<!-- (file|command): ([\w.\-/]+) -->\s*\n```[\w-]*\n(.*?)```", re.S)
GUIDE_URL = "http://gpu-node:8000"


def blocks() -> tuple[dict[str, str], dict[str, str]]:
    """(file name -> content, command name -> command line) from the guide."""
    files: dict[str, str] = {}
    commands: dict[str, str] = {}
    for kind, name, body in BLOCK.findall(GUIDE.read_text()):
        (files if kind == "file" else commands)[name] = body
    return files, commands


def test_guide_blocks_and_ci_files_agree() -> None:
    files, commands = blocks()
    assert set(files) == {"pytest.ini", "requests.toml", "profile.toml", "conftest.py",
                          "test_team.py"}
    run = " ".join(commands["run"].split())
    assert run.startswith("pytest ") and GUIDE_URL in run
    in_ci = run.replace(GUIDE_URL, '"$K3ACCEPT_ENDPOINT"')
    for name in ("github-actions.yml", "gitlab-ci.yml"):
        text = (ROOT / "docs" / "ci" / name).read_text()
        assert in_ci in " ".join(text.split()), f"{name} does not run the guide's command"
        assert "team-suite/report.html" in text and "team-suite/record.json" in text
        assert re.search(r"if: always\(\)|when: always", text), f"{name}: artifacts on failure"
        assert "K3ACCEPT_API_KEY" in text and "pytest_k3accept.suites.poc" in text


@pytest.mark.live
def test_guide_example_runs_verbatim(pytester: pytest.Pytester, testbed: Any) -> None:
    files, commands = blocks()
    for name, content in files.items():
        (pytester.path / name).write_text(content)
    argv = shlex.split(commands["run"])
    assert argv[0] == "pytest"
    args = [testbed.base_url if a == GUIDE_URL else a for a in argv[1:]]
    result = pytester.runpytest_subprocess(*args, "--k3-preset", "testbed", "-rs",
                                           "-p", "no:cacheprovider", timeout=600)
    out = result.stdout.str()
    assert result.ret == 0, out[-4000:]
    result.assert_outcomes(passed=5, skipped=1)  # the driver check: the testbed has no GPU
    assert "preset 'testbed'" in out
    assert (pytester.path / "report.html").stat().st_size > 10_000
    rec = json.loads((pytester.path / "record.json").read_text())
    items = {c["id"]: c["status"] for c in rec["checklist"]}
    assert (items["T1"], items["T2"], items["C6"], items["C11"]) == ("pass",) * 4
    assert items["C12"] == "pass" and rec["verdict"]["name"] == "keep"
    assert rec["verdict"]["layers"]["driver"] == "fixed"
    assert rec["team"] == {"name": "search-agents", "owner": "platform@example.com"}
    report = (pytester.path / "report.html").read_text()
    assert "tool-definitions" in report and "search-agents" in report
