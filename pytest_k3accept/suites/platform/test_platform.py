"""Platform acceptance, in the platform team's order: host driver, CUDA 13 image, single-node
engine init, GPU topology and parallel layout, interconnect vs the all-to-all setting, one
prefill request near the target context (not a tiny one), and connection errors kept apart
from out-of-memory failures.

An environment failure ends in ``move-environment`` (fix or move before any tuning). This
suite measures no capacity: on a healthy deployment it ends in ``functional-only``; the
target load is the production suite's job. Expectations come from the preset
(``--k3-preset``) and, for the target context, the profile (``--k3-profile``).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_k3accept.suites.support import all2all_problem, layout_problems, near_target
from pytest_k3accept.fixtures import settings_of, state_of, unavailable
from pytest_k3accept.fixtures.suites import record_response

pytestmark = pytest.mark.k3_suite("platform")

PREFILL_OUTPUT = 8


@pytest.mark.k3_check("C4")
@pytest.mark.k3_expect("driver")
def test_1_host_driver(k3_host: Any) -> None:
    """1. The host driver is at least the preset's ``driver_min`` on every GPU node."""
    assert k3_host.drivers(), "no host driver reported by the host facts"


@pytest.mark.k3_check("C3")
@pytest.mark.k3_expect("cuda")
def test_2_cuda_image(k3_host: Any) -> None:
    """2. The image's CUDA runtime is the preset's (CUDA 13) and the driver supports it."""
    assert k3_host.cuda_runtimes(), "no container CUDA runtime reported by the host facts"


@pytest.mark.k3_check("C2")
@pytest.mark.k3_startup
def test_3_single_node_engine_init(k3_server: Any) -> None:
    """3. Engine init completes (weights loaded, KV cache sized, ``init engine ... took``)
    before the first response (needs --k3-launch or --k3-server-log)."""
    k3_server.refresh()
    assert k3_server.timeline.has("kv_cache_sized"), (
        "the KV cache size line ('KV cache size: N tokens') is not in the log: init did not "
        f"get that far (log: {k3_server.log_path})")


@pytest.mark.k3_check("C5")
@pytest.mark.k3_expect("topology")
def test_4_gpu_topology(k3_host: Any) -> None:
    """4a. GPU count and the interconnect match the preset's topology."""
    assert k3_host.gpu_count, "no GPU reported by the host facts"


@pytest.mark.k3_check("C5")
def test_4_parallel_layout(request: pytest.FixtureRequest, k3_preset: Any,
                           k3_server_args: Any) -> None:
    """4b. The server runs the preset's parallel layout (expert parallelism, data- and
    tensor-parallel sizes), read from its startup arguments."""
    srv = k3_preset.server
    if (srv.enable_expert_parallel, srv.min_data_parallel_size,
            srv.min_tensor_parallel_size) == (None, None, None):
        pytest.skip(k3_preset.absent("parallel layout ([server] enable_expert_parallel, "
                                     "min_data_parallel_size, min_tensor_parallel_size)"))
    if not k3_server_args.known:
        unavailable(request.config, f"parallel layout not checked: {k3_server_args.source}")
    problems = layout_problems(k3_server_args.values, expert_parallel=srv.enable_expert_parallel,
                               min_dp=srv.min_data_parallel_size,
                               min_tp=srv.min_tensor_parallel_size)
    assert not problems, ("ENVIRONMENT: the server's parallel layout does not match the "
                          f"preset {k3_preset.name!r}: " + "; ".join(problems))


