"""Load wiring: ``k3_profile``, ``k3_request_set``, ``k3_load`` and the ``k3_slo`` /
``k3_headroom`` markers.

A test's loads run through ``await k3_load.run(...)``; each run is recorded as evidence
(kind ``"load"``) and kept for the markers, which are evaluated after the test body. A marked
test whose body ran no load gets the target load run for it by the marker (after the body,
on a private event loop), so ``@pytest.mark.k3_headroom(concurrency=8)`` over ``pass`` is a
complete headroom test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generator

import pytest

from ..load import headroom as _headroom
from ..load.profile import LoadProfile, ProfileError
from ..load.profile import load as _load_profile
from ..load.requestset import RequestSet, RequestSetError
from ..load.slo import SLO, SLOError
from . import profile_of, progress_printer, run_sync, settings_of, state_of, unavailable

MARKED_KEY = pytest.StashKey[LoadProfile]()
_PROGRESS_EVERY = 5.0


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers; read ``--k3-profile`` (a bad file is a usage error)."""
    config.addinivalue_line(
        "markers",
        "k3_headroom(profile=None, min_free=0.10, max_error_rate=0.0, max_preemptions=0, "
        "max_waiting=0, min_free_gpu=None, failover=False, replicas=None, **profile_values): "
        "the test passes only if the target load (profile file/LoadProfile/table, plus inline "
        "values) ran with that headroom; runs the load itself when the test body did not "
        "(checklist C9; with failover=True also C10)")
    config.addinivalue_line(
        "markers",
        "k3_slo(**limits): SLOs (ttft_p99=2.0, e2e_p90=30, error_rate=0.01, goodput=1.5, "
        "goodput_ttft=2.0 ...) that every load run of the test must meet; a breach fails the "
        "test with measured vs required values")
    profile_of(config)  # a bad --k3-profile stops the session here




@pytest.fixture(scope="session")
def k3_profile(request: pytest.FixtureRequest) -> LoadProfile:
    """The session's target load: ``--k3-profile FILE`` (TOML/JSON), or the defaults."""
    return profile_of(request.config).load


@pytest.fixture(scope="session")
def k3_request_set(request: pytest.FixtureRequest, k3_profile: LoadProfile) -> RequestSet:
    """The session's request set: the profile's fixed ``request_set`` file, or synthetic
    requests built for the profile with the server's ``/tokenize`` (needs an endpoint).
    Tests that run a fixed request set should carry ``k3_check("C6")``."""
    from ..load import requestset, synthetic

    if k3_profile.request_set:
        try:
            return requestset.load(k3_profile.request_set)
        except RequestSetError as exc:
            pytest.fail(f"request_set of the load profile: {exc}", pytrace=False)
    endpoint = request.getfixturevalue("k3_endpoint")

    async def build() -> RequestSet:
        async with endpoint.client() as client:
            return await synthetic.generate(client, k3_profile)
    return run_sync(build)


class LoadFixture:
    """What ``k3_load`` gives a test: ``await k3_load.run(...)`` and the runs so far."""

    def __init__(self, item: pytest.Item, endpoint: Any, profile: LoadProfile) -> None:
        self.item = item
        self.endpoint = endpoint
        self.profile = profile
        self.results: list[Any] = []
        self.telemetry: Any = None

    async def run(self, requests: Any = None, profile: LoadProfile | str | Path | None = None,
                  *, endpoint: Any = None, telemetry: Any = None, **overrides: Any) -> Any:
        """Run a load and return its :class:`~pytest_k3accept.load.runner.LoadResult`.

        ``requests``: a RequestSet, a list of requests, a file, or None (the profile's
        ``request_set``, else synthetic requests); an integer is the request count. ``profile``: a LoadProfile or file, default the test's profile (session
        profile + the ``k3_headroom`` marker's values); ``overrides`` change single values
        (``concurrency=32``). ``telemetry``: a running GPU sampler; default ``k3_gpu`` when
        the test requested it (GPU memory at peak is then recorded and judged).
        """
        from ..load.runner import run_load

        if isinstance(requests, int) and not isinstance(requests, bool):
            overrides["requests"] = requests  # a count: the profile's field, not a set
            requests = None
        prof = self._profile(profile, overrides)
        if telemetry is None:  # the test's GPU sampler, when it asked for one
            telemetry = self.telemetry or getattr(self.item, "funcargs", {}).get("k3_gpu")
        result = await run_load(endpoint or self.endpoint, requests, prof,
                                progress=progress_printer(self.item.config, "k3_load"),
                                progress_interval=_PROGRESS_EVERY, telemetry=telemetry)
        self.results.append(result)
        data = result.as_dict()
        state_of(self.item.config).add("load", result.line(), data, nodeid=self.item.nodeid)
        return result

    def _profile(self, profile: Any, overrides: dict[str, Any]) -> LoadProfile:
        try:
            if isinstance(profile, (str, Path)):
                prof = _load_profile(profile)
            else:
                prof = profile or self.profile
            return prof.replace("k3_load.run()", **overrides) if overrides else prof
        except ProfileError as exc:
            pytest.fail(str(exc), pytrace=False)


def marker_profile(item: pytest.Item, base: LoadProfile) -> LoadProfile:
    """The test's target load: ``base`` changed by its ``k3_headroom`` marker (a profile
    file, LoadProfile or table, then inline values). Raises :class:`ProfileError`."""
    mark = item.get_closest_marker("k3_headroom")
    if mark is None:
        return base
    kwargs = dict(mark.kwargs)
    spec = kwargs.pop("profile", mark.args[0] if mark.args else None)
    where = f"{item.nodeid}: k3_headroom"
    if isinstance(spec, (str, Path)):
        path = Path(spec)
        beside = Path(str(item.path)).parent / path
        base = _load_profile(beside if not path.is_absolute() and beside.exists() else path)
    elif isinstance(spec, LoadProfile):
        base = spec
    elif spec is not None:
        if not isinstance(spec, dict):
            raise ProfileError(f"{where}: profile: expected a file path, a LoadProfile or a "
                               f"table, got {spec!r}")
        base = base.replace(where, **spec)
    return base.replace(where, **kwargs)


