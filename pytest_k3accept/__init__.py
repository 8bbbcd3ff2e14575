"""pytest-k3accept: acceptance tests for a live LLM deployment (Kimi K3 on vLLM).

The plugin registers through the ``pytest11`` entry point (``pytest_k3accept.plugin``) and is
inert until a test uses one of its ``k3_*`` fixtures or markers. The public, importable API
is the types a suite annotates with::

    from pytest_k3accept import K3Client, LoadProfile, LoadResult, Verdict

    async def test_target(k3_client: K3Client, k3_load) -> None: ...

They are imported on first use (``import pytest_k3accept`` stays cheap: no httpx, aiohttp or
NVML at import time).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Endpoint": "pytest_k3accept.observe.endpoint.discover",
    "EndpointError": "pytest_k3accept.observe.endpoint.discover",
    "K3Client": "pytest_k3accept.observe.endpoint.client",
    "RequestResult": "pytest_k3accept.observe.endpoint.client",
    "Snapshot": "pytest_k3accept.observe.metrics",
    "Delta": "pytest_k3accept.observe.metrics",
    "MetricsUnavailable": "pytest_k3accept.observe.metrics",
    "LoadProfile": "pytest_k3accept.observe.load.profile",
    "HeadroomSpec": "pytest_k3accept.observe.load.profile",
    "LoadResult": "pytest_k3accept.observe.load.result",
    "RequestSet": "pytest_k3accept.observe.load.requestset",
    "ChatRequest": "pytest_k3accept.observe.load.requestset",
    "HostFacts": "pytest_k3accept.observe.host.facts",
    "NodeFacts": "pytest_k3accept.observe.host.facts",
    "GpuFacts": "pytest_k3accept.observe.host.facts",
    "SLO": "pytest_k3accept.checks.slo",
    "Breach": "pytest_k3accept.checks.slo",
    "LoadRun": "pytest_k3accept.evidence.kinds",
    "HeadroomJudgement": "pytest_k3accept.evidence.kinds",
    "SloJudgement": "pytest_k3accept.evidence.kinds",
    "Evidence": "pytest_k3accept.evidence.store",
    "RunState": "pytest_k3accept.evidence.store",
    "Verdict": "pytest_k3accept.decide.outcome",
    "Layers": "pytest_k3accept.decide.layers",
    "Preset": "pytest_k3accept.config.presets.model",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:  # pragma: no cover
    from .checks.slo import SLO, Breach
    from .config.presets.model import Preset
    from .decide.layers import Layers
    from .decide.outcome import Verdict
    from .evidence.kinds import HeadroomJudgement, LoadRun, SloJudgement
    from .evidence.store import Evidence, RunState
    from .observe.endpoint.client import K3Client, RequestResult
    from .observe.endpoint.discover import Endpoint, EndpointError
    from .observe.host.facts import GpuFacts, HostFacts, NodeFacts
    from .observe.load.profile import HeadroomSpec, LoadProfile
    from .observe.load.requestset import ChatRequest, RequestSet
    from .observe.load.result import LoadResult
    from .observe.metrics import Delta, MetricsUnavailable, Snapshot


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_k3accept' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