@pytest.mark.k3_check("C5")
def test_4_interconnect_vs_all_to_all(request: pytest.FixtureRequest, k3_preset: Any,
                                      k3_server_args: Any) -> None:
    """4c. The ``--all2all-backend`` of the expert-parallel all-to-all fits the interconnect
    the host facts show (NVLink within a node, RDMA across nodes)."""
    allowed = k3_preset.server.all2all_backends
    if not allowed:
        pytest.skip(k3_preset.absent("all-to-all backends ([server.all2all_backends])"))
    if not k3_server_args.known:
        unavailable(request.config, f"all-to-all setting not checked: {k3_server_args.source}")
    if not k3_server_args.get("enable_expert_parallel"):
        pytest.skip("not checked: the server runs without expert parallelism, so no all-to-all "
                    "(see the parallel-layout test)")
    from pytest_k3accept.fixtures.host import host_facts

    backend = str(k3_server_args.get("all2all_backend", "allgather_reducescatter"))
    ok, words = all2all_problem(backend, host_facts(request.config).interconnects(), allowed)
    state_of(request.config).add("all2all", words, {"backend": backend, "ok": ok},
                                 nodeid=request.node.nodeid)
    if ok is None:
        unavailable(request.config, f"interconnect unknown: {words}")
    assert ok, f"ENVIRONMENT: {words}"


@pytest.mark.k3_check("S6")
def test_4_recipe_arguments(request: pytest.FixtureRequest, k3_recipe: Any,
                            k3_server_args: Any) -> None:
    """4d. The server runs the recipe profile's arguments and environment (``--k3-recipe``,
    ``--k3-hardware``, ``--k3-strategy``): each argument from its log's ``non-default args``
    line (else the launch command), each environment variable from the launch command.
    A different value fails naming the recipe value, the live one and the recipe (file, date,
    profile); an argument or variable the server does not show is unknown, never a pass. Host
    GPUs of other hardware than the profile's (``NVIDIA H200`` against the default ``b300``)
    fail naming the ``--k3-hardware`` that fits; a pd_cluster server is judged as its pool."""
    from pytest_k3accept.checks.recipe_args import (COMMAND, LOG, check_hardware, check_profile,
                                                    profile_keys, summary)
    from pytest_k3accept.output.reproduction import split_command
    from pytest_k3accept.suites.support import command_args, server_args

    if k3_recipe is None:
        pytest.skip("not checked: no recipe (no --k3-recipe, and the preset names none in "
                    "[recipe]): the official recipe's profile gives the arguments and "
                    "environment to compare")
    keys = profile_keys(k3_recipe)
    ident = k3_recipe.recipe.identity()
    where = (f"{ident.get('file')} ({ident.get('date_updated') or 'undated'}, "
             f"{k3_recipe.label()})")
    live_args: dict[str, Any] | None = None
    live_env: dict[str, str] | None = None
    kv_transfer = None
    source = LOG
    if k3_server_args.known:
        with open(k3_server_args.source, encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if "non-default args:" in line]
        live_args = server_args(lines, keys=keys)
        kv_transfer = lines[-1] if live_args is not None and "kv_role" in lines[-1] else None
    launch = settings_of(request.config).launch
    if launch and launch.split()[:1] != ["testbed"]:
        from_cmd, live_env = command_args(split_command(launch), keys)
        if live_args is None:
            live_args, source = from_cmd, COMMAND
    from pytest_k3accept.fixtures.host import host_facts

    gpus = [g.name for n in host_facts(request.config).gpu_nodes for g in n.gpus if g.name]
    checks = check_hardware(k3_recipe, gpus, where=where) + check_profile(
        k3_recipe, live_args, live_env, source=source, where=where, kv_transfer=kv_transfer)
    failed, unknown = summary(checks)
    state_of(request.config).add(
        "recipe-args", f"recipe {where}: {len(checks) - len(failed) - len(unknown)} as the "
        f"recipe says, {len(failed)} different, {len(unknown)} unknown",
        {"recipe": ident, "profile": k3_recipe.label(), "source": source,
         "checks": [c.as_dict() for c in checks]}, nodeid=request.node.nodeid)
    assert not failed, (f"the server differs from the recipe {where}: " + "; ".join(failed)
                        + (f" (unknown: {len(unknown)})" if unknown else ""))
    pool = [c.message for c in checks if c.name == "pd_cluster_pool"]
    if pool:
        unavailable(request.config, pool[0])
    if unknown and len(unknown) == len([c for c in checks if c.name != "hardware"]):
        unavailable(request.config, "recipe arguments not checked: " + unknown[0])


