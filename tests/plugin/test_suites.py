"""The ready suites as users run them: ``pytest --pyargs pytest_k3accept.suites.<name>`` (and
the checkout's ``suites/<name>/`` entry files) in pytester directories, against the real
vLLM CPU testbed where they need a server. Outcomes, checklist statuses and verdicts are read
from the reproduction record (``--k3-record``) each run writes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

try:  # load matplotlib (and numpy) out here: pytester's in-process runs drop the modules
    import matplotlib.backends.backend_agg  # noqa: F401  # they import, and numpy cannot
    import matplotlib.figure  # noqa: F401  # be imported twice in one process
except ImportError:  # charts are optional
    pass

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "pytest_k3accept" / "data"
OUT = ("-p", "no:cacheprovider", "-rs", "--k3-record", "record.json", "--k3-artifacts",
       "artifacts", "-o", "asyncio_default_fixture_loop_scope=function")
COLLECT = '''
import json

def pytest_collection_finish(session):
    out = {item.nodeid: [str(a) for m in item.iter_markers("k3_check") for a in m.args]
           for item in session.items}
    with open("collected.json", "w") as f:
        json.dump(out, f)
'''


def run_suite(pytester: pytest.Pytester, name: str, *args: str) -> tuple[Any, dict[str, Any]]:
    """Run one suite from the installed package; return the result and the record."""
    result = pytester.runpytest("--pyargs", f"pytest_k3accept.suites.{name}", *OUT, *args)
    path = pytester.path / "record.json"
    assert path.is_file(), result.stdout.str()[-3000:]
    return result, json.loads(path.read_text())


def statuses(record: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in record["checklist"]}


def skip_reasons(result: Any) -> str:
    return "\n".join(line for line in result.outlines if line.startswith("SKIPPED"))


def old_driver_facts(tmp: Path) -> Path:
    """The real H200 facts (docs/gpu-check/node.json) with an R535 driver and CUDA 12."""
    facts = json.loads((ROOT / "docs" / "gpu-check" / "node.json").read_text())
    facts.update(driver_version="535.183.01", cuda_driver_version="12.2", cuda_runtime="12.2.2")
    path = tmp / "old-node.json"
    path.write_text(json.dumps(facts))
    return path


# --------------------------------------------------------------------- no server needed

def test_every_suite_test_carries_its_checklist_id(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(COLLECT)
    result = pytester.runpytest("--pyargs", "pytest_k3accept.suites", "--collect-only", "-q",
                                "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    packaged = json.loads((pytester.path / "collected.json").read_text())
    by_suite = {s: [n for n in packaged if n.split("::")[0].endswith(f"{s}/test_{s}.py")]
                for s in ("poc", "platform", "agent", "production")}
    assert all(by_suite.values()), by_suite
    assert all(ids for ids in packaged.values()), [n for n, i in packaged.items() if not i]
    # the checkout's entry files collect the same tests with the same ids
    shutil.copytree(ROOT / "suites", pytester.path / "suites",
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert not list((pytester.path / "suites").rglob("__init__.py"))
    result = pytester.runpytest("suites", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    checkout = json.loads((pytester.path / "collected.json").read_text())
    short = {n.split("::")[-1]: ids for n, ids in packaged.items()}
    assert {n.split("::")[-1]: ids for n, ids in checkout.items()} == short
    assert all(n.startswith("suites/") for n in checkout)


def test_preset_expectations_become_markers(pytester: pytest.Pytester) -> None:
    """k3_expect reads the preset at collection; launching the testbed without a preset
    selects the testbed preset (the default kimi-k3 expectations cannot hold there)."""
    pytester.makeconftest(COLLECT.replace('[str(a) for m in item.iter_markers("k3_check") '
                                          'for a in m.args]',
                                          '[repr(m.kwargs) if m.name.startswith("k3_h") else '
                                          'm.name for m in item.iter_markers()]'))
    args = ("--pyargs", "pytest_k3accept.suites", "--collect-only", "-q", "-p",
            "no:cacheprovider")

    def marks(*extra: str) -> dict[str, list[str]]:
        assert pytester.runpytest(*args, *extra).ret == 0
        found = json.loads((pytester.path / "collected.json").read_text())
        return {n.split("/")[-1]: m for n, m in found.items()}
    k3 = marks()
    assert "k3_driver" in k3["test_poc.py::test_host_driver"]
    assert "skip" not in k3["test_poc.py::test_host_driver"]
    target = [m for m in k3["test_production.py::test_target_load_slos_and_headroom"]
              if m.startswith("{")]
    assert "'context_tokens': 131072" in target[0] and "'concurrency': 16" in target[0]
    assert any("'failover': True" in m for m in k3["test_production.py::test_failover_headroom"])
    assert "k3_slo" in k3["test_production.py::test_target_load_slos_and_headroom"]
    tb = marks("--k3-launch", "testbed")
    assert "skip" in tb["test_poc.py::test_host_driver"]
    assert "k3_driver" not in tb["test_poc.py::test_host_driver"]
    kept = marks("--k3-launch", "testbed", "--k3-preset", "kimi-k3")
    assert "k3_driver" in kept["test_poc.py::test_host_driver"]


def test_bad_preset_stops_the_run_naming_file_and_field(pytester: pytest.Pytester) -> None:
    bad = pytester.makefile(".toml", team='[environment]\ngpus = "eight"\n')
    result = pytester.runpytest("--pyargs", "pytest_k3accept.suites.poc", "--k3-preset",
                                str(bad), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{bad}: environment.gpus: expected a whole number >= 1, "
                                 "got 'eight'*"])
    result = pytester.runpytest("--pyargs", "pytest_k3accept.suites.poc", "--k3-preset",
                                "kimi-k2", "-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*no shipped preset of that name (did you mean 'kimi-k3'?)*"])
    pytester.makepyfile(test_mine='import pytest\n\n@pytest.mark.k3_suite("qa")\n'
                                  'def test_x():\n    pass\n')
    result = pytester.runpytest("test_mine.py", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_mine.py::test_x: @k3_suite takes one audience, one of "
                                 "poc, platform, agent, team, production; got ('qa',)*"])


def test_poc_without_endpoint_skips_and_fails_under_require(pytester: pytest.Pytester) -> None:
    result, rec = run_suite(pytester, "poc", "--k3-preset", "testbed")
    result.assert_outcomes(skipped=10)
    assert "no endpoint under test: pass --k3-endpoint URL" in skip_reasons(result)
    assert rec["verdict"]["name"] == "undecided"
    result, rec = run_suite(pytester, "poc", "--k3-preset", "testbed", "--k3-require")
    # the request tests error in setup (no endpoint), the server and layers tests fail;
    # the checks the preset leaves out stay skipped
    result.assert_outcomes(failed=3, errors=4, skipped=3)
    assert statuses(rec)["S1"] == "fail" and statuses(rec)["C4"] == "skip"


def test_suite_items_reach_the_xdist_controller(pytester: pytest.Pytester) -> None:
    """Under pytest-xdist the controller collects nothing: it still knows the POC's items."""
    pytest.importorskip("xdist")
    result, rec = run_suite(pytester, "poc", "--k3-preset", "testbed", "-n", "2")
    result.assert_outcomes(skipped=10)
    ids = [c["id"] for c in rec["checklist"]]
    assert ids[-3:] == ["S1", "S2", "S3"] and "S4" not in ids
    assert statuses(rec)["S1"] == "skip"


