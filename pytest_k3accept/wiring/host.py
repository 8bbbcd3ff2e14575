"""Host wiring: ``k3_host`` and ``k3_gpu`` fixtures; ``k3_driver``, ``k3_cuda`` and
``k3_topology`` markers (checklist C4, C3, C5)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from ..host.checks import INTERCONNECTS, Check, check_cuda, check_driver, check_topology
from ..host.facts import HostFacts
from ..telemetry import GpuTelemetry
from . import settings_of, state_of, unavailable

FACTS_KEY = pytest.StashKey[Any]()
FAILED_KEY = pytest.StashKey[list[Check]]()

MARKERS = {
    "k3_driver": ("k3_driver(min='580'): the host driver of every GPU node is at least MIN "
                  "(branch '580' or full '580.65.06'); checklist C4. Facts from "
                  "--k3-host-facts / --k3-dcgm-url / --k3-prometheus-url / local NVML"),
    "k3_cuda": ("k3_cuda(major=13, minor=None): the image's CUDA runtime is MAJOR(.MINOR) and "
                "the host driver supports it; checklist C3"),
    "k3_topology": ("k3_topology(gpus=8, interconnect=None|'nvlink'|'rdma', nodes=None): at "
                    "least GPUS GPUs (and NODES nodes) with that all-to-all path; checklist C5"),
}


def pytest_configure(config: pytest.Config) -> None:
    for help_line in MARKERS.values():
        config.addinivalue_line("markers", help_line)


def host_facts(config: pytest.Config) -> HostFacts:
    """The session's merged host facts, gathered once (on first use); a malformed facts file
    fails the asking test with the file and field."""
    from ..host import FactsFileError, gather

    cached = config.stash.get(FACTS_KEY, None)
    if cached is None:
        s = settings_of(config)
        try:
            cached = gather(s.host_facts, s.dcgm_url, s.prometheus_url, image=s.image,
                            timeout=min(s.timeout, 15.0))
            state_of(config).add("host", cached.summary(), cached.to_dict())
        except FactsFileError as exc:
            cached = str(exc)
        config.stash[FACTS_KEY] = cached
    if isinstance(cached, str):
        pytest.fail(cached, pytrace=False)
    return cached


@pytest.fixture(scope="session")
def k3_host(request: pytest.FixtureRequest) -> HostFacts:
    """The deployment's host facts (session scope), merged per node from ``--k3-host-facts``
    files, ``--k3-dcgm-url``, ``--k3-prometheus-url`` and local NVML; ``--k3-image`` names
    the image. Fields: ``nodes`` (driver, CUDA driver, GPUs with model/UUID/memory/NVLink,
    container CUDA runtime, topology), ``gpu_count``, ``node_count``, ``image_ref``,
    ``notes`` (sources that could not be read)."""
    return host_facts(request.config)


def _args(mark: pytest.Mark, nodeid: str) -> dict[str, Any]:
    names = {"k3_driver": ("min",), "k3_cuda": ("major", "minor"),
             "k3_topology": ("gpus", "interconnect", "nodes")}[mark.name]
    if len(mark.args) > len(names):
        raise pytest.UsageError(f"{nodeid}: @{mark.name} takes at most {len(names)} "
                                f"positional arguments ({', '.join(names)})")
    kwargs = dict(zip(names, mark.args), **mark.kwargs)
    unknown = set(kwargs) - set(names)
    if unknown:
        raise pytest.UsageError(f"{nodeid}: @{mark.name} got unknown argument(s) "
                                f"{sorted(unknown)}; it takes {', '.join(names)}")
    return kwargs


def _validate(mark: pytest.Mark, nodeid: str) -> None:
    from ..host.versions import VersionError, parse_driver

    kwargs = _args(mark, nodeid)
    where = f"{nodeid}: @{mark.name}"
    if mark.name == "k3_driver":
        try:
            parse_driver(str(kwargs.get("min", "580")))
        except VersionError as exc:
            raise pytest.UsageError(f"{where}(min=...): {exc}") from None
        return
    ints = ("major", "minor") if mark.name == "k3_cuda" else ("gpus", "nodes")
    for name in ints:
        value = kwargs.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise pytest.UsageError(f"{where}: {name} must be a whole number >= 0, got "
                                    f"{value!r}")
    if mark.name == "k3_topology" and kwargs.get("interconnect") not in INTERCONNECTS:
        raise pytest.UsageError(f"{where}: interconnect must be one of 'nvlink', 'rdma' or "
                                f"None, got {kwargs.get('interconnect')!r}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for mark in item.iter_markers():
            if mark.name in MARKERS:
                _validate(mark, item.nodeid)


_CHECKS: dict[str, Callable[..., Check]] = {
    "k3_driver": lambda f, min="580": check_driver(f, str(min)),
    "k3_cuda": lambda f, major=13, minor=None: check_cuda(f, major, minor),
    "k3_topology": lambda f, gpus=8, interconnect=None, nodes=None: check_topology(
        f, gpus, interconnect, nodes),
}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Evaluate the environment markers before any fixture: unknown facts skip at once
    (fail under --k3-require); a failed check fails the test at call time."""
    marks = [m for m in item.iter_markers() if m.name in MARKERS]
    if not marks:
        return
    facts = host_facts(item.config)
    state = state_of(item.config)
    failed: list[Check] = []
    unknown: list[Check] = []
    seen = set()
    for mark in marks:
        if mark.name in seen:  # the closest marker wins (function over class over module)
            continue
        seen.add(mark.name)
        check = _CHECKS[mark.name](facts, **_args(mark, item.nodeid))
        state.add("environment", check.message(), check.evidence(), nodeid=item.nodeid)
        (failed if check.ok is False else unknown if check.ok is None else []).append(check)
    if failed:
        item.stash[FAILED_KEY] = failed
        item.user_properties.append(("k3_failure", "environment"))
    elif unknown:
        unavailable(item.config, " | ".join(c.message() for c in unknown))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    failed = item.stash.get(FAILED_KEY, None)
    if failed:
        pytest.fail("\n".join(c.message() for c in failed), pytrace=False)


