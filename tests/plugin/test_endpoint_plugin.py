"""The plugin as users run it: pytester runs of real test files."""

from __future__ import annotations

import pytest

SUITE = '''
import pytest

pytestmark = pytest.mark.asyncio

def test_discovered(k3_endpoint):
    assert k3_endpoint.model == "k3-testbed"
    assert k3_endpoint.max_model_len == 2048
    assert k3_endpoint.version == "0.32.0"

async def test_stream(k3_client, k3_metrics):
    before = k3_metrics.scrape()
    res = await k3_client.chat([{"role": "user", "content": "hello there"}],
                               stream=True, max_tokens=8, ignore_eos=True)
    assert res.ok and res.completion_tokens == 8 and res.ttft > 0
    delta = k3_metrics.scrape() - before
    assert delta.generation_tokens() == 8
    assert delta.prompt_tokens() == res.prompt_tokens
'''


@pytest.mark.live
def test_fixtures_against_real_server(pytester: pytest.Pytester, testbed) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--k3-endpoint", testbed.base_url, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_no_endpoint_skips_with_one_clear_reason(pytester: pytest.Pytester,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("K3ACCEPT_ENDPOINT", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*no endpoint under test: pass --k3-endpoint URL*"])


def test_no_endpoint_under_require_fails_without_traceback(pytester: pytest.Pytester,
                                                           monkeypatch) -> None:
    monkeypatch.delenv("K3ACCEPT_ENDPOINT", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--k3-require")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*no endpoint under test*--k3-require makes this an error*"])
    assert "Traceback" not in result.stdout.str()


def test_unreachable_endpoint(pytester: pytest.Pytester) -> None:
    from pytest_k3accept.observe.server.launch import free_port

    url = f"http://127.0.0.1:{free_port()}"
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--k3-endpoint", url, "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([f"*cannot reach {url}/v1/models: connection refused*"])
    strict = pytester.runpytest("--k3-endpoint", url, "--k3-require")
    strict.assert_outcomes(errors=2)
    assert "Traceback" not in strict.stdout.str()


def test_bad_option_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--k3-timeout", "soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--k3-timeout: 'soon' is not a number of seconds*"])


def test_disabled_plugin_is_inert(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_x():\n    assert True\n")
    result = pytester.runpytest("-p", "no:k3accept")
    result.assert_outcomes(passed=1)
    help_ = pytester.runpytest("--help")
    help_.stdout.fnmatch_lines(["*k3accept*", "*--k3-endpoint=URL*", "*--k3-require*"])


def test_fixtures_are_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fixtures", "-p", "pytest_k3accept.plugin")
    for name in ("k3_endpoint", "k3_client", "k3_metrics", "k3_server"):
        result.stdout.fnmatch_lines([f"{name}*"])
    result.stdout.fnmatch_lines(["*The discovered deployment as plain data*"])
