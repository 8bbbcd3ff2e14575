"""Decision wiring as users meet it, without a server: ``[layers]`` in the profile (C12),
bad decision tables, and the verdict section of the terminal summary."""

from __future__ import annotations

import json

import pytest

LAYERS_PROFILE = """
concurrency = 4

[layers]
driver = "fixed"
container = "changeable"
network = "fixed"
"""

LAYERS_TEST = """
def test_layers(k3_layers):
    assert k3_layers.recorded, k3_layers.source
    assert k3_layers.fixed_layers() == ["driver", "network"]
"""

DRIVER_FAILURE = """
from pytest_k3accept.fixtures import state_of

def test_driver(request):
    state_of(request.config).add(
        "environment", "ENVIRONMENT FAILURE (C4 driver-r580): expected >= 580, actual 535.183",
        {"item": "C4", "ok": False, "expected": "host driver >= 580", "actual": "535.183"},
        nodeid=request.node.nodeid)

def test_verdict(k3_verdict):
    assert k3_verdict.name == "move-environment"
    assert k3_verdict.blocked_layers == ["driver"]
"""


def test_layers_from_the_profile_decide_c12(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", profile=LAYERS_PROFILE)
    pytester.makepyfile(test_team_layers=LAYERS_TEST)
    result = pytester.runpytest("--k3-profile", "profile.toml", "--k3-record", "rec.json",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    rec = json.loads((pytester.path / "rec.json").read_text())
    c12 = next(i for i in rec["checklist"] if i["id"] == "C12")
    assert c12["status"] == "pass"


def test_a_fixed_driver_is_never_advised_to_be_upgraded(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", profile=LAYERS_PROFILE)
    pytester.makepyfile(test_env=DRIVER_FAILURE)
    result = pytester.runpytest("--k3-profile", "profile.toml", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    section = result.stdout.str().split("k3accept verdict", 1)[1]
    assert "verdict: MOVE-ENVIRONMENT" in section
    assert "host GPU driver, a layer marked fixed here: move to an environment" in section
    assert "upgrade the host driver" not in section.lower()
    assert "fixed layers the fix would need: driver" in section
    assert "C11 load-vs-capacity" not in section  # k3_verdict decided it


def test_bad_layers_value_is_a_usage_error_naming_file_and_line(
        pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", profile='concurrency = 4\n[layers]\ndriver = "sometimes"\n')
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--k3-profile", "profile.toml", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*profile.toml: [[]layers[]] line 3: driver = 'sometimes': "
                                 "expected one of 'fixed', 'changeable', 'unknown'*"])


def test_no_evidence_prints_no_verdict(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "k3accept verdict" not in result.stdout.str()
