"""Server lifecycle on REAL vLLM 0.32 CPU servers, the way users run it: pytester runs of small
test files with ``--k3-launch "COMMAND"`` (or ``--k3-server-log``), one real server each.

Scenarios: a healthy start (every timeline event, init before the first response, timeline in
the terminal summary); a KV cache too small for max-model-len at init; weights that do not fit
(``huge`` with ``--load-format dummy``); an engine that dies at its first request (``head16``).
Each classification is asserted with its evidence line, which is also attached to this test's
report as a ``k3_classification`` property. The healthy start and the KV cache too small at
init also run on the second release (``testbed.SECOND_RELEASE``).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import pytest

from pytest_k3accept.testbed import RELEASES, SECOND_RELEASE

pytestmark = pytest.mark.live


@pytest.fixture
def launch_command(testbed_cache: str, testbed_release: str,
                   monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """A shell command line that starts a real testbed server of ``testbed_release``
    (environment included)."""
    from pytest_k3accept import testbed
    from pytest_k3accept.observe.server.launch import free_port

    monkeypatch.setenv("K3ACCEPT_CACHE", testbed_cache)

    def make(**kw: Any) -> str:
        return testbed.testbed_launch_command(free_port(), version=testbed_release, **kw)

    return make


def _run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_it=source)
    return pytester.runpytest("-rs", "-p", "no:cacheprovider", "--k3-artifacts",
                              str(pytester.path / "artifacts"), *args)


def _classification_line(result: pytest.RunResult) -> str:
    found = [ln for ln in result.outlines if ln.startswith("classification: ")]
    assert found, "no classification in the terminal summary:\n" + result.stdout.str()
    return found[-1]


FAILED_START = '''
import pytest
from pytest_k3accept.fixtures import state_of

def test_needs_server(k3_server):
    pass

def test_classified_before_the_skip(request):
    found = state_of(request.config).of_kind("classification")
    assert [e.data["when"] for e in found] == ["launch failed"]
    assert found[0].data["category"] == {category!r}
    assert {quoted!r} in found[0].data["evidence_lines"][0]
    timeline = state_of(request.config).latest("timeline").data
    assert {present!r} in [e["key"] for e in timeline["events"]]
    assert "engine_init_done" in timeline["missing"]

@pytest.mark.k3_startup
def test_startup():
    pass
'''


KV_TOO_SMALL = ({"kv_cache_bytes": 1_000_000, "max_model_len": 4096}, "kv-capacity-at-init",
                "To serve at least one request with the model's max seq len (4096)", "weights_loaded")


@pytest.mark.parametrize("testbed_release, kw, category, quoted, present", [
    (RELEASES[0], *KV_TOO_SMALL),
    (RELEASES[0], {"variant": "huge"}, "loading", "DefaultCPUAllocator: can't allocate memory",
     "load_start"),
    (SECOND_RELEASE, *KV_TOO_SMALL),
], ids=["kv-cache-too-small", "weights-do-not-fit", f"kv-cache-too-small-{SECOND_RELEASE}"],
    indirect=["testbed_release"])
def test_failed_start_is_classified_before_tests_are_skipped(
        pytester: pytest.Pytester, launch_command: Callable[..., str],
        record_property: Callable[[str, object], None], kw: dict[str, Any], category: str,
        quoted: str, present: str) -> None:
    source = FAILED_START.format(category=category, quoted=quoted, present=present)
    result = _run(pytester, source, "--k3-launch", launch_command(**kw))
    summary = _classification_line(result)
    record_property("k3_classification", summary + " | " + next(
        ln for ln in result.outlines if ln.strip().startswith("evidence ")))
    result.assert_outcomes(passed=1, skipped=1, failed=1)
    # the skip reason and the startup failure both name the category and quote the line
    out = result.stdout.str()
    skip = next(ln for ln in result.outlines if ln.startswith("SKIPPED"))
    assert "exited with code 1 before it became ready" in skip and "last log lines" not in skip
    assert f"classified as {category} (" in skip and quoted in skip
    assert re.search(rf"server startup failed: .*classified as {category} .*"
                     rf"{re.escape(quoted)}", out)
    assert summary.startswith(f"classification: {category} (")
    if category == "loading":
        assert "Lowering concurrency (or context length) will not help" in out
        assert "not capacity evidence" in out
    else:
        assert "Lower --max-model-len" in out


HEALTHY = '''
import pytest

pytestmark = pytest.mark.asyncio

async def test_first_request(k3_client, k3_server):
    assert not k3_server.timeline.has("first_response")
    res = await k3_client.chat([{"role": "user", "content": "hello"}], max_tokens=4)
    assert res.ok, res.error
    assert k3_server.timeline.events["first_response"].source == "plugin client"

@pytest.mark.k3_startup(max_init_s=600)
async def test_startup(k3_server):
    import asyncio
    tl = k3_server.timeline
    for _ in range(50):  # uvicorn may log "Application startup complete." after the first
        if not tl.missing():  # request was already served: give the follower a moment
            break
        await asyncio.sleep(0.1)
        k3_server.refresh()
    assert tl.missing() == []
    assert tl.init_before_first_response() is True
    init, first = tl.events["engine_init_done"], tl.events["first_response"]
    assert init.source.startswith("log") and first.source.startswith("plugin")
    assert 0 < tl.init_seconds() < 600
    assert tl.events["kv_cache_sized"].data["tokens"] == 1_048_576
    assert k3_server.classify().category == "none"
'''


@pytest.mark.parametrize("testbed_release", RELEASES, indirect=True)
def test_healthy_launch_records_every_event_and_shows_the_timeline(
        pytester: pytest.Pytester, launch_command: Callable[..., str]) -> None:
    result = _run(pytester, HEALTHY, "--k3-launch", launch_command())
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*k3accept server timeline*",
        "mode: launched by the plugin; log: *server-*.log",
        "  process start * +0.0 s  *plugin (process spawned)*",
        "  model load start *log, read as written*",
        "  weights loaded * took * s *",
        "  KV cache sized * 1,048,576 tokens, max concurrency 512.00x at 2,048 tokens *",
        "  engine init done * took * s *",
        "  API server listening * http://127.0.0.1:*",
        "  application startup complete *",
        "  first successful response * POST /v1/chat/completions HTTP 200 *plugin client*",
        "classification: none (after the first successful response*"])
    assert "MISSING" not in result.stdout.str()


HEAD16 = '''
import time
import pytest

@pytest.mark.asyncio
async def test_first_request_kills_the_engine(k3_client):
    res = await k3_client.chat([{"role": "user", "content": "hello"}], max_tokens=4)
    assert res.status == 500 and "EngineCore encountered an issue" in res.error

def test_classified_as_serving_with_init_completed(k3_server):
    assert "EngineCore encountered an issue" in k3_server.http.server_errors[0]
    assert k3_server.http.health_status == 503 or k3_server.http.connection_errors
    deadline = time.monotonic() + 20
    while k3_server.classify().category != "serving" and time.monotonic() < deadline:
        time.sleep(0.5)
    cls = k3_server.classify()
    assert cls.category == "serving", cls
    assert k3_server.timeline.has("engine_init_done")
    assert not k3_server.timeline.has("first_response")
    assert cls.evidence[0].text == "EngineCore encountered a fatal error."
    assert "head_dim=16" in cls.root_cause.text

@pytest.mark.k3_startup
def test_startup():
    pass
'''


def test_engine_dying_at_first_request_is_serving_with_init_completed(
        pytester: pytest.Pytester, launch_command: Callable[..., str],
        record_property: Callable[[str, object], None]) -> None:
    result = _run(pytester, HEAD16, "--k3-launch", launch_command(variant="head16"))
    summary = _classification_line(result)
    record_property("k3_classification", summary + " | " + " | ".join(
        ln.strip() for ln in result.outlines if ln.strip().startswith("evidence ")))
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*k3_startup: no successful response after startup (serving (after init, before any "
        'successful response): "EngineCore encountered a fatal error."; root cause: '
        '"RuntimeError: Unsupported CPU attention configuration: head_dim=16*',
        "  engine init done * took * s *",
        "  first successful response      MISSING (not observed)",
        "classification: serving (after init, before any successful response; rule engine-dead*",
        "  evidence line *: EngineCore encountered a fatal error."])


OBSERVED = '''
import pytest

@pytest.mark.k3_startup(max_init_s=600)
def test_startup(k3_server):
    assert k3_server.mode == "log"
    assert k3_server.timeline.has("engine_init_done")
'''


def test_observe_only_mode_reads_an_external_servers_log(pytester: pytest.Pytester,
                                                         testbed: Any) -> None:
    result = _run(pytester, OBSERVED, "--k3-server-log", str(testbed.log_path),
                  "--k3-endpoint", testbed.base_url)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "mode: observed log; log: *",
        "  engine init done * took * s *",
        "  first successful response *",
        "classification: none (after the first successful response*"])
    assert "MISSING" not in result.stdout.str()