def test_poc_stops_on_real_h200_facts_with_move_environment(pytester: pytest.Pytester) -> None:
    """Real facts collected on one H200 (docs/gpu-check): driver R580 and CUDA 13 pass, but 1
    GPU is not the 8+ the K3 recipe needs -> required parallelism unavailable."""
    facts = ROOT / "docs" / "gpu-check" / "node.json"
    result, rec = run_suite(pytester, "poc", "--k3-host-facts", str(facts))
    st = statuses(rec)
    assert (st["C3"], st["C4"], st["C5"]) == ("pass", "pass", "fail")
    result.stdout.fnmatch_lines(["*ENVIRONMENT FAILURE (C5 topology)*"])
    assert rec["verdict"]["name"] == "move-environment"
    assert rec["verdict"]["reasons"][0].startswith("environment (C5 topology)")
    # an old host driver: the image/driver mismatch stop condition
    result, rec = run_suite(pytester, "poc", "--k3-host-facts",
                            str(old_driver_facts(pytester.path)))
    st = statuses(rec)
    assert (st["C3"], st["C4"]) == ("fail", "fail")
    assert rec["verdict"]["name"] == "move-environment"
    assert any("driver" in a for a in rec["verdict"]["advice"])


# --------------------------------------------------------------------- real testbed

