"""Decision wiring: ``k3_layers``, ``k3_prefix_ab``, ``k3_procedure``, ``k3_verdict``, the
``k3_procedure`` marker and the "k3accept verdict" terminal section.

The profile file (``--k3-profile``) is read whole once: its load values, ``[layers]``,
``[procedure]`` and ``audience``. At session end the verdict is decided from everything
observed and recorded as evidence kind ``"verdict"`` (the record and report use it), then
printed with the evidence it rests on.
"""

from __future__ import annotations

from typing import Any, Generator

import pytest

from ..layers import Layers
from ..procedure import DecisionProfile, ProcedureError, ProcedureSpec
from ..verdict import Verdict, decide_state, verdict_lines
from . import profile_of, progress_printer, run_sync, settings_of, state_of, unavailable

FINAL_KEY = pytest.StashKey[Verdict]()
#: the A/B runs at most this many requests of the profile's request set per side
AB_MAX_REQUESTS = 16


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "k3_procedure(reduced_concurrency=None, reduced_context_tokens=None, reduced_rate=None, "
        "retention_interval=1024, retention_args=(), reduced_request_set=None): values of the "
        "re-measurement procedure run by k3_procedure, over the profile's [procedure] table")
    profile_of(config)  # a bad --k3-profile stops the session here


def decision_profile(config: pytest.Config) -> DecisionProfile:
    """The session's profile read whole (load values, layers, procedure, audience)."""
    return profile_of(config)


def _decides(request: pytest.FixtureRequest, *items: str) -> None:
    """Make the requesting test decide checklist ``items`` (through the checks wiring)."""
    from .checks import ITEMS_KEY

    node = request.node
    have = node.stash.get(ITEMS_KEY, ())
    node.stash[ITEMS_KEY] = tuple(dict.fromkeys((*have, *items)))
    node.user_properties.append(("k3_checklist", ",".join(node.stash[ITEMS_KEY])))


def _target(config: pytest.Config) -> dict[str, Any] | None:
    return decision_profile(config).target() if settings_of(config).profile else None


@pytest.fixture
def k3_layers(request: pytest.FixtureRequest) -> Layers:
    """Which layers can be changed here (checklist C12), from the profile's ``[layers]``
    table: ``driver``, ``container``, ``network`` each ``fixed``/``changeable``/``unknown``.

    A test using it decides C12: ``assert k3_layers.recorded, k3_layers.source``.
    """
    _decides(request, "C12")
    layers = decision_profile(request.config).layers
    state = state_of(request.config)
    if not state.of_kind("layers"):
        state.add("layers", f"changeable layers: {layers.describe()} ({layers.source})",
                  layers.as_dict(), nodeid=request.node.nodeid)
    return layers


def _ab_sides(request: pytest.FixtureRequest, endpoint: Any) -> tuple[list[Any], Any]:
    """The servers of the A/B and a relaunched variant to stop afterwards (or None)."""
    from ..abrun import Side, live_config
    from ..endpoint import EndpointError, discover

    s = settings_of(request.config)
    sides = [Side("?", endpoint.base_url, endpoint.model)]
    if s.launch:
        from ..relaunch import Relauncher

        cfg = run_sync(lambda: live_config(endpoint.base_url, s.api_key(), s.timeout))
        on = cfg.get("enable_prefix_caching", "True").lower() == "true"
        flag = "--no-enable-prefix-caching" if on else "--enable-prefix-caching"
        var = Relauncher(s.launch, artifacts=s.artifacts, timeout=s.launch_timeout).start(
            [flag], "cache-off" if on else "cache-on")
        if not var.ready:
            var.process.stop()
            pytest.fail(f"k3_prefix_ab: the relaunched server ({flag}) did not start: "
                        f"{(var.error or '').splitlines()[0]} (log: {var.log_path})",
                        pytrace=False)
        return [*sides, Side("?", var.base_url, endpoint.model)], var
    for url in s.endpoints[1:2]:
        try:
            other = discover(url, model=endpoint.model, api_key=s.api_key(), timeout=s.timeout)
        except EndpointError as exc:
            unavailable(request.config, f"k3_prefix_ab: second endpoint {url}: {exc}")
        sides.append(Side("?", other.base_url, other.model))
    return sides, None


