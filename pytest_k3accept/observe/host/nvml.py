"""Local GPU facts and memory readings through NVML (``nvidia-ml-py``, imported as ``pynvml``).

``pynvml`` is imported only when facts or readings are asked for; tests inject a stand-in
module through the ``module`` argument. Every NVML failure becomes a readable reason
(``gpu_error``) instead of an exception: no driver, no GPU and no package are ordinary
answers on a CI machine.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from typing import Any

from .facts import GpuFacts, NodeFacts
from .versions import cuda_from_int

#: upper bound on NVLink links asked per GPU when the module does not say (NVML's constant)
MAX_LINKS = 18


def node_name() -> str:
    """This node's name: ``$NODE_NAME`` / ``$K3ACCEPT_NODE_NAME`` (Kubernetes downward API),
    else the host name."""
    return (os.environ.get("K3ACCEPT_NODE_NAME") or os.environ.get("NODE_NAME")
            or socket.gethostname())


def load_module(module: Any = None) -> tuple[Any, str | None]:
    """``(pynvml, None)``, or ``(None, reason)`` when nvidia-ml-py is not installed."""
    if module is not None:
        return module, None
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed: pip install nvidia-ml-py"
    return pynvml, None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _err(nv: Any, exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".strip().rstrip(":")


def _nvlink_active(nv: Any, handle: Any) -> int:
    """Active NVLink links of one GPU (0 when NVLink is not supported)."""
    links = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", MAX_LINKS))
    enabled = int(getattr(nv, "NVML_FEATURE_ENABLED", 1))
    active = 0
    for link in range(links):
        try:
            state = nv.nvmlDeviceGetNvLinkState(handle, link)
        except Exception:  # NotSupported / InvalidArgument past the last link
            break
        if int(state) == enabled:
            active += 1
    return active


def _gpu(nv: Any, index: int) -> GpuFacts:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    mem = nv.nvmlDeviceGetMemoryInfo(handle)
    return GpuFacts(index=index, name=_text(nv.nvmlDeviceGetName(handle)),
                    uuid=_text(nv.nvmlDeviceGetUUID(handle)),
                    memory_total_bytes=int(mem.total), memory_used_bytes=int(mem.used),
                    nvlink_active=_nvlink_active(nv, handle))


def read_local(module: Any = None, node: str | None = None) -> NodeFacts:
    """Facts of this machine's GPUs; ``gpu_available`` False with ``gpu_error`` when none."""
    node = node or node_name()
    nv, reason = load_module(module)
    base = NodeFacts(node=node, source="nvml", collected_at=time.time())
    if nv is None:
        return _no_gpu(base, reason)
    try:
        nv.nvmlInit()
    except Exception as exc:
        return _no_gpu(base, f"NVML could not start ({_err(nv, exc)}): no NVIDIA driver or "
                             "GPU visible here")
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
        try:
            cuda: str | None = cuda_from_int(int(nv.nvmlSystemGetCudaDriverVersion_v2())).text
        except Exception:
            cuda = None
        count = int(nv.nvmlDeviceGetCount())
        gpus = tuple(_gpu(nv, i) for i in range(count))
    except Exception as exc:
        return _no_gpu(base, f"NVML query failed: {_err(nv, exc)}")
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
    if not gpus:
        return _no_gpu(base, "NVML sees no GPU", driver=driver, cuda=cuda)
    return replace(base, gpu_available=True, driver_version=driver, cuda_driver_version=cuda,
                   gpus=gpus)


def _no_gpu(base: NodeFacts, reason: str | None, driver: str | None = None,
            cuda: str | None = None) -> NodeFacts:
    return replace(base, gpu_available=False, gpu_error=reason, driver_version=driver,
                   cuda_driver_version=cuda)


class NvmlMemory:
    """Memory readings of every local GPU, NVML initialised once for the whole sampling."""

    label = "nvml"

    def __init__(self, module: Any = None, node: str | None = None) -> None:
        self._nv, reason = load_module(module)
        self.node = node or node_name()
        self.error: str | None = reason
        self._handles: list[Any] = []
        if self._nv is None:
            return
        try:
            self._nv.nvmlInit()
            count = int(self._nv.nvmlDeviceGetCount())
            self._handles = [self._nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:
            self.error = f"NVML could not start ({_err(self._nv, exc)})"
            self._handles = []
            return
        if not self._handles:
            self.error = "NVML sees no GPU"

    @property
    def available(self) -> bool:
        """True when at least one GPU can be read."""
        return bool(self._handles)

    def read(self) -> dict[str, tuple[int, int | None]]:
        """GPU key (``node/gpuN``) -> (used bytes, total bytes)."""
        assert self._nv is not None
        out: dict[str, tuple[int, int | None]] = {}
        for i, handle in enumerate(self._handles):
            mem = self._nv.nvmlDeviceGetMemoryInfo(handle)
            out[f"{self.node}/gpu{i}"] = (int(mem.used), int(mem.total))
        return out

    def close(self) -> None:
        """Shut NVML down (once)."""
        if self._nv is not None and self._handles:
            self._handles = []
            try:
                self._nv.nvmlShutdown()
            except Exception:
                pass
