"""Suite wiring: ``k3_preset`` and ``k3_server_args`` fixtures, ``k3_expect`` and ``k3_suite``
markers, and the suites' own checklist items (S1-S5).

``k3_expect("driver", "cuda", "topology", "target", "slo", **extra)`` turns the preset's
expectations into the plugin's markers at collection time (``k3_driver(min=...)``,
``k3_cuda(...)``, ``k3_topology(...)``, ``k3_headroom(**targets)``, ``k3_slo(**limits)``), so a
suite file never hard-codes a number. An expectation the preset does not set becomes a skip
naming the preset. ``k3_suite("poc")`` marks a suite module; when the collected tests belong
to one audience, it is recorded as evidence (the verdict of a POC run is at best
``functional-only``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .. import checklist
from ..presets import Preset, PresetError, load_preset
from . import profile_of, settings_of, state_of

pytest.register_assert_rewrite("pytest_k3accept.suites")

PRESET_KEY = pytest.StashKey[Preset]()
REGISTERED_KEY = pytest.StashKey[list[str]]()

#: the suites' own checklist items (shown after C1-C12 when a suite test decides them)
SUITE_ITEMS: dict[str, tuple[str, str]] = {
    "S1": ("api-round-trip", "one plain chat request returns a well-formed answer with usage "
           "(short context, concurrency 1)"),
    "S2": ("tool-call", "requests with tool definitions are accepted by the configured "
           "tool-call parser (and, where the preset requires it, parsed into tool calls)"),
    "S3": ("streaming", "a streamed response delivers output and usage"),
    "S4": ("near-target-prefill", "one prefill request near the target context completes"),
    "S5": ("restart-recovery", "after a server restart /health returns and the queue drains"),
}
#: suite audience (``k3_suite`` argument) -> the verdict's audience
AUDIENCES = {"poc": "poc", "platform": "platform", "agent": "team", "team": "team",
             "production": "production"}
EXPECTATIONS = ("driver", "cuda", "topology", "target", "slo")
#: suite file -> the suite items its tests decide (for the xdist controller)
SUITE_FILES = {"test_poc.py": ("S1", "S2", "S3"), "test_platform.py": ("S4",),
               "test_agent.py": (), "test_production.py": ("S5",)}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "k3_expect(*names, **extra): apply the preset's expectations as markers: 'driver' -> "
        "k3_driver, 'cuda' -> k3_cuda, 'topology' -> k3_topology, 'target' -> k3_headroom "
        "with the preset's target load (unless --k3-profile gives one; extra values such as "
        "failover=True are added), 'slo' -> k3_slo with the preset's SLOs (unless the profile "
        "has [slo]); an expectation the preset lacks skips the test with the reason")
    config.addinivalue_line(
        "markers",
        "k3_suite(audience): the module belongs to a ready suite for 'poc', 'platform', "
        "'agent' (team) or 'production'; the audience is recorded for the verdict when all "
        "collected tests share it")
    try:
        config.stash[PRESET_KEY] = load_preset(preset_name(config))
    except PresetError as exc:
        raise pytest.UsageError(str(exc)) from None


def preset_name(config: pytest.Config) -> str:
    """``--k3-preset`` (or its ini value); when neither is given and the run launches the
    embedded CPU testbed (``--k3-launch testbed``), the ``testbed`` preset: the default
    ``kimi-k3`` expectations cannot hold on a CPU testbed."""
    s = settings_of(config)
    given = config.getoption("k3_preset", default=None) or config.getini("k3_preset")
    if not given and s.launch is not None and s.launch.split()[:1] == ["testbed"]:
        return "testbed"
    return s.preset


def preset_of(config: pytest.Config) -> Preset:
    """The session's deployment preset (``--k3-preset``)."""
    return config.stash[PRESET_KEY]


@pytest.fixture(scope="session")
def k3_preset(request: pytest.FixtureRequest) -> Preset:
    """The deployment preset (``--k3-preset NAME|PATH``, default ``kimi-k3``): every
    expectation of the ready suites (``environment``, ``server``, ``targets``, ``slo`` and
    the per-suite tables). Recorded once as evidence kind ``"preset"``."""
    preset = preset_of(request.config)
    state = state_of(request.config)
    if not state.of_kind("preset"):
        state.add("preset", f"preset {preset.name} ({preset.source})", preset.as_dict())
    return preset


@dataclass(frozen=True)
class ServerArgs:
    """The observed server's startup arguments (only the keys the suites compare) in
    ``values``, or None with ``source`` saying why they are unknown."""

    values: dict[str, Any] | None
    source: str

    @property
    def known(self) -> bool:
        """True when the startup arguments were read from the server's log."""
        return self.values is not None

    def get(self, key: str, default: Any = None) -> Any:
        """One argument (``default`` when it was not given on the command line)."""
        return (self.values or {}).get(key, default)


