"""``k3_robustness`` against a REAL vLLM 0.32 server, as a user runs it (pytester).

Its own server (with ``--api-key``), not the shared ``testbed``: the check makes the server
answer HTTP 500 (see below), and other tests read the shared server's log.

Real finding (vLLM 0.32.0 CPU): ``"top_k": 1000000000000000000000000000000`` (an integer
beyond 64 bits) is answered ``500 {"error": {"message": "", "type":
"InternalServerError"}}`` on both /v1/chat/completions and /v1/completions, where every other
out-of-range number gets a 400 (``top_k`` 2**63 is even accepted). The server stays healthy.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.live]

KEY = "fuzz-test-key"
TOP_K = '"top_k": 1000000000000000000000000000000'

SUITE = '''
import pytest
from pytest_k3accept.fixtures import state_of

@pytest.mark.k3_robustness(max_examples=20)
def test_sweep_and_search(request):
    pass

@pytest.mark.k3_robustness(max_examples=40, seed=0, edges=False)
def test_search_only(request):
    ev = state_of(request.config).latest("robustness")
    assert ev.data["examples"] == 40 and ev.data["health_after"] == 200
    assert sum(n for s, n in ev.data["statuses"].items() if s.startswith("4")) > 20
    print("SEARCH:", ev.summary)
'''


@pytest.fixture(scope="module")
def fuzzed(module_testbed_factory: Any) -> Any:
    """A real vLLM server (with an API key) that only this module sends bad requests to."""
    return module_testbed_factory(args=("--api-key", KEY))


def test_robustness_marker_reports_vllms_real_500_minimally(
        fuzzed: Any, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_API_KEY", KEY)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--k3-endpoint", fuzzed.base_url, "-s", "-p",
                                "no:cacheprovider")
    out = result.stdout.str()
    result.assert_outcomes(failed=1, passed=1)
    # the sweep: the real 500, reported as a one-change request with a curl line
    assert ("minimal failing request (a single change to a valid request, from the "
            "edge-case sweep): HTTP 500 (a server error instead of a 4xx rejection)") in out
    assert f'{{"model": "k3-testbed", "prompt": "hi", "max_tokens": 4, {TOP_K}}}' in out
    assert "also failed: POST /v1/chat/completions with top_k=1000000000000000000000000000000" \
        in out
    assert "/health right after: 200" in out
    assert "(plus the bearer token in the environment variable K3ACCEPT_API_KEY)" in out
    assert KEY not in out
    # the bounded random search (seed 0): 40 generated requests, all 2xx/4xx, healthy after
    assert "SEARCH: robustness of" in out and "every malformed request was rejected" in out
    assert "Traceback" not in out
