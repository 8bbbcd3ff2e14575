"""POC acceptance (single researcher): short context, concurrency 1, one feature at a time.

The environment stop conditions come first (image vs driver, parallel topology, an OOM
before the weights were mapped: each is a ``move-environment`` verdict, not something to
tune), then engine init and the first response as two events, then one plain round trip,
one tool call and one streamed response, each on its own. At best this suite ends in
``functional-only``: it never establishes production capacity.

Expectations come from the preset (``--k3-preset``); see docs/suites.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_k3accept.suites.support import tool_call_problems, tool_call_rate
from pytest_k3accept.fixtures import state_of, unavailable
from pytest_k3accept.fixtures.suites import record_response

pytestmark = pytest.mark.k3_suite("poc")

SHORT = [{"role": "user", "content": "Reply with a short greeting."}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
ASK_TOOL = [{"role": "user", "content": "What is the weather in Paris right now? Use the "
                                        "get_weather tool."}]
#: classification categories that are POC stop-and-move conditions
STOP = {"environment": "image vs driver mismatch", "loading": "OOM before or while the "
        "weights were mapped", "connection": "the required parallel/interconnect path failed"}


@pytest.mark.k3_check("C4")
@pytest.mark.k3_expect("driver")
def test_host_driver(k3_host: Any) -> None:
    """Stop condition: the host driver is older than the image needs (preset driver_min)."""
    assert k3_host.gpu_count, "no GPU reported by the host facts"


@pytest.mark.k3_check("C3")
@pytest.mark.k3_expect("cuda")
def test_cuda_image(k3_host: Any) -> None:
    """Stop condition: the image's CUDA runtime does not match the preset (and the driver)."""
    assert k3_host.cuda_runtimes(), "no container CUDA runtime reported by the host facts"


@pytest.mark.k3_check("C5")
@pytest.mark.k3_expect("topology")
def test_parallel_topology(k3_host: Any) -> None:
    """Stop condition: the required parallelism (GPU count, interconnect) is unavailable."""
    assert k3_host.gpu_count, "no GPU reported by the host facts"


@pytest.mark.k3_check("C2")
@pytest.mark.k3_startup
def test_init_then_first_response() -> None:
    """Engine init completion and the first response are recorded as two events, init first
    (needs --k3-launch or --k3-server-log; the marker does the checking)."""


@pytest.mark.k3_check("S1")
@pytest.mark.asyncio
async def test_api_round_trip(request: pytest.FixtureRequest, k3_client: Any,
                              k3_preset: Any) -> None:
    """One plain chat completion: short context, no tools, no streaming."""
    res = await k3_client.chat(SHORT, max_tokens=k3_preset.suites.poc_max_tokens)
    assert res.ok, f"HTTP {res.status} ({res.error_kind}): {res.error}"
    assert res.prompt_tokens and res.completion_tokens, "the answer carries no usage"
    assert res.finish_reason in ("stop", "length"), f"finish_reason {res.finish_reason!r}"
    record_response(request, "POC round trip", res)


@pytest.mark.k3_check("S2")
@pytest.mark.asyncio
async def test_tool_call_accepted(request: pytest.FixtureRequest, k3_client: Any,
                                  k3_preset: Any, k3_server_args: Any) -> None:
    """One request with a tool definition and ``tool_choice="auto"``: vLLM accepts it only
    with a tool-call parser configured; the parser names are compared with the preset when
    the server's startup arguments are known."""
    res = await k3_client.chat(ASK_TOOL, max_tokens=k3_preset.suites.poc_max_tokens,
                               tools=TOOLS, tool_choice="auto")
    assert res.ok, (f"a request with tools was refused: HTTP {res.status}: {res.error} "
                    "(vLLM needs --enable-auto-tool-choice --tool-call-parser NAME)")
    assert res.finish_reason in ("stop", "length", "tool_calls"), \
        f"finish_reason {res.finish_reason!r}"
    problems = tool_call_problems(res.tool_calls, TOOLS)
    assert not problems, "malformed tool calls: " + "; ".join(problems)
    record_response(request, "POC tool call", res)
    server = k3_preset.server
    checked = []
    if k3_server_args.known:
        for key, want in (("tool_call_parser", server.tool_call_parser),
                          ("reasoning_parser", server.reasoning_parser)):
            if want is not None:
                got = k3_server_args.get(key)
                assert got == want, (f"--{key.replace('_', '-')} is {got!r}; the preset "
                                     f"{k3_preset.name!r} expects {want!r}")
                checked.append(f"{key}={got}")
    note = (f"parsers match the preset: {', '.join(checked)}" if checked else
            f"parser names not compared: {k3_server_args.source}" if not k3_server_args.known
            else "the preset names no parser")
    state_of(request.config).add("tool-call", note, {"checked": checked,
                                                    "tool_calls": len(res.tool_calls)},
                                 nodeid=request.node.nodeid)


