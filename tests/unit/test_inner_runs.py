"""The root conftest's ``RunResult.assert_outcomes``: when an inner pytest run's counts
differ, the failure message carries that run's own failure lines (CI's excerpt of a failed
run shows messages and cuts captured output)."""

from __future__ import annotations

import pytest


def test_an_inner_runs_failure_is_said_in_the_message(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a():\n    assert 1 == 2, 'the server did not start'\n")
    result = pytester.runpytest()
    with pytest.raises(AssertionError) as exc:
        result.assert_outcomes(passed=1)
    text = str(exc.value)
    assert "the inner run said:" in text and "the server did not start" in text
    assert "FAILED test_an_inner_runs_failure_is_said_in_the_message.py::test_a" in text
    result.assert_outcomes(failed=1)  # counts that match still pass