class Telemetry(GpuTelemetry):
    """:class:`~pytest_k3accept.telemetry.GpuTelemetry` with ``require()`` for tests."""

    config: pytest.Config | None = None

    def require(self) -> None:
        """Skip (fail under --k3-require) unless real GPU memory is being sampled."""
        if not self.available and self.config is not None:
            unavailable(self.config, f"k3_gpu: {self.describe()}")


def _kv_reader(request: pytest.FixtureRequest) -> tuple[Callable[[], float | None] | None,
                                                        str]:
    """vLLM ``kv_cache_usage_perc`` reader (Prometheus, else the endpoint's /metrics)."""
    from ..endpoint import auth_headers
    from ..host.remote import Prometheus, shown
    from ..metrics import MetricsScraper

    s = settings_of(request.config)
    candidates: list[tuple[Callable[[], float | None], str]] = []
    if s.prometheus_url:
        prom = Prometheus(s.prometheus_url, timeout=min(s.timeout, 10.0))
        candidates.append((prom.kv_cache_usage, f"Prometheus {shown(s.prometheus_url)}"))
    base = None
    if "k3_base_url" in request.fixturenames:
        base = str(request.getfixturevalue("k3_base_url"))
    elif s.endpoint:
        base = s.endpoint
    if base:
        scraper = MetricsScraper(base, headers=auth_headers(s.api_key()),
                                 timeout=min(s.timeout, 10.0))
        # sampled every --k3-gpu-interval: a line scan of the page, not a full parse
        candidates.append((lambda: scraper.gauges().get("kv"), f"{shown(base)}/metrics"))
    for reader, label in candidates:
        try:
            if reader() is not None:
                return reader, label
        except Exception:
            continue
    return None, ""


@pytest.fixture
def k3_gpu(request: pytest.FixtureRequest) -> Iterator[Telemetry]:
    """GPU memory used per GPU, sampled in a background thread while the test runs
    (``--k3-gpu-interval`` seconds; local NVML, or ``--k3-dcgm-url`` / ``--k3-prometheus-url``).

    ``k3_gpu.peak`` (bytes per ``node/gpuN``), ``.total``, ``.headroom`` (1 - peak/total),
    ``.series`` (retained samples), ``.sample_now()``, ``.describe()``. Without a GPU source
    ``k3_gpu.available`` is False and ``.reason`` says why; it then falls back to vLLM's
    ``kv_cache_usage_perc`` (``kind == "kv-cache-usage"``: KV usage, NOT GPU memory) when the
    endpoint or Prometheus has it. ``k3_gpu.require()`` skips (fails under --k3-require)
    unless GPU memory is sampled. Stops with the test; records "gpu-telemetry" evidence.
    """
    from ..telemetry import pick_source

    s = settings_of(request.config)
    source, why = pick_source(s.dcgm_url, s.prometheus_url, timeout=min(s.timeout, 10.0))
    kv, label = (None, "") if source is not None else _kv_reader(request)
    tel = Telemetry(source, s.gpu_interval, reason=why, kv_reader=kv, kv_label=label)
    tel.config = request.config
    tel.start()
    try:
        yield tel
    finally:
        tel.stop()
        text = tel.describe()
        state_of(request.config).add("gpu-telemetry", text, tel.summary(),
                                     nodeid=request.node.nodeid)
        request.node.user_properties.append(("k3_gpu", text))
