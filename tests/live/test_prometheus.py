"""The Prometheus path against a REAL Prometheus server (Debian package ``prometheus``).

The tests start Prometheus on a loopback port with a temporary config and TSDB. It scrapes
two targets every second: a small exporter served here with dcgm-exporter-style series (the
stand-in for dcgm-exporter: same metric names and labels) and the real vLLM testbed's
``/metrics``. The plugin then reads driver, memory and vLLM's ``kv_cache_usage_perc``
through PromQL. Without ``prometheus`` the tests skip with the reason (and fail under
``K3ACCEPT_LIVE_REQUIRED=1``); the starter is shared (``prometheus_server.py``).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

import prometheus_server
from prometheus_server import wait_until
from pytest_k3accept.observe.host import gather
from pytest_k3accept.observe.host.remote import MIB, Prometheus
from pytest_k3accept.observe.host.telemetry import GpuTelemetry

pytestmark = pytest.mark.live

HOST, DRIVER, TOTAL_MIB = "gpu-a", "580.65.06", 143771
INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


class DcgmExporter:
    """dcgm-exporter-style /metrics for two GPUs of node ``gpu-a``; ``used`` is mutable."""

    def __init__(self) -> None:
        self.used = [1024, 2048]
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = exporter.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def text(self) -> str:
        out = []
        for metric in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL"):
            out += [f"# HELP {metric} stand-in", f"# TYPE {metric} gauge"]
            for gpu, used in enumerate(self.used):
                value = {"DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": TOTAL_MIB - used,
                         "DCGM_FI_DEV_GPU_UTIL": 0}[metric]
                out.append(f'{metric}{{gpu="{gpu}",UUID="GPU-{gpu:04d}",device="nvidia{gpu}",'
                           f'modelName="NVIDIA H200",Hostname="{HOST}",'
                           f'DCGM_FI_DRIVER_VERSION="{DRIVER}"}} {value}')
        return "\n".join(out) + "\n"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def exporter() -> Iterator[DcgmExporter]:
    exp = DcgmExporter()
    yield exp
    exp.close()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, exporter: DcgmExporter,
               testbed: Any) -> Iterator[str]:
    """A real Prometheus on loopback scraping the exporter and the vLLM testbed every 1 s."""
    vllm = testbed.base_url.split("//", 1)[1]
    with prometheus_server.start(tmp_path_factory.mktemp("prometheus"),
                                 {"dcgm": exporter.address, "vllm": vllm}) as url:
        yield url


def test_driver_and_memory_through_promql(prometheus: str, exporter: DcgmExporter) -> None:
    facts = gather(prometheus_url=prometheus, local=False)
    assert facts.notes == () and facts.node_count == 1 and facts.gpu_count == 2
    node = facts.nodes[0]
    assert (node.node, node.driver_version) == (HOST, DRIVER)
    assert node.source == f"prometheus:{prometheus}"
    assert [g.memory_used_bytes for g in node.gpus] == [u * MIB for u in exporter.used]
    assert all(g.memory_total_bytes == TOTAL_MIB * MIB for g in node.gpus)


def test_peak_through_prometheus_telemetry(prometheus: str, exporter: DcgmExporter) -> None:
    prom = Prometheus(prometheus)
    key = f"{HOST}/gpu1"
    with GpuTelemetry(Prometheus(prometheus), interval=0.5) as tel:
        exporter.used[1] = 90000
        wait_until("spike visible", lambda: prom.read()[key][0] == 90000 * MIB, timeout=15)
        exporter.used[1] = 3000
        wait_until("spike over", lambda: prom.read()[key][0] == 3000 * MIB, timeout=15)
    assert tel.kind == "gpu-memory" and tel.errors == 0
    assert tel.peak[key] == 90000 * MIB
    assert tel.headroom[key] == pytest.approx(1 - 90000 / TOTAL_MIB)
    assert tel.stopped_at is not None and tel.started_at is not None
    # max_over_time still sees the spike that the latest value no longer shows
    assert prom.peak_between(tel.started_at, tel.stopped_at)[key] == 90000 * MIB
    assert prom.read()[key][0] == 3000 * MIB


def test_vllm_kv_usage_through_prometheus(prometheus: str, testbed: Any) -> None:
    from pytest_k3accept.observe.metrics import MetricsScraper

    prom = Prometheus(prometheus)
    series = prom.query("vllm:kv_cache_usage_perc")
    assert series and all(labels["job"] == "vllm" for _, labels, _ in series)
    assert {labels["model_name"] for _, labels, _ in series} == {"k3-testbed"}
    usage = prom.kv_cache_usage()
    assert usage is not None and 0.0 <= usage <= 1.0
    assert usage == MetricsScraper(testbed.base_url).scrape().kv_cache_usage()
    config = prom.query("vllm:cache_config_info")
    assert config and config[0][1]["enable_prefix_caching"] in ("True", "False")


PLUGIN_SUITE = '''
import sys
import pytest
from pytest_k3accept.observe.host.nvml_stub import StubNvml

sys.modules["pynvml"] = StubNvml(fail_init=True)  # no local GPU: remote facts only

@pytest.mark.k3_driver(min="580")
@pytest.mark.k3_topology(gpus=2)
def test_env(k3_host):
    assert k3_host.gpu_count == 2

@pytest.mark.k3_driver(min="590")
def test_needs_590():
    pass

def test_remote_telemetry(k3_gpu):
    assert k3_gpu.available and k3_gpu.source_label == "prometheus"
    assert k3_gpu.peak["gpu-a/gpu0"] == 1024 * 2**20
'''


def test_markers_and_k3_gpu_with_prometheus_url(pytester: pytest.Pytester,
                                                prometheus: str) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_remote=PLUGIN_SUITE)
    result = pytester.runpytest("--k3-prometheus-url", prometheus, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*expected host driver >= 590*actual 580.65.06 on gpu-a*"])


KV_SUITE = '''
import sys
from pytest_k3accept.observe.host.nvml_stub import StubNvml

sys.modules["pynvml"] = StubNvml(fail_init=True)

def test_kv_fallback(k3_gpu, k3_endpoint):
    assert not k3_gpu.available and k3_gpu.kind == "kv-cache-usage"
    assert "NOT GPU memory" in k3_gpu.describe()
    assert 0.0 <= k3_gpu.peak["kv_cache_usage_perc"] <= 1.0
'''


def test_kv_usage_fallback_from_the_real_endpoint(pytester: pytest.Pytester,
                                                  testbed: Any) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_kv=KV_SUITE)
    result = pytester.runpytest("--k3-endpoint", testbed.base_url, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
