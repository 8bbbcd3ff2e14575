"""``k3_headroom``, ``k3_slo``, ``k3_load`` and ``--k3-profile`` as users run them: pytester
runs of real test files against real vLLM testbed servers.

Every run gets a ``conftest.py`` that writes the session's evidence and checklist to
``evidence.json`` for the assertions here.
"""

from __future__ import annotations

import re

import json
from pathlib import Path
from typing import Any, Callable

import pytest

DATA = Path(__file__).resolve().parents[2] / "pytest_k3accept" / "data"

CONFTEST = '''
import json
from pytest_k3accept.fixtures import state_of

def pytest_sessionfinish(session):
    state = state_of(session.config)
    out = {"evidence": [e.as_dict() for e in state.evidence],
           "checklist": dict(state.checklist.statuses())}
    with open("evidence.json", "w") as f:
        json.dump(out, f)
'''


def setup(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def evidence(pytester: pytest.Pytester, kind: str) -> list[dict[str, Any]]:
    data = json.loads((pytester.path / "evidence.json").read_text())
    return [e for e in data["evidence"] if e["kind"] == kind]


def checklist(pytester: pytest.Pytester) -> dict[str, str]:
    return dict(json.loads((pytester.path / "evidence.json").read_text())["checklist"])


@pytest.mark.live
def test_light_load_passes_headroom_and_agent_set_decides_c6(pytester: pytest.Pytester,
                                                             testbed: Any) -> None:
    setup(pytester)
    pytester.makepyfile(test_target=f'''
        import pytest

        @pytest.mark.k3_headroom(concurrency=2, requests=8, context_tokens=300,
                                 output_tokens=200, prefix_tokens=150)
        def test_synthetic_target_load():
            pass  # the marker runs the target load after the body

        @pytest.mark.k3_check("C6")
        @pytest.mark.k3_headroom(profile={str(DATA / "agent_profile.toml")!r}, requests=12)
        @pytest.mark.asyncio
        async def test_agent_team(k3_load):
            result = await k3_load.run()
            assert result.summary["ok"] == 12
            assert result.request_set["name"] == "agent_requests"
    ''')
    res = pytester.runpytest("--k3-endpoint", testbed.base_url, "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2)
    heads = evidence(pytester, "headroom")
    assert [h["data"]["ok"] for h in heads] == [True, True]
    assert all(h["data"]["free_kv"] > 0.9 and h["data"]["preemptions"] == 0 for h in heads)
    loads = evidence(pytester, "load")
    assert [ld["data"]["summary"]["requests"] for ld in loads] == [8, 12]
    assert loads[0]["data"]["request_set"]["synthetic"] is True
    assert loads[1]["data"]["server"]["prefix_cache_hit_rate"] > 0
    assert {k: checklist(pytester)[k] for k in ("C6", "C9", "C10")} == {
        "C6": "pass", "C9": "pass", "C10": "not-checked"}  # C10 needs failover=True


@pytest.fixture(scope="module")
def small_kv_server(module_testbed_factory: Callable[..., Any]) -> Any:
    """A testbed server with a 3,000,000-byte KV cache (started before pytester moves HOME,
    where the testbed lives)."""
    return module_testbed_factory(kv_cache_bytes=3_000_000, max_model_len=2048)


@pytest.mark.live
def test_load_beyond_a_small_kv_cache_fails_headroom_with_numbers(
        pytester: pytest.Pytester, small_kv_server: Any) -> None:
    small = small_kv_server
    assert "KV cache size" in small.log_text()
    setup(pytester)
    pytester.makepyfile(test_overload='''
        import pytest

        # 8 sessions of 400 prompt tokens fit at admission, then decoding 400 tokens each
        # outgrows the cache: KV usage reaches 100 % and requests are preempted
        @pytest.mark.k3_headroom(concurrency=8, requests=8, context_tokens=400,
                                 output_tokens=400, max_seconds=180)
        def test_decode_outgrows_cache():
            pass

        # prompts of 1,641 tokens: only one fits at a time, the rest queue for the cache
        # (12 of them, 400 tokens out each: the last waits 11 answers, over 1 s even on a
        # machine several times faster than this one, where it waits ~6 s)
        @pytest.mark.k3_headroom(concurrency=12, requests=12, context_tokens=1641,
                                 output_tokens=400, max_seconds=180)
        def test_prompts_queue_for_cache():
            pass
    ''')
    res = pytester.runpytest("--k3-endpoint", small.base_url, "-p", "no:cacheprovider")
    res.assert_outcomes(failed=2)
    out = res.stdout.str()
    assert "NO headroom at " + small.base_url in out
    assert re.search(r"free KV cache at peak \d+\.\d% < required 10\.0%", out), out
    assert "preemptions > allowed 0" in out
    assert "requests queued for at least 1 s > allowed 0" in out
    heads = evidence(pytester, "headroom")
    assert [h["data"]["ok"] for h in heads] == [False, False]
    decode, queue = (h["data"] for h in heads)
    assert decode["peak_kv_usage"] > 0.9 and decode["preemptions"] > 0
    assert queue["sustained_waiting"] >= 1 and queue["queue_time_mean"] > 0.5
    loads = evidence(pytester, "load")
    assert all(ld["data"]["summary"]["errors"] == 0 for ld in loads)  # slow, not failing
    assert checklist(pytester)["C9"] == "fail"


@pytest.mark.live
def test_slo_breach_fails_with_measured_vs_required(pytester: pytest.Pytester,
                                                    testbed: Any) -> None:
    setup(pytester)
    pytester.makepyfile(test_slo='''
        import pytest

        @pytest.mark.k3_slo(ttft_p99=0.000001, error_rate=0.0)
        @pytest.mark.asyncio
        async def test_impossible_ttft(k3_load):
            await k3_load.run(concurrency=2, requests=4, context_tokens=200, output_tokens=8)

        @pytest.mark.k3_slo(e2e_p99=300, error_rate=0.0, goodput_ratio=1.0, goodput_e2e=300)
        def test_generous_slo_marker_runs_the_load():
            pass
    ''')
    res = pytester.runpytest("--k3-endpoint", testbed.base_url, "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.re_match_lines([r".*SLO breached by load 'default' at .*: ttft_p99 = "
                               r"[0-9.e-]+ s, required <= 1e-06 s"])
    slo = evidence(pytester, "slo")  # one judgement per run, each naming the run it judged
    loads = evidence(pytester, "load")
    assert len(loads) == 2 and len(slo) == 2
    assert {s["data"]["run_id"] for s in slo} == {ld["data"]["run_id"] for ld in loads}
    breached = [s for s in slo if not s["data"]["ok"]]
    assert len(breached) == 1 and breached[0]["data"]["breaches"][0]["name"] == "ttft_p99"


@pytest.mark.live
def test_failover_runs_the_scaled_load_on_every_replica(pytester: pytest.Pytester,
                                                        testbed: Any) -> None:
    setup(pytester)
    pytester.makepyfile(test_failover='''
        import pytest

        @pytest.mark.k3_headroom(failover=True, concurrency=2, requests=4,
                                 context_tokens=200, output_tokens=200)
        def test_survivors_carry_the_load():
            pass
    ''')
    # the same server named twice stands for two replicas
    res = pytester.runpytest("--k3-endpoint", testbed.base_url, "--k3-endpoint",
                             testbed.base_url, "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    heads = [h["data"] for h in evidence(pytester, "headroom")]
    assert [(h["ok"], h["replicas"], h["load_factor"]) for h in heads] == [(True, 2, 2.0)] * 2
    profiles = [ld["data"]["profile"] for ld in evidence(pytester, "load")]
    assert [(p["concurrency"], p["requests"]) for p in profiles] == [(4, 8)] * 2
    assert checklist(pytester)["C10"] == "pass"  # failover=True decides C10


def test_bad_profile_and_marker_values_stop_the_session(pytester: pytest.Pytester) -> None:
    bad = pytester.makefile(".toml", prof="concurency = 4\n")
    pytester.makepyfile("def test_x(): pass")
    res = pytester.runpytest("--k3-profile", str(bad), "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"--k3-profile: {bad}: concurency: unknown profile field (did you mean "
            "'concurrency'?)") in res.stderr.str()
    bad.unlink()
    pytester.makepyfile('''
        import pytest

        @pytest.mark.k3_headroom(min_free=1.5)
        def test_x():
            pass

        @pytest.mark.k3_slo(ttft_p99="fast")
        def test_y():
            pass
    ''')
    res = pytester.runpytest("-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert ("test_bad_profile_and_marker_values_stop_the_session.py::test_x: k3_headroom: "
            "headroom: min_free: expected a fraction in [0, 1], got 1.5") in res.stderr.str()


def test_headroom_without_endpoint_skips_with_the_reason(pytester: pytest.Pytester) -> None:
    good = pytester.makefile(".toml", prof="concurrency = 3\n[slo]\ne2e_p99 = 9\n")
    setup(pytester)
    pytester.makepyfile('''
        import pytest

        @pytest.mark.k3_headroom
        def test_x():
            pass

        def test_profile(k3_profile):
            assert k3_profile.concurrency == 3 and k3_profile.slo.limits == {"e2e_p99": 9.0}
    ''')
    res = pytester.runpytest("--k3-profile", str(good), "-p", "no:cacheprovider", "-rs")
    res.assert_outcomes(skipped=1, passed=1)
    res.stdout.fnmatch_lines(["*no endpoint under test: pass --k3-endpoint URL*"])
    res = pytester.runpytest("--k3-profile", str(good), "-p", "no:cacheprovider", "--k3-require")
    res.assert_outcomes(errors=1, passed=1)  # an error at setup under --k3-require
    assert checklist(pytester)["C9"] == "fail"


@pytest.mark.live
def test_profile_option_and_session_request_set(pytester: pytest.Pytester,
                                                testbed: Any) -> None:
    setup(pytester)
    prof = pytester.makefile(".toml", prof='name = "tiny"\nrequests = 3\nwarmup = 1\n'
                             "context_tokens = 300\noutput_tokens = 4\nconcurrency = 3\n")
    pytester.makepyfile('''
        import pytest

        def test_profile(k3_profile):
            assert (k3_profile.name, k3_profile.requests) == ("tiny", 3)

        @pytest.mark.asyncio
        async def test_set(k3_request_set, k3_load):
            assert len(k3_request_set) == 4  # requests + warm-up
            assert all(abs(n - 300) <= 1
                       for n in k3_request_set.meta["measured_prompt_tokens"])
            result = await k3_load.run(k3_request_set)
            assert [r.prompt_tokens for r in result.records] == \\
                k3_request_set.meta["measured_prompt_tokens"][1:]
    ''')
    res = pytester.runpytest("--k3-endpoint", testbed.base_url, "--k3-profile", str(prof),
                             "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2)
    (load,) = evidence(pytester, "load")
    assert load["data"]["profile"]["name"] == "tiny"
