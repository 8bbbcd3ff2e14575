"""What the plugin costs when it is not used, and what its telemetry sampler costs.

* :func:`pytest_overhead`: wall time of ``pytest`` on a small unrelated test file with the
  plugin (installed entry point ``k3accept``) and with ``-p no:k3accept``; best of N
  interleaved subprocess runs each, so other load on the machine inflates both alike.
* :func:`telemetry_cpu`: process CPU time of :class:`pytest_k3accept.observe.host.telemetry.GpuTelemetry`
  at its default interval (``--k3-gpu-interval``, 0.5 s). Without a GPU it falls back to
  vLLM's KV-cache usage, read from the server's ``/metrics`` with a line scan: that is what
  is measured here, against a real server, minus an idle baseline of the same length, side
  by side with a full ``prometheus_client`` parse per sample (what it did before).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

UNRELATED = '''
import pytest

@pytest.mark.parametrize("n", range(20))
def test_square(n):
    assert n * n >= 0

def test_text():
    assert "k3".upper() == "K3"
'''


def pytest_overhead(repeats: int = 5) -> dict[str, Any]:
    """Best-of-``repeats`` wall seconds with and without the plugin, and the difference."""
    best = {"with": float("inf"), "without": float("inf")}
    with tempfile.TemporaryDirectory(prefix="k3b-overhead-") as tmp:
        path = Path(tmp) / "test_unrelated.py"
        path.write_text(UNRELATED)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
        for i in range(repeats):
            order = ("with", "without") if i % 2 == 0 else ("without", "with")
            for which in order:
                cmd = base + (["-p", "no:k3accept"] if which == "without" else [])
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True,
                                      timeout=120, check=False)
                wall = time.perf_counter() - t0
                if proc.returncode != 0:
                    raise RuntimeError(f"pytest {which} the plugin failed: "
                                       f"{proc.stdout[-400:]}{proc.stderr[-400:]}")
                best[which] = min(best[which], wall)
    return {"with_s": best["with"], "without_s": best["without"],
            "added_s": best["with"] - best["without"], "repeats": repeats}


def import_time() -> float:
    """Seconds to import the plugin module in a fresh interpreter (pytest already imported)."""
    code = ("import time, pytest; t = time.perf_counter(); import pytest_k3accept.plugin; "
            "print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def telemetry_cpu(base_url: str, seconds: float = 5.0,
                  interval: float | None = None) -> dict[str, Any]:
    """CPU seconds per wall second of KV-usage sampling against ``base_url``'s /metrics:
    the plugin's reader (``MetricsScraper.gauges``, a line scan) and, side by side, a full
    ``prometheus_client`` parse per sample (``scrape().kv_cache_usage()``, the peer)."""
    from pytest_k3accept.observe.metrics import MetricsScraper
    from pytest_k3accept.config.settings import Settings
    from pytest_k3accept.observe.host.telemetry import GpuTelemetry

    default = getattr(Settings, "gpu_interval", 0.5)  # --k3-gpu-interval's default
    interval = float(interval or default)
    scraper = MetricsScraper(base_url, timeout=10.0)
    scraper.scrape()  # warm: imports, connection

    def scan() -> float | None:
        return scraper.gauges().get("kv")

    def full() -> float | None:
        return scraper.scrape().kv_cache_usage()

    c0 = time.process_time()
    time.sleep(seconds)
    idle = time.process_time() - c0
    out: dict[str, Any] = {"interval_s": interval}
    for name, reader in (("scan", scan), ("full", full)):
        tel = GpuTelemetry(None, interval=interval, reason="benchmark: no GPU",
                           kv_reader=reader, kv_label=f"{base_url}/metrics")
        c0, t0 = time.process_time(), time.perf_counter()
        with tel:
            time.sleep(seconds)
        cpu, wall = time.process_time() - c0 - idle, time.perf_counter() - t0
        samples = max(1, tel.samples)
        out[name] = {"samples": tel.samples, "wall_s": wall, "cpu_ms_per_s": cpu / wall * 1e3,
                     "cpu_ms_per_sample": cpu / samples * 1e3, "kind": tel.kind}
    out.update(out["scan"])  # the plugin's figures at the top level
    out["full_parse_ratio"] = (out["full"]["cpu_ms_per_sample"]
                               / max(1e-9, out["scan"]["cpu_ms_per_sample"]))
    return out