@pytest.mark.k3_check("S4")
@pytest.mark.asyncio
async def test_5_prefill_near_target(request: pytest.FixtureRequest, k3_endpoint: Any,
                                     k3_client: Any, k3_preset: Any, k3_profile: Any) -> None:
    """5. One prefill request near the target context (the preset's ``prefill_tokens``, else
    the profile's or preset's target ``context_tokens``), not a tiny one."""
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.synthetic import generate

    given = settings_of(request.config).profile is not None
    target = k3_preset.suites.prefill_tokens or (
        k3_profile.context_tokens if given else k3_preset.targets.context_tokens)
    fraction = k3_preset.suites.prefill_fraction
    tokens, why = near_target(target, k3_endpoint.max_model_len, PREFILL_OUTPUT, fraction)
    assert why is None, why
    rs = await generate(k3_client, LoadProfile(name="near-target-prefill",
                                               context_tokens=tokens, requests=1,
                                               output_tokens=PREFILL_OUTPUT))
    res = await k3_client.chat(rs.requests[0].messages, stream=True, max_tokens=PREFILL_OUTPUT)
    kind = {"connection": "a CONNECTION error (network/transport; not an out-of-memory)",
            "http-5xx": "a SERVER error (see the failure classification: OOM or otherwise)",
            "timeout": "a TIMEOUT", "http-4xx": "REJECTED by the server"}.get(
        res.error_kind or "", "an error")
    assert res.ok, f"the {tokens}-token prefill ended in {kind}: HTTP {res.status}: {res.error}"
    assert (res.prompt_tokens or 0) >= fraction * target, (
        f"the prefill carried {res.prompt_tokens} prompt tokens, less than {fraction:.0%} of "
        f"the target context {target}")
    record_response(request, f"near-target prefill ({res.prompt_tokens} of {target} tokens)",
                    res)


@pytest.mark.k3_check("C1", "C11")
def test_6_connection_errors_apart_from_oom(request: pytest.FixtureRequest) -> None:
    """6. Connection errors and out-of-memory are different events: the server's life is
    classified (OOM by phase, connection failures on their own) and the client's transport
    errors are kept apart from server errors (needs --k3-launch or --k3-server-log)."""
    from pytest_k3accept.fixtures.server import http_record, observe

    watch = observe(request.config)
    cls = watch.classify()
    rec = http_record(request.config)
    data = {"category": cls.category, "phase": cls.phase,
            "connection_errors": len(rec.connection_errors),
            "server_errors": len(rec.server_errors)}
    state_of(request.config).add(
        "failure-split", f"server life: {cls.summary()}; client: {data['connection_errors']} "
        f"connection error(s), {data['server_errors']} server error(s)", data,
        nodeid=request.node.nodeid)
    if cls.category == "connection":
        pytest.fail(f"CONNECTION failure, not an out-of-memory: {cls.summary()}. Fix the "
                    f"network / NCCL / RDMA path; do not tune memory. {cls.advice}",
                    pytrace=False)
    if cls.category in ("loading", "kv-capacity-at-init", "serving-oom"):
        pytest.fail(f"OUT OF MEMORY ({cls.category}, {cls.phase}), not a connection problem: "
                    f"{cls.summary()}. {cls.advice}", pytrace=False)
    assert not cls.failed, f"the server failed: {cls.summary()}. {cls.advice}"
    assert not rec.connection_errors, (
        "the client saw connection errors while the server log shows no failure (network "
        "between client and server, not OOM): " + "; ".join(rec.connection_errors[:3]))
