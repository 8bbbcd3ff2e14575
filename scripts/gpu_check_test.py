"""GPU check of pytest-k3accept, for a machine WITH an NVIDIA GPU (run by scripts/gpu-check.sh).

Not part of the CPU test suite (``testpaths = tests``). It runs the environment markers on
this machine's real facts and checks that ``k3_gpu`` reports the peak of a known allocation:
torch allocates ``K3_GPU_CHECK_GIB`` GiB (default 8) on GPU 0, holds it, frees it, and the
peak minus the baseline must match within ``K3_GPU_CHECK_TOL_MIB`` MiB (default 256).
Results go to ``$K3_GPU_CHECK_OUT/gpu-check.json`` when that variable is set.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

GIB, MIB = 1024 ** 3, 1024 ** 2
ALLOC = int(float(os.environ.get("K3_GPU_CHECK_GIB", "8")) * GIB)
TOL = int(float(os.environ.get("K3_GPU_CHECK_TOL_MIB", "256")) * MIB)
RESULTS: dict[str, Any] = {}


def _save() -> None:
    out = os.environ.get("K3_GPU_CHECK_OUT")
    if out:
        Path(out, "gpu-check.json").write_text(json.dumps(RESULTS, indent=2, default=str))


@pytest.mark.k3_driver(min="580")
@pytest.mark.k3_cuda(major=13)
@pytest.mark.k3_topology(gpus=1)
def test_environment_markers(k3_host: Any) -> None:
    """C4/C3/C5 on this machine's facts (local NVML + the collected facts file)."""
    RESULTS["host"] = k3_host.summary()
    RESULTS["drivers"] = k3_host.drivers()
    RESULTS["cuda_runtimes"] = k3_host.cuda_runtimes()
    _save()
    assert k3_host.gpu_count and k3_host.gpu_count >= 1


def test_peak_matches_a_known_allocation(k3_gpu: Any) -> None:
    """Allocate ALLOC bytes with torch, free them; k3_gpu's peak - baseline == ALLOC."""
    import torch  # a GPU check without torch is a failure, not a skip
    assert torch.cuda.is_available(), "torch sees no CUDA device"
    assert k3_gpu.available, k3_gpu.describe()
    settle = max(1.0, 5 * k3_gpu.interval)
    torch.ones(1, device="cuda:0")  # CUDA context first: it is not part of the allocation
    torch.cuda.synchronize()
    time.sleep(settle)
    base = k3_gpu.sample_now()
    t_alloc = time.time()
    block = torch.empty(ALLOC, dtype=torch.uint8, device="cuda:0")
    block.fill_(1)
    torch.cuda.synchronize()
    time.sleep(settle)
    held = k3_gpu.sample_now()
    t_free = time.time()
    del block
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    time.sleep(settle)
    after = k3_gpu.sample_now()
    key = max(held, key=lambda k: held[k] - base.get(k, 0.0))  # the GPU torch used
    peak = k3_gpu.peak[key]
    total = k3_gpu.total[key]
    during = [v for t, v in k3_gpu.series[key] if t_alloc < t < t_free]
    RESULTS["telemetry"] = {
        "gpu": key, "alloc_bytes": ALLOC, "tolerance_bytes": TOL, "baseline_bytes": base[key],
        "held_bytes": held[key], "after_free_bytes": after[key], "peak_bytes": peak,
        "peak_minus_baseline_bytes": peak - base[key], "total_bytes": total,
        "headroom": k3_gpu.headroom[key], "samples": k3_gpu.samples,
        "samples_while_held": len(during), "interval_s": k3_gpu.interval,
        "torch": torch.__version__, "torch_mem_get_info": list(torch.cuda.mem_get_info(0)),
        "describe": k3_gpu.describe()}
    _save()
    assert abs((peak - base[key]) - ALLOC) <= TOL, RESULTS["telemetry"]
    assert abs(after[key] - base[key]) <= TOL, "the freed memory did not show as freed"
    assert len(during) >= 3, "the background sampler did not sample while memory was held"
    assert total and k3_gpu.headroom[key] == pytest.approx(1 - peak / total)