@pytest.mark.live
def test_poc_on_the_testbed_ends_functional_only(pytester: pytest.Pytester,
                                                 testbed: Any) -> None:
    result, rec = run_suite(pytester, "poc", "--k3-endpoint", testbed.base_url,
                            "--k3-preset", "testbed")
    result.assert_outcomes(passed=3, skipped=7)
    st = statuses(rec)
    # S2 is decided by two tests here, one skipped (no parseable tool call from a random
    # model): a pass beside a skip is a skip, never a pass
    assert (st["S1"], st["S2"], st["S3"]) == ("pass", "skip", "pass")
    assert rec["verdict"]["name"] == "functional-only"
    assert "audience is POC: results are functional verification only" in rec["verdict"][
        "reasons"]
    reasons = skip_reasons(result)
    assert "preset 'testbed'" in reasons and "has no GPU" in reasons
    assert "random-weight model never emits a parseable tool call" in reasons
    assert "no server observed" in reasons  # k3_startup and the classification need a log


@pytest.mark.live
def test_poc_with_the_server_log_compares_parsers_with_the_preset(pytester: pytest.Pytester,
                                                                  testbed: Any) -> None:
    """With the server's log, init vs first response (C2), the failure classification (C1)
    and the parser names from the startup arguments are checked too; the default kimi-k3
    preset then fails the tool-call test on the testbed's hermes parser."""
    log = ("--k3-endpoint", testbed.base_url, "--k3-server-log", str(testbed.log_path))
    result, rec = run_suite(pytester, "poc", *log, "--k3-preset", "testbed")
    result.assert_outcomes(passed=5, skipped=5)
    st = statuses(rec)
    assert (st["C1"], st["C2"], st["S2"]) == ("pass", "pass", "skip")  # S2: a pass and a skip
    [args] = [e["data"]["args"] for e in rec["evidence"] if e["kind"] == "server-args"]
    assert args["tool_call_parser"] == "hermes" and args["max_model_len"] == 2048
    assert rec["verdict"]["name"] == "functional-only"
    result, rec = run_suite(pytester, "poc", *log)  # the default preset: kimi-k3
    result.stdout.fnmatch_lines(["*--tool-call-parser is 'hermes'; the preset 'kimi-k3 + recipe "
                                 "Kimi-K3 2026-08-15 b300/single_node_tp' expects 'kimi_k3'*"])
    assert statuses(rec)["S2"] == "fail"
    assert "no parsed tool call" in result.stdout.str()  # required by kimi-k3