def marker_slo(item: pytest.Item) -> SLO:
    """The limits of the test's ``k3_slo`` markers (closest wins). Raises SLOError."""
    out = SLO()
    for mark in reversed(list(item.iter_markers("k3_slo"))):
        out = out.merged(SLO.from_mapping(dict(mark.kwargs), f"{item.nodeid}: k3_slo"))
    return out


@pytest.fixture
def k3_load(request: pytest.FixtureRequest, k3_profile: LoadProfile,
            k3_endpoint: Any) -> LoadFixture:
    """Runs target loads against the endpoint: ``result = await k3_load.run(concurrency=8)``.

    Each run is bounded (``requests``, ``max_seconds``), recorded as evidence kind "load"
    (summary, latency percentiles, error classes, server-side deltas and peaks) and
    returned as a ``LoadResult``. ``k3_slo``/``k3_headroom`` markers judge the runs after the
    test body; the profile's own ``[slo]`` limits are checked the same way.
    """
    profile = request.node.stash.get(MARKED_KEY, None) or k3_profile
    return LoadFixture(request.node, k3_endpoint, profile)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Validate ``k3_headroom``/``k3_slo`` values and give marked tests ``k3_load``."""
    base = profile_of(config).load
    for item in items:
        if not (item.get_closest_marker("k3_headroom") or item.get_closest_marker("k3_slo")):
            continue
        try:  # bad marker values stop the session here, before any load runs
            item.stash[MARKED_KEY] = marker_profile(item, base)
            marker_slo(item)
        except (ProfileError, SLOError) as exc:
            raise pytest.UsageError(str(exc)) from None
        if "k3_load" not in getattr(item, "fixturenames", ["k3_load"]):
            item.fixturenames.append("k3_load")  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """After the body: judge headroom (running the load if needed), then SLOs."""
    result = yield
    runner = getattr(item, "funcargs", {}).get("k3_load")
    if not isinstance(runner, LoadFixture):
        return result
    failures = _judge_headroom(item, runner) if item.get_closest_marker("k3_headroom") else []
    if item.get_closest_marker("k3_slo") and not runner.results:
        run_sync(runner.run)
    failures += _judge_slos(item, runner)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
    return result


def _others(item: pytest.Item, primary: Any) -> list[Any]:
    from ..endpoint import EndpointError, discover

    s = settings_of(item.config)
    out = []
    for url in s.endpoints[1:]:
        try:
            out.append(discover(url, model=primary.model, api_key=s.api_key(),
                                api_key_env=s.api_key_env, timeout=s.timeout))
        except EndpointError as exc:
            unavailable(item.config, f"k3_headroom(failover=True): replica {url}: {exc}")
    return out


def _judge_headroom(item: pytest.Item, runner: LoadFixture) -> list[str]:
    spec = runner.profile.headroom
    replicas, factor = None, 1.0
    endpoints = [runner.endpoint]
    if spec.failover:
        endpoints += _others(item, runner.endpoint)
        replicas = spec.replicas or len(endpoints)
        if replicas < 2:
            unavailable(item.config, "k3_headroom(failover=True) needs the number of replicas:"
                        " give several --k3-endpoint URLs or replicas=N in the marker/profile")
        factor = _headroom.failover_factor(replicas)
    if spec.failover:  # the body's runs are not failover evidence: run the scaled load
        scaled = runner.profile.scaled(factor)
        runner.results = []
        for ep in endpoints:
            run_sync(lambda: runner.run(profile=scaled, endpoint=ep))
    elif not runner.results:
        run_sync(runner.run)
    verdicts = [_headroom.decide(r, min_free=spec.min_free, max_error_rate=spec.max_error_rate,
                                 max_preemptions=spec.max_preemptions,
                                 max_waiting=spec.max_waiting, min_free_gpu=spec.min_free_gpu,
                                 load_factor=factor, replicas=replicas)
                for r in runner.results]
    state = state_of(item.config)
    for v, r in zip(verdicts, runner.results):
        state.add("headroom", v.line(), {**v.as_dict(), "profile": r.profile.name,
                                         "failover": spec.failover}, nodeid=item.nodeid)
    ok = _headroom.combine(verdicts)
    if ok is None:
        unavailable(item.config, "k3_headroom cannot be decided: " + "; ".join(
            v.line() for v in verdicts if v.ok is None))
    return [] if ok else [f"{v.line()}\n  load: {r.line()}"
                          for v, r in zip(verdicts, runner.results) if v.ok is False]


def _judge_slos(item: pytest.Item, runner: LoadFixture) -> list[str]:
    from ..load.slo import check

    limits = marker_slo(item)
    lines = []
    for r in runner.results:
        slo = r.profile.slo.merged(limits)
        breaches = check(r.summary, slo, r.records) if slo else []
        if breaches:
            lines.append(f"SLO breached by load {r.profile.name!r} at {r.endpoint}: "
                         + "; ".join(str(b) for b in breaches))
            state_of(item.config).add("slo", lines[-1], {
                "breaches": [b.as_dict() for b in breaches], "slo": slo.as_dict(),
                "profile": r.profile.name}, nodeid=item.nodeid)
    return lines
