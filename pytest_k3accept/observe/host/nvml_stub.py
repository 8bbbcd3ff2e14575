"""A stand-in for ``pynvml`` (nvidia-ml-py): for tests and dry runs on machines without a GPU.

Only the calls the plugin makes are implemented. Inject it directly
(``nvml.read_local(module=StubNvml(...))``) or for a whole pytest run from a ``conftest.py``::

    import sys
    from pytest_k3accept.observe.host.nvml_stub import StubGpu, StubNvml
    sys.modules["pynvml"] = StubNvml([StubGpu(nvlinks=18)] * 8, driver="580.65.06")

``StubGpu.used`` may be changed while a sampler runs, to simulate allocations.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Sequence

GIB = 1024 ** 3


class NVMLError(Exception):
    """Base of the stub's errors (like ``pynvml.NVMLError``)."""


class NVMLError_NotSupported(NVMLError):
    """The device does not support the call (e.g. NVLink on a PCIe GPU)."""


class NVMLError_LibraryNotFound(NVMLError):
    """No NVIDIA driver library on this machine."""


@dataclass
class StubGpu:
    """One simulated GPU; ``nvlinks`` None means NVLink is not supported."""

    name: str = "NVIDIA H200"
    total: int = 141 * GIB
    used: int = 1 * GIB
    nvlinks: int | None = 18
    uuid: str | None = None


class StubNvml:
    """Module-like object with the ``pynvml`` calls the plugin uses."""

    NVML_FEATURE_ENABLED = 1
    NVML_FEATURE_DISABLED = 0
    NVML_NVLINK_MAX_LINKS = 18
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported

    def __init__(self, gpus: Sequence[StubGpu] = (), driver: str | bytes = "580.65.06",
                 cuda: int = 13000, fail_init: bool = False) -> None:
        self.gpus = [StubGpu(g.name, g.total, g.used, g.nvlinks, g.uuid) for g in gpus]
        self.driver = driver
        self.cuda = cuda
        self.fail_init = fail_init
        self.inits = 0
        self.shutdowns = 0
        self.reads = 0
        self._lock = threading.Lock()

    def _check(self) -> None:
        if self.inits <= self.shutdowns:
            raise NVMLError("Uninitialized")

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._check()
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._check()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.gpus[handle].name

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.gpus[handle].uuid or f"GPU-stub-{handle:04d}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        self._check()
        with self._lock:
            self.reads += 1
        gpu = self.gpus[handle]
        return SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        links = self.gpus[handle].nvlinks
        if links is None:
            raise NVMLError_NotSupported("Not Supported")
        if link >= self.NVML_NVLINK_MAX_LINKS:
            raise NVMLError("Invalid Argument")
        return self.NVML_FEATURE_ENABLED if link < links else self.NVML_FEATURE_DISABLED