@pytest.mark.k3_check("S2")
@pytest.mark.asyncio
async def test_tool_call_parsed(request: pytest.FixtureRequest, k3_client: Any,
                                k3_preset: Any) -> None:
    """The model emits a tool call that the parser returns as ``tool_calls`` (only where
    the preset sets ``server.require_parsed_tool_call``)."""
    if not k3_preset.server.require_parsed_tool_call:
        why = k3_preset.server.parsed_tool_call_reason or "require_parsed_tool_call = false"
        pytest.skip(f"not checked: preset {k3_preset.name!r} does not require a parsed tool "
                    f"call: {why}")
    sp = k3_preset.suites
    answers = []
    for _ in range(sp.poc_tool_call_attempts):
        res = await k3_client.chat(ASK_TOOL, max_tokens=sp.poc_tool_call_max_tokens,
                                   tools=TOOLS, tool_choice="auto")
        assert res.ok, f"HTTP {res.status}: {res.error}"
        answers.append(res)
    judged = tool_call_rate([r.tool_calls for r in answers], TOOLS, sp.poc_min_tool_call_rate)
    state_of(request.config).add("tool-call-rate", judged.line(), judged.as_dict(),
                                 nodeid=request.node.nodeid)
    last = answers[-1]
    assert judged.parsed, (f"no parsed tool call in {judged.attempts} attempt(s) "
                           f"(finish_reason {last.finish_reason!r}, text {last.text[:200]!r}): "
                           "check --tool-call-parser against the model")
    assert judged.ok, (f"tool calls: {judged.line()}: " + "; ".join(judged.problems[:3])
                       + " (the recipe: validate against the schema and retry)")
    record_response(request, "POC parsed tool call", next(r for r in answers if r.tool_calls))


@pytest.mark.k3_check("S3")
@pytest.mark.asyncio
async def test_streamed_response(request: pytest.FixtureRequest, k3_client: Any,
                                 k3_preset: Any) -> None:
    """One streamed response: output arrives as a stream and usage comes at its end."""
    res = await k3_client.chat(SHORT, stream=True, max_tokens=k3_preset.suites.poc_max_tokens)
    assert res.ok, f"HTTP {res.status} ({res.error_kind}): {res.error}"
    assert res.ttft is not None and res.chunks > 0, "no output arrived in the stream"
    assert res.completion_tokens, "the stream carried no usage (stream_options.include_usage)"
    record_response(request, "POC streamed response", res)


@pytest.mark.k3_check("C1", "C11")
def test_failures_classified(request: pytest.FixtureRequest) -> None:
    """Whatever went wrong with the server so far is classified by phase; the POC stop
    conditions (environment, OOM before the weights were mapped, the interconnect) fail
    here with the move-environment advice (needs --k3-launch or --k3-server-log)."""
    from pytest_k3accept.fixtures.server import observe

    watch = observe(request.config)
    cls = watch.classify()
    state_of(request.config).add("failure-split", f"POC: server life {cls.summary()}",
                                 {"category": cls.category, "phase": cls.phase},
                                 nodeid=request.node.nodeid)
    if cls.category in STOP:
        pytest.fail(f"POC stop condition ({STOP[cls.category]}): {cls.summary()}. Stop and "
                    f"move the environment; do not tune. {cls.advice}", pytrace=False)
    assert not cls.failed, f"the server failed: {cls.summary()}. {cls.advice}"


@pytest.mark.k3_check("C12")
def test_changeable_layers(k3_layers: Any, request: pytest.FixtureRequest) -> None:
    """Which layers can be changed here is recorded (the profile's [layers] table); when
    only the container can be changed, a driver or interconnect problem means moving."""
    if not k3_layers.recorded:
        unavailable(request.config, f"C12 not recorded: {k3_layers.source}; add a [layers] "
                                    "table (driver, container, network = fixed|changeable) to "
                                    "the profile given with --k3-profile")
    assert k3_layers.recorded