@pytest.fixture
def k3_prefix_ab(request: pytest.FixtureRequest, k3_endpoint: Any) -> Any:
    """Prefix caching on vs off on the same request set (checklist C8); returns an
    :class:`~pytest_k3accept.abtest.ABResult` (``ok``, ``status``, ``message``, ``on``/``off``
    figures).

    The other side is the second ``--k3-endpoint``, or (``--k3-launch``) a relaunch of the
    server with prefix caching toggled. The request set is the profile's (at most 16
    requests), or 6 requests repeating a ~300-token system prompt without a profile.
    Fails the A/B when caching is on but a repeating set gets 0 hits; skips (fails under
    ``--k3-require``) when there is no second side. Use: ``assert k3_prefix_ab.ok``.
    """
    from ..abrun import run_ab
    from ..abtest import INCOMPLETE, ABError

    _decides(request, "C8")
    config = request.config
    s, dp = settings_of(config), decision_profile(config)
    try:
        sides, variant = _ab_sides(request, k3_endpoint)
    except ABError as exc:
        unavailable(config, f"k3_prefix_ab: {exc}")

    async def go() -> Any:
        rs = None
        if s.profile:
            from ..load import requestset, synthetic

            load = dp.load.replace("k3_prefix_ab", requests=min(dp.load.requests,
                                                                AB_MAX_REQUESTS), warmup=0)
            if load.request_set:
                full = requestset.load(load.request_set)
                rs = requestset.RequestSet(full.requests[:AB_MAX_REQUESTS], name=full.name,
                                           source=full.source)
            else:
                async with k3_endpoint.client() as client:
                    rs = await synthetic.generate(client, load)
        return await run_ab(sides, rs, api_key=s.api_key(), timeout=s.timeout)

    try:
        result = run_sync(go)
    except ABError as exc:
        unavailable(config, f"k3_prefix_ab: {exc}")
    except ValueError as exc:  # the profile's request set or synthetic lengths are bad
        pytest.fail(f"k3_prefix_ab: {exc}", pytrace=False)
    finally:
        if variant is not None:
            variant.process.stop()
    state_of(config).add("prefix-cache-ab", result.message, result.as_dict(),
                         nodeid=request.node.nodeid)
    if result.status == INCOMPLETE:
        unavailable(config, f"k3_prefix_ab: {result.message}")
    return result


def _spec(request: pytest.FixtureRequest, dp: DecisionProfile) -> DecisionProfile:
    mark = request.node.get_closest_marker("k3_procedure")
    if mark is None:
        return dp
    import dataclasses

    values = {**{f.name: getattr(dp.procedure, f.name)
                 for f in dataclasses.fields(ProcedureSpec)}, **mark.kwargs}
    values = {k: list(v) if k == "retention_args" else v for k, v in values.items()
              if v is not None}
    try:
        spec = ProcedureSpec.from_mapping(values, f"{request.node.nodeid}: k3_procedure")
    except ProcedureError as exc:
        pytest.fail(str(exc), pytrace=False)
    return dataclasses.replace(dp, procedure=spec)


@pytest.fixture
def k3_procedure(request: pytest.FixtureRequest, k3_endpoint: Any) -> Any:
    """Runs the re-measurement procedure (agent-team steps 1-7, checklist C7) and returns a
    :class:`~pytest_k3accept.procrun.ProcedureResult`: the step log (which variable each
    step changed, against which step), the verdict it ends in and ``one_variable``.

    Targets come from the profile, reduced values from its ``[procedure]`` table or the
    ``k3_procedure(...)`` marker. Step 5 (cache retention) relaunches the server and runs
    only with ``--k3-launch``; on a fixed endpoint it is reported "not-run" with the reason.
    Use: ``assert k3_procedure.one_variable``.
    """
    from ..procrun import run_procedure
    from ..relaunch import Relauncher

    _decides(request, "C7")
    config = request.config
    s, dp = settings_of(config), _spec(request, decision_profile(config))
    relauncher = (Relauncher(s.launch, artifacts=s.artifacts, timeout=s.launch_timeout)
                  if s.launch else None)
    try:
        result = run_sync(lambda: run_procedure(k3_endpoint, dp, relauncher=relauncher,
                                            progress=progress_printer(config, "k3_procedure")))
    except ValueError as exc:  # ProfileError, RequestSetError, SyntheticError: bad input
        pytest.fail(f"k3_procedure: {exc}", pytrace=False)
    state_of(config).add("procedure", result.summary(), result.as_dict(),
                         nodeid=request.node.nodeid)
    return result


@pytest.fixture
def k3_verdict(request: pytest.FixtureRequest) -> Verdict:
    """The verdict from the evidence observed so far in the session (keep, accept-limits,
    scale, move-environment, functional-only or undecided), with ``reasons``, ``advice``,
    ``limits`` and ``not_checked``. A test using it decides C11 (a loading failure and a
    capacity shortage are different verdicts); put it last in a module."""
    _decides(request, "C11")
    config = request.config
    dp = decision_profile(config)
    return decide_state(state_of(config), dp.layers, audience=dp.audience,
                        target=_target(config))


def _engaged(config: pytest.Config) -> bool:
    state = state_of(config)
    return bool(state.evidence or state.checklist.outcomes)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    """Decide the session's verdict from what the tests observed, before any other
    session-end work (stopping the launched server is teardown, not evidence), and record
    it as evidence kind "verdict" (the record and report read it)."""
    _final(session.config)
    return (yield)


def _final(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _engaged(config) or FINAL_KEY in config.stash:
        return
    dp = decision_profile(config)
    try:
        verdict = decide_state(state_of(config), dp.layers, audience=dp.audience,
                               target=_target(config))
    except Exception as exc:  # the session's other output must survive a verdict bug
        verdict = Verdict("undecided", reasons=[f"the verdict could not be decided: "
                                                f"{type(exc).__name__}: {exc}"])
    config.stash[FINAL_KEY] = verdict
    state_of(config).add("verdict", f"verdict: {verdict.name}", verdict.as_dict())


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    verdict = config.stash.get(FINAL_KEY, None)
    if verdict is None:
        return
    from ..redact import Redactor

    red = Redactor.from_settings(settings_of(config))
    terminalreporter.write_sep("-", "k3accept verdict")
    for line in verdict_lines(verdict):
        terminalreporter.write_line(red.text(line))
