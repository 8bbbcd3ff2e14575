"""The bounded background sampler: series, exact peak, headroom, fallback and stopping."""

from __future__ import annotations

import threading
import time

import pytest

from pytest_k3accept.observe.host.nvml import NvmlMemory
from pytest_k3accept.observe.host.nvml_stub import GIB, StubGpu, StubNvml
from pytest_k3accept.observe.host.telemetry import (GPU_MEMORY, KV_USAGE, NONE, GpuTelemetry,
                                                    pick_source)


def wait_for(cond, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.005)


def test_peak_and_headroom_follow_an_allocation() -> None:
    stub = StubNvml([StubGpu(total=100 * GIB, used=2 * GIB), StubGpu(total=100 * GIB, used=0)])
    tel = GpuTelemetry(NvmlMemory(stub, node="n"), interval=0.01)
    with tel:
        wait_for(lambda: tel.samples >= 3)
        stub.gpus[0].used = 62 * GIB
        wait_for(lambda: tel.peak.get("n/gpu0", 0) == 62 * GIB)
        stub.gpus[0].used = 2 * GIB
        wait_for(lambda: tel.series["n/gpu0"][-1][1] == 2 * GIB)
    assert tel.kind == GPU_MEMORY and tel.available
    assert tel.peak == {"n/gpu0": 62 * GIB, "n/gpu1": 0}
    assert abs((tel.headroom["n/gpu0"] or 0) - 0.38) < 1e-9
    assert tel.total["n/gpu1"] == 100 * GIB
    assert stub.shutdowns == 1
    summary = tel.summary()
    assert summary["peak_bytes"]["n/gpu0"] == 62 * GIB and summary["errors"] == 0
    assert "n/gpu0 peak 62.00 GiB, headroom 38.0%" in tel.describe()


def test_sampling_stops_with_stop_and_is_bounded() -> None:
    stub = StubNvml([StubGpu(used=GIB)])
    tel = GpuTelemetry(NvmlMemory(stub, node="n"), interval=0.001, max_samples=5)
    tel.start()
    wait_for(lambda: tel.samples > 20)
    stub.gpus[0].used = 7 * GIB
    tel.stop()
    taken, reads = tel.samples, stub.reads
    assert len(tel.series["n/gpu0"]) == 5  # bounded
    assert tel.peak["n/gpu0"] == 7 * GIB  # the last sample at stop
    time.sleep(0.05)
    assert (tel.samples, stub.reads) == (taken, reads)  # nothing runs after stop
    assert not any(t.name == "k3-gpu-telemetry" and t.is_alive() for t in threading.enumerate())
    tel.stop()  # idempotent


def test_peak_survives_dropped_samples() -> None:
    values = iter([5, 90, 10] + [1] * 100)

    class Source:
        label = "test"

        def read(self) -> dict[str, tuple[int, int | None]]:
            return {"g": (next(values, 1), 100)}

        def close(self) -> None:
            pass

    tel = GpuTelemetry(Source(), interval=10, max_samples=2)
    tel.start()
    for _ in range(6):
        tel.sample_now()
    tel.stop()
    assert tel.peak["g"] == 90 and len(tel.series["g"]) == 2
    assert tel.headroom["g"] == pytest.approx(0.1)


def test_source_errors_are_counted_not_raised() -> None:
    class Broken:
        label = "broken"

        def read(self) -> dict[str, tuple[int, int | None]]:
            raise ConnectionError("dcgm went away")

        def close(self) -> None:
            pass

    tel = GpuTelemetry(Broken(), interval=0.01).start()
    wait_for(lambda: tel.errors >= 2)
    tel.stop()
    assert tel.peak == {} and "dcgm went away" in (tel.last_error or "")
    assert "no reading" in tel.describe()


def test_no_source_says_so_and_kv_fallback_is_labelled() -> None:
    none = GpuTelemetry(None, reason="local NVML: no driver").start()
    none.stop()
    assert none.kind == NONE and not none.available and none.samples == 0
    assert none.describe() == "no GPU memory source: local NVML: no driver"
    usage = iter([0.1, 0.75, 0.3])
    kv = GpuTelemetry(None, interval=5, reason="no GPU", kv_reader=lambda: next(usage, 0.2),
                      kv_label="http://x/metrics").start()
    kv.sample_now()
    kv.stop()
    assert kv.kind == KV_USAGE and not kv.available
    assert kv.peak["kv_cache_usage_perc"] == 0.75 and kv.headroom == {}
    text = kv.describe()
    assert "NOT GPU memory" in text and "peak 75.0%" in text
    assert kv.summary()["kv_cache_usage_peak"] == 0.75 and "peak_bytes" not in kv.summary()


def test_pick_source_prefers_remote_when_given_and_says_why_none() -> None:
    src, why = pick_source(nvml_module=StubNvml([StubGpu()]))
    assert src is not None and src.label == "nvml" and why is None
    src.close()
    src, why = pick_source(nvml_module=StubNvml(fail_init=True))
    assert src is None and "local NVML: NVML could not start" in (why or "")
    assert "no --k3-dcgm-url / --k3-prometheus-url given" in (why or "")
    from pytest_k3accept.observe.server.launch import free_port

    url = f"http://127.0.0.1:{free_port()}"
    src, why = pick_source(dcgm_url=url, nvml_module=StubNvml(fail_init=True))
    assert src is None and f"dcgm: cannot reach {url}/metrics" in (why or "")