@pytest.mark.live
def test_poc_oom_before_weight_mapping_moves_the_environment(
        pytester: pytest.Pytester, testbed_cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose weights do not fit (the testbed's 'huge' variant) fails while loading:
    a POC stop condition, never something to tune."""
    from pytest_k3accept import testbed
    from pytest_k3accept.observe.server.launch import free_port

    monkeypatch.setenv("K3ACCEPT_CACHE", testbed_cache)
    command = testbed.testbed_launch_command(free_port(), variant="huge")
    result, rec = run_suite(pytester, "poc", "--k3-launch", command, "--k3-preset", "testbed",
                            "--k3-launch-timeout", "300")
    st = statuses(rec)
    assert (st["C1"], st["C2"]) == ("fail", "fail")
    result.stdout.fnmatch_lines(["*POC stop condition (OOM before or while the weights were "
                                 "mapped)*"])
    assert rec["verdict"]["name"] == "move-environment"
    assert any(r.startswith("loading:") for r in rec["verdict"]["reasons"])


@pytest.mark.live
def test_platform_with_launched_testbed(pytester: pytest.Pytester, testbed_cache: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_CACHE", testbed_cache)
    result, rec = run_suite(pytester, "platform", "--k3-launch", "testbed", "--k3-preset",
                            "testbed", "--k3-launch-timeout", "300")
    result.assert_outcomes(passed=3, skipped=6)  # S6 recipe arguments: no --k3-recipe
    st = statuses(rec)
    assert (st["C1"], st["C2"], st["C11"], st["S4"]) == ("pass",) * 4
    assert st["S6"] == "skip"
    assert (st["C3"], st["C4"], st["C5"]) == ("skip",) * 3
    assert rec["verdict"]["name"] == "functional-only"
    prefill = [e for e in rec["evidence"] if e["kind"] == "response"]
    assert prefill and prefill[0]["data"]["prompt_tokens"] >= 0.9 * 1900
    [args] = [e["data"]["args"] for e in rec["evidence"] if e["kind"] == "server-args"]
    assert args["tool_call_parser"] == "hermes" and args["enable_auto_tool_choice"] is True
    split = [e for e in rec["evidence"] if e["kind"] == "failure-split"]
    assert split and split[-1]["data"] == {"category": "none", "phase": split[-1]["data"][
        "phase"], "connection_errors": 0, "server_errors": 0}


@pytest.mark.live
def test_agent_with_its_request_set_ends_keep(pytester: pytest.Pytester, testbed: Any) -> None:
    # the same requests at a lower context (step 4): single turns, a one-line system prompt
    lines = [json.loads(x) for x in (DATA / "agent_requests.jsonl").read_text().splitlines()]
    short = [{**r, "messages": [{"role": "system", "content": "You are an operations agent."},
                                r["messages"][-1]]} for r in lines if "conversation" not in r]
    pytester.makefile(".jsonl", reduced="\n".join(json.dumps(r) for r in short))
    profile = pytester.makefile(".toml", team=f'''
        name = "agent-team"
        request_set = "{DATA / 'agent_requests.jsonl'}"
        concurrency = 2
        requests = 10
        output_tokens = 16
        context_tokens = 1000
        ignore_eos = true
        [slo]
        ttft_p99 = 60.0
        error_rate = 0.0
        [procedure]
        reduced_concurrency = 1
        reduced_context_tokens = 300
        reduced_request_set = "reduced.jsonl"
    ''')
    result, rec = run_suite(pytester, "agent", "--k3-endpoint", testbed.base_url,
                            "--k3-preset", "testbed", "--k3-profile", str(profile))
    result.assert_outcomes(passed=6, skipped=1)
    st = statuses(rec)
    assert (st["C6"], st["C7"], st["C9"], st["C11"]) == ("pass",) * 4
    cache = [e for e in rec["evidence"] if e["kind"] == "cache-expectations"][0]["data"]
    assert [(x["label"], x["status"], x["live"]) for x in cache["expectations"]] == [
        ("enable_prefix_caching", "pass", "True")]  # the testbed preset: prefix caching on
    assert st["C8"] == "skip"  # the A/B needs a second endpoint or --k3-launch
    assert "no cache-off side" in skip_reasons(result)
    assert rec["verdict"]["name"] == "keep"
    fixed = [e for e in rec["evidence"] if e["kind"] == "request-set"][0]["data"]
    assert fixed["team"] is True and fixed["tools"] is True and fixed["requests"] == 10
    proc = [e for e in rec["evidence"] if e["kind"] == "procedure"][0]["data"]
    ran = {s["n"]: s["status"] for s in proc["steps"]}
    assert ran[1] == ran[2] == ran[3] == ran[4] == ran[6] == "ran" and ran[5] == "not-run"
    step3 = [s for s in proc["steps"] if s["n"] == 3][0]
    assert "concurrency 2 -> 1" in json.dumps(step3)  # the [procedure] table's value
    hits = [e for e in rec["evidence"] if e["kind"] == "load"][0]["data"]
    assert hits["server"]["prefix_cache_hit_rate"] > 0.05


@pytest.mark.live
def test_production_on_a_fixed_endpoint(pytester: pytest.Pytester, testbed: Any) -> None:
    result, rec = run_suite(pytester, "production", "--k3-endpoint", testbed.base_url,
                            "--k3-preset", "testbed")
    result.assert_outcomes(passed=2, skipped=2)
    reasons = skip_reasons(result)
    assert "needs the number of replicas" in reasons
    assert "recovery after a restart needs --k3-launch" in reasons
    assert rec["verdict"]["name"] == "keep"
    load = [e for e in rec["evidence"] if e["kind"] == "load"][0]["data"]
    assert load["profile"]["context_tokens"] == 768 and load["profile"]["concurrency"] == 4
    # the team's profile gives the replicas: the load of 2 replicas runs on 1 (failover);
    # 200 tokens a request: 8 x 16 tokens ended within the first 0.25 s gauge sample on a
    # quiet machine, and headroom was then rightly undecided (peak unknown); 32 requests,
    # not 8: a CI host whose API server was starved while the engine stepped saw no sample
    # with a request running in 8
    profile = pytester.makefile(".toml", prod='''
        context_tokens = 600
        prefix_tokens = 400
        prefix_reuse = 0.9
        concurrency = 2
        requests = 32
        output_tokens = 200
        [slo]
        ttft_p99 = 60.0
        [headroom]
        replicas = 2
    ''')
    result, rec = run_suite(pytester, "production", "--k3-endpoint", testbed.base_url,
                            "--k3-preset", "testbed", "--k3-profile", str(profile))
    result.assert_outcomes(passed=3, skipped=1)
    heads = [e["data"] for e in rec["evidence"] if e["kind"] == "headroom"]
    assert [h["failover"] for h in heads] == [False, True] and all(h["ok"] for h in heads)
    assert statuses(rec)["C10"] == "pass" and rec["verdict"]["name"] == "keep"


@pytest.mark.live
def test_production_restart_recovery_in_launch_mode(pytester: pytest.Pytester,
                                                    testbed_cache: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_CACHE", testbed_cache)
    # a long context, so the crash finds the burst in flight however fast the machine
    result, rec = run_suite(pytester, "production", "-k", "restart",
                            "--k3-launch", "testbed --max-model-len 8192",
                            "--k3-preset", "testbed", "--k3-launch-timeout", "300")
    result.assert_outcomes(passed=1, deselected=3)
    [ev] = [e["data"] for e in rec["evidence"] if e["kind"] == "restart-recovery"]
    assert ev["ok"] and ev["health_status"] == 200 and ev["drained_s"] is not None
    assert ev["after_ok"] == ev["after_total"] == 16
    assert ev["restart_s"] > 0 and sum(ev["lost_at_crash"].values()) >= 1, ev
    assert ev["in_flight_at_crash"] >= 1 and ev["in_flight_seen_by"] in (
        "server gauges", "client (sent, not answered)"), ev
    assert statuses(rec)["S5"] == "pass"


TARGET_LOAD = '''
import pytest

@pytest.mark.k3_expect("target")  # the preset's target load, as the ready suites take it
@pytest.mark.asyncio
async def test_target_load(k3_load):
    # the target's shape with 48 requests instead of 12: on a fast machine 12 of them end in
    # under half a second, before a 0.25 s gauge sample has seen one in flight
    result = await k3_load.run(48)
    assert result.summary["errors"] == 0, result.line()
'''


@pytest.mark.live
def test_launched_testbed_sizes_its_kv_cache_for_the_presets_target(
        pytester: pytest.Pytester, testbed_cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--k3-launch testbed`` starts the testbed with the preset's ``kv_cache_bytes``, so
    the preset's target load (4 x (768 + 16) tokens) uses a real share of the cache (with
    1 GiB every target passed at 0.1 %), and headroom is judged on that share."""
    monkeypatch.setenv("K3ACCEPT_CACHE", testbed_cache)
    pytester.makepyfile(test_target=TARGET_LOAD)
    result = pytester.runpytest(*OUT, "--k3-launch", "testbed", "--k3-launch-timeout", "300")
    result.assert_outcomes(passed=1)
    rec = json.loads((pytester.path / "record.json").read_text())
    [launch] = [e["data"] for e in rec["evidence"] if e["kind"] == "launch"]
    [run] = [e["data"] for e in rec["evidence"] if e["kind"] == "load"]
    assert "--kv-cache-memory-bytes 8000000" in rec["reproduction"]["launch_command"]["value"]
    assert run["concurrency"] == 4 and run["context_tokens"] >= 700 and run["requests"] == 48, run
    # one 768-token request alone holds ~10 % of ~7,500 tokens (the 1 GiB default: 0.08 %);
    # how many overlap at the sampled peak depends on the machine's speed
    assert run["peak_kv"] is not None and 0.05 <= run["peak_kv"] <= 0.9, run
    [head] = [e["data"] for e in rec["evidence"] if e["kind"] == "headroom"]
    assert head["ok"] is True and head["free_kv"] <= 0.95, head  # judged on that share
    assert launch["base_url"].startswith("http://127.0.0.1:")
