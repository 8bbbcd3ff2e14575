"""Decisions reached from real vLLM testbed runs, the way users run them (pytester).

* the prefix-cache A/B between the session server (cache on) and a second server started
  with ``--no-enable-prefix-caching``: real hits on one side, none on the other; in the same
  run a light load and the procedure on a fixed endpoint (step 5 "not-run" with the reason)
  end in ``keep``;
* a POC run (one short request, concurrency 1, no observed init) ends in ``functional-only``;
* weights that cannot be loaded (``--k3-launch`` of the ``huge`` model) end in
  ``move-environment`` with the allocator's log line quoted;
* the re-measurement procedure in launch mode on a small KV cache (6 MB, ~5,600 tokens of
  the tiny model): 8 concurrent requests of 1,248 tokens fill it (no headroom), 2 hold ->
  ``accept-limits`` with the limits named; step 5 relaunches the server with a retention interval, which vLLM rejects for
  this model (it has no sliding-window or Mamba group) -> reported not-applicable.

Each ends with the verdict and its evidence in the terminal summary and in the record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.live

OUT = ["-p", "no:cacheprovider", "-rs", "--k3-record", "out/record.json"]


@pytest.fixture(autouse=True)
def _isolated(pytester: pytest.Pytester, testbed_cache: str,
              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_CACHE", testbed_cache)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def record_of(pytester: pytest.Pytester) -> dict[str, Any]:
    return json.loads((pytester.path / "out" / "record.json").read_text())  # type: ignore[no-any-return]


def verdict_section(result: pytest.RunResult) -> str:
    text = result.stdout.str()
    assert "k3accept verdict" in text, text[-3000:]
    return text.split("k3accept verdict", 1)[1]


AB_AND_LIGHT_LOAD = '''
import pytest
from pytest_k3accept.observe.load.profile import LoadProfile

def test_prefix_cache_ab(k3_prefix_ab):
    ab = k3_prefix_ab
    assert ab.ok, ab.message
    assert ab.compared and ab.shape.repeats and ab.shape.shared_tokens > 128
    assert ab.on.caching is True and ab.off.caching is False
    assert ab.on.hits > 0 and ab.on.hit_rate > 0.3
    assert ab.off.hits == 0
    print("AB:", ab.message)

@pytest.mark.asyncio
async def test_light_load(k3_load):
    light = LoadProfile(name="light", concurrency=2, requests=6, context_tokens=256,
                        output_tokens=16)
    result = await k3_load.run(profile=light)
    assert result.summary["errors"] == 0

def test_procedure_on_a_fixed_endpoint(k3_procedure):
    steps = {s.n: s for s in k3_procedure.steps}
    assert steps[5].status == "not-run" and "endpoint is fixed" in steps[5].reason
    assert [steps[n].status for n in (1, 2, 3, 4, 6, 7)] == ["ran"] * 6
    assert k3_procedure.one_variable and k3_procedure.verdict.name == "keep"

def test_verdict(k3_verdict):
    assert k3_verdict.name == "keep", k3_verdict.reasons
'''


def test_ab_hits_only_with_cache_on_and_light_load_keeps(pytester: pytest.Pytester,
                                                        testbed: Any,
                                                        testbed_factory: Any,
                                                        request: pytest.FixtureRequest) -> None:
    off = testbed_factory(args=("--no-enable-prefix-caching",))
    request.addfinalizer(off.process.stop)  # not kept for the session (a 2-core CI host)
    pytester.makepyfile(test_ab=AB_AND_LIGHT_LOAD)
    # the cache-off server is given first: sides are told apart by their live config
    result = pytester.runpytest("--k3-endpoint", off.base_url, "--k3-endpoint",
                                testbed.base_url, "-s", *OUT)
    result.assert_outcomes(passed=4)
    section = verdict_section(result)
    assert "verdict: KEEP" in section
    assert "held with headroom at concurrency 4, context 512 tokens" in section
    assert "step 5 change cache retention policy" not in section  # not capacity evidence
    rec = record_of(pytester)
    assert rec["verdict"]["name"] == "keep"
    c8 = next(i for i in rec["checklist"] if i["id"] == "C8")
    assert c8["status"] == "pass"
    assert "prefix-cache A/B passed" in result.stdout.str()


POC = '''
import pytest
from pytest_k3accept.observe.load.profile import LoadProfile

@pytest.mark.asyncio
async def test_first_response(k3_load):
    short = LoadProfile(name="poc", concurrency=1, requests=1, context_tokens=64,
                        output_tokens=4)
    result = await k3_load.run(profile=short)
    assert result.summary["ok"] == 1
'''


def test_poc_run_is_functional_only(pytester: pytest.Pytester, testbed: Any) -> None:
    pytester.makepyfile(test_poc=POC)
    result = pytester.runpytest("--k3-endpoint", testbed.base_url, *OUT)
    result.assert_outcomes(passed=1)
    section = verdict_section(result)
    assert "verdict: FUNCTIONAL-ONLY" in section
    assert "not counted as capacity: concurrency-1 success" in section
    assert record_of(pytester)["verdict"]["name"] == "functional-only"


def test_weights_that_do_not_load_move_environment(pytester: pytest.Pytester) -> None:
    from pytest_k3accept import testbed
    from pytest_k3accept.observe.server.launch import free_port

    command = testbed.testbed_launch_command(free_port(), variant="huge")
    pytester.makepyfile(test_start="def test_server(k3_server):\n    pass\n")
    result = pytester.runpytest("--k3-launch", command, "--k3-launch-timeout", "240", *OUT)
    result.assert_outcomes(skipped=1)
    section = verdict_section(result)
    assert "verdict: MOVE-ENVIRONMENT" in section
    assert "can't allocate memory" in section
    assert "lowering context or concurrency will not help" in section
    rec = record_of(pytester)
    assert rec["verdict"]["name"] == "move-environment"


PROFILE = """
name = "small-kv-target"
context_tokens = 1200
output_tokens = 96
concurrency = 8
requests = 16
max_seconds = 120
"""

PROCEDURE = '''
import pytest

@pytest.mark.k3_procedure(reduced_concurrency=2, reduced_context_tokens=600)
def test_procedure(k3_procedure):
    proc = k3_procedure
    print("\\n".join(proc.lines()))
    assert proc.one_variable, proc.problems
    steps = {s.n: s for s in proc.steps}
    target = [steps[2].figures["headroom_ok"], steps[6].figures["headroom_ok"]]
    assert False in target, [steps[2].reason, steps[6].reason]
    assert steps[3].status == "ran" and steps[3].figures["headroom_ok"] is True, steps[3].reason
    assert steps[5].status == "not-applicable", steps[5].reason
    assert "retention has no effect" in steps[5].reason
    assert proc.verdict.name == "accept-limits", proc.verdict.reasons
'''


def test_procedure_in_launch_mode_accepts_limits(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_proc=PROCEDURE)
    (pytester.path / "target.toml").write_text(PROFILE)
    result = pytester.runpytest("--k3-launch", "testbed --kv-cache-memory-bytes 6000000",
                                "--k3-profile", "target.toml", "--k3-launch-timeout", "300",
                                "-s", *OUT)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "step 3 lower concurrency (vs step 2: concurrency 8 -> 2): RAN" in out
    assert "step 5 change cache retention policy" in out and "NOT-APPLICABLE" in out
    section = verdict_section(result)
    assert "verdict: ACCEPT-LIMITS" in section
    assert "limits that held: concurrency 2, context_tokens 1200" in section
    assert "did not hold with headroom" in section
    assert "[procedure step 3 lower concurrency, test_proc.py::test_procedure]" in section
    rec = record_of(pytester)
    assert rec["verdict"]["name"] == "accept-limits"
    assert rec["verdict"]["limits"]["concurrency"] == 2
    c7 = next(i for i in rec["checklist"] if i["id"] == "C7")
    assert c7["status"] == "pass"
    assert list(Path(pytester.path, "artifacts").glob("server-step5-*.log"))
