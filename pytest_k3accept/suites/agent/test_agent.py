"""Agent-team acceptance: a fixed agent request set, prefix caching that really hits, and the
re-measurement procedure (same request set every step; one variable per step; no headroom at
the targets means "needs scaling", not "tuned").

The request set is the profile's ``request_set`` (``--k3-profile``: your system prompt, tool
definitions and multi-turn inputs); without one, the preset's example set (shipped with the
plugin) is checked, and C6 stays open until you fix your own. The procedure's targets and
reduced values come from the profile (``[procedure]``); step 5 needs ``--k3-launch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept.observe.load.requestset import RequestSet, RequestSetError
from pytest_k3accept.observe.load.requestset import load as load_request_set
from pytest_k3accept.suites.support import verdict_problem
from pytest_k3accept.fixtures import settings_of, state_of, unavailable

pytestmark = pytest.mark.k3_suite("agent")


@dataclass(frozen=True)
class AgentSet:
    """The suite's request set, where it came from and whether it is the team's own."""

    requests: RequestSet
    source: str
    team: bool


@pytest.fixture(scope="module")
def agent_request_set(request: pytest.FixtureRequest, k3_preset: Any,
                      k3_profile: Any) -> AgentSet:
    """The profile's request set, else the preset's example set."""
    if settings_of(request.config).profile and k3_profile.request_set:
        path, team = k3_profile.request_set, True
    elif k3_preset.suites.agent_request_set:
        path, team = k3_preset.suites.agent_request_set, False
    else:
        unavailable(request.config, "no agent request set: give request_set in the profile "
                                    "(--k3-profile) or [agent] request_set in the preset")
    try:
        return AgentSet(load_request_set(path), str(path), team)
    except RequestSetError as exc:
        pytest.fail(f"agent request set: {exc}", pytrace=False)


@pytest.mark.k3_check("C6")
@pytest.mark.asyncio
async def test_1_request_set_fixed(request: pytest.FixtureRequest, agent_request_set: AgentSet,
                                   k3_client: Any, k3_endpoint: Any, k3_profile: Any) -> None:
    """1. The agent request set is fixed: a system prompt, tool definitions, multi-turn
    inputs, every request within the served context; its fingerprint is recorded."""
    rs = agent_request_set.requests
    reqs = list(rs)
    assert any(m.get("role") == "system" for r in reqs for m in r.messages), \
        f"{agent_request_set.source}: no request carries a system prompt"
    assert any(r.tools for r in reqs), f"{agent_request_set.source}: no tool definitions"
    assert any(sum(m.get("role") == "user" for m in r.messages) > 1 for r in reqs), \
        f"{agent_request_set.source}: no multi-turn input (a request with several user turns)"
    too_long = []
    for r in reqs:
        extra = {"tools": r.tools} if r.tools else {}
        prompt = len(await k3_client.tokenize(messages=r.messages, add_generation_prompt=True,
                                              **extra))
        need = prompt + (r.max_tokens or k3_profile.output_tokens)
        if k3_endpoint.max_model_len and need > k3_endpoint.max_model_len:
            too_long.append(f"{r.id}: {prompt} prompt + output = {need} tokens")
    assert not too_long, (f"requests longer than the served max_model_len "
                          f"{k3_endpoint.max_model_len}: " + "; ".join(too_long))
    state_of(request.config).add(
        "request-set", f"fixed request set {rs.name}: {len(rs)} requests, fingerprint "
        f"{rs.fingerprint()[:12]} ({'team' if agent_request_set.team else 'shipped example'})",
        {**rs.describe(), "team": agent_request_set.team}, nodeid=request.node.nodeid)
    if not agent_request_set.team:
        unavailable(request.config, f"C6 needs YOUR request set: the shipped example "
                                    f"({agent_request_set.source}) passed these checks; put "
                                    "request_set = \"your.jsonl\" in a profile and pass "
                                    "--k3-profile")


@pytest.mark.k3_check("C9")
def test_2_prefix_caching_enabled(request: pytest.FixtureRequest, k3_metrics: Any,
                                  k3_preset: Any, k3_server_args: Any) -> None:
    """2a. Prefix caching is on in the live server (``vllm:cache_config_info``) and, where
    the preset says ``explicit``, enabled on the command line."""
    live = k3_metrics.scrape().prefix_caching_enabled()
    assert live is not None, "the server's /metrics has no cache_config_info"
    assert live, "prefix caching is OFF in the live server (--enable-prefix-caching)"
    if k3_preset.server.prefix_caching == "explicit":
        if not k3_server_args.known:
            unavailable(request.config, "prefix caching is on, but whether it was enabled "
                                        f"explicitly is unknown: {k3_server_args.source}")
        assert k3_server_args.get("enable_prefix_caching") is True, (
            f"the preset {k3_preset.name!r} wants --enable-prefix-caching given explicitly "
            "(it is on by default only for some models and releases)")


@pytest.mark.k3_check("C9")
def test_2_cache_config_as_expected(request: pytest.FixtureRequest, k3_metrics: Any,
                                    k3_preset: Any) -> None:
    """2a. The live cache config (``vllm:cache_config_info``) is what the recipe and preset
    expect: prefix caching on, ``mamba_cache_mode`` (``align`` for K3's KDA layers), the
    recipe's ``--prefix-match-unit``, block size and KV-cache dtype; each message names the
    expected value, who expects it and the live value. A label the server does not export is
    unknown (not a pass)."""
    from pytest_k3accept.checks.prefix_ab.expect import FAIL, UNKNOWN, check, summary

    recipe = getattr(k3_preset, "recipe", None)
    results = check(k3_preset.server, k3_metrics.scrape().cache_config(), preset=k3_preset.name,
                    recipe=Path(recipe.file).name if recipe is not None else None)
    if not results:
        unavailable(request.config, k3_preset.absent("cache expectation"))
    state_of(request.config).add("cache-expectations", summary(results),
                                 {"expectations": [r.as_dict() for r in results]},
                                 nodeid=request.node.nodeid)
    failed = [r.message for r in results if r.status == FAIL]
    assert not failed, "the live cache config is not what is expected:\n" + "\n".join(failed)
    unknown = [r.message for r in results if r.status == UNKNOWN]
    if unknown:
        unavailable(request.config, "; ".join(unknown))


@pytest.mark.k3_check("C9")
@pytest.mark.asyncio
async def test_2_prefix_cache_hits(agent_request_set: AgentSet, k3_load: Any,
                                   k3_preset: Any, request: pytest.FixtureRequest) -> None:
    """2b. Cache on: the request set, run once at concurrency 1, really hits the prefix
    cache (``prefix_cache_hits_total`` grows), not just the flag."""
    rs = agent_request_set.requests
    profile = k3_load.profile.replace("agent suite: prefix-cache hits", concurrency=1, rate=None,
                                      requests=len(rs), warmup=0)
    result = await k3_load.run(rs, profile=profile)
    assert result.summary["errors"] == 0, f"requests failed: {result.line()}"
    rate = (result.server or {}).get("prefix_cache_hit_rate")
    if rate is None:
        unavailable(request.config, "the prefix-cache hit rate is unknown (no vLLM /metrics)")
    want = k3_preset.server.min_prefix_cache_hit_rate
    assert rate > 0 and rate >= want, (
        f"prefix-cache hit rate {rate:.1%} on a set that repeats its system prompt and tools "
        f"(the preset wants >= {want:.0%}): caching is on but not hitting")


@pytest.mark.k3_check("C8")
def test_2_prefix_cache_on_vs_off(k3_prefix_ab: Any) -> None:
    """2c. Prefix caching on vs off on the same request set (a second --k3-endpoint, or a
    relaunch with --k3-launch)."""
    assert k3_prefix_ab.ok, k3_prefix_ab.message


@pytest.mark.k3_check("C7")
def test_3_remeasurement_procedure(k3_procedure: Any) -> None:
    """3-7. The re-measurement procedure: baseline at the target with the cache on, lower
    concurrency, lower context, cache retention (--k3-launch only), restore the targets;
    one variable per step."""
    failed = [s.line() for s in k3_procedure.steps if s.status == "failed"]
    assert not failed, "procedure steps failed:\n" + "\n".join(failed)
    assert k3_procedure.one_variable, ("more than one variable changed in a step: "
                                       + "; ".join(k3_procedure.problems))


@pytest.mark.k3_check("C11")
def test_7_verdict(k3_verdict: Any) -> None:
    """7. The verdict: keep, or accept the reduced limits as the contract; no headroom at
    the targets is "scale", never "tuned"."""
    problem = verdict_problem(k3_verdict)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