@pytest.fixture(scope="session")
def k3_server_args(request: pytest.FixtureRequest) -> ServerArgs:
    """Startup arguments of the observed server, read from its log's ``non-default args``
    line (``--k3-launch`` or ``--k3-server-log``): ``tool_call_parser``,
    ``reasoning_parser``, ``enable_prefix_caching``, ``enable_expert_parallel``,
    ``data_parallel_size``, ``tensor_parallel_size``, ``all2all_backend``, ... Without a
    server log ``known`` is False and ``source`` says what to pass."""
    from ..suites.support import server_args

    s = settings_of(request.config)
    if not (s.launch or s.server_log):
        return ServerArgs(None, "the server's startup arguments are unknown: no server log "
                                "(pass --k3-launch, or --k3-server-log PATH for a server you "
                                "started)")
    watch = request.getfixturevalue("k3_server")
    watch.refresh()
    path = Path(watch.log_path)
    try:
        with open(path, encoding="utf-8", errors="replace") as lines:
            values = server_args(lines)
    except OSError as exc:
        return ServerArgs(None, f"cannot read the server log {path}: {exc}")
    if values is None:
        return ServerArgs(None, f"the server log {path} has no 'non-default args' line (vLLM "
                                "logs it at startup; was the log captured from the start?)")
    state_of(request.config).add("server-args", f"server startup arguments from {path}",
                                 {"args": values, "log": str(path)})
    return ServerArgs(values, str(path))


def _marks_for(item: pytest.Item, mark: pytest.Mark, preset: Preset,
               config: pytest.Config) -> list[pytest.MarkDecorator]:
    env, out = preset.environment, []
    unknown = [n for n in mark.args if n not in EXPECTATIONS]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: @k3_expect: unknown expectation(s) {unknown}; "
                                f"known: {', '.join(EXPECTATIONS)}")
    extra = dict(mark.kwargs)
    for name in mark.args:
        if name == "driver":
            out.append(pytest.mark.k3_driver(min=env.driver_min) if env.driver_min else
                       pytest.mark.skip(reason=preset.absent(
                           "host-driver expectation ([environment] driver_min)")))
        elif name == "cuda":
            out.append(pytest.mark.k3_cuda(major=env.cuda_major, minor=env.cuda_minor)
                       if env.cuda_major else pytest.mark.skip(reason=preset.absent(
                           "CUDA runtime expectation ([environment] cuda_major)")))
        elif name == "topology":
            out.append(pytest.mark.k3_topology(gpus=env.gpus, interconnect=env.interconnect,
                                               nodes=env.nodes) if env.gpus else
                       pytest.mark.skip(reason=preset.absent(
                           "GPU topology expectation ([environment] gpus)")))
        elif name == "target":
            values = {} if settings_of(config).profile else preset.targets.profile_values()
            out.append(pytest.mark.k3_headroom(**{**values, **extra}))
        elif name == "slo":
            profile = profile_of(config).load if settings_of(config).profile else None
            if not (profile is not None and profile.slo) and preset.slo:
                out.append(pytest.mark.k3_slo(**dict(preset.slo.limits)))
    return out


def _register(config: pytest.Config, ids: set[str]) -> None:
    done = config.stash.setdefault(REGISTERED_KEY, [])
    for cid in sorted(ids):
        if cid in SUITE_ITEMS and cid not in checklist.all_items():
            checklist.register_item(cid, *SUITE_ITEMS[cid])
            done.append(cid)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    preset = preset_of(config)
    wanted: set[str] = set()
    for item in items:
        for mark in item.iter_markers("k3_check"):
            wanted.update(str(a).strip().upper() for a in mark.args)
        suite = item.get_closest_marker("k3_suite")
        if suite is not None and (len(suite.args) != 1 or str(suite.args[0]) not in AUDIENCES):
            raise pytest.UsageError(f"{item.nodeid}: @k3_suite takes one audience, one of "
                                    f"{', '.join(AUDIENCES)}; got {suite.args!r}")
        expect = item.get_closest_marker("k3_expect")
        if expect is not None:
            for deco in _marks_for(item, expect, preset, config):
                item.add_marker(deco)
    _register(config, wanted & set(SUITE_ITEMS))


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    audiences = set()
    for item in session.items:
        mark = item.get_closest_marker("k3_suite")
        if mark is not None and mark.args:
            audiences.add(AUDIENCES.get(str(mark.args[0]), str(mark.args[0])))
    if len(audiences) == 1:
        (audience,) = audiences
        state_of(session.config).add("audience", f"audience: {audience} (ready suite)",
                                     {"audience": audience})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """On the xdist controller (which collects nothing): register the suite items when a
    worker collected a ready suite, so that the merged checklist knows them."""
    files = {i.split("::")[0].replace("\\", "/").rsplit("/", 1)[-1] for i in ids}
    _register(node.config, {c for f in files for c in SUITE_FILES.get(f, ())})


def pytest_unconfigure(config: pytest.Config) -> None:
    # the checklist's custom items are module-global: drop ours so that a later session in
    # the same process (pytester, IDE runners) does not show rows it never decided
    custom = getattr(checklist, "_CUSTOM", None)
    if isinstance(custom, dict):
        for cid in config.stash.get(REGISTERED_KEY, []):
            custom.pop(cid, None)


def record_response(request: pytest.FixtureRequest, what: str, result: Any) -> None:
    """Record a suite's successful request as evidence kind ``"response"`` (the verdict's
    "a response was seen"), with its figures but no texts."""
    data = {k: getattr(result, k, None) for k in (
        "status", "ttft", "e2e", "prompt_tokens", "completion_tokens", "finish_reason",
        "stream", "chunks")}
    data.update(ok=bool(getattr(result, "ok", False)), what=what,
                tool_calls=len(getattr(result, "tool_calls", []) or []))
    e2e = data["e2e"]
    state_of(request.config).add(
        "response", f"{what}: HTTP {data['status']}, {data['prompt_tokens']} prompt + "
        f"{data['completion_tokens']} output tokens"
        + (f" in {e2e:.2f} s" if isinstance(e2e, float) else ""), data,
        nodeid=request.node.nodeid)

