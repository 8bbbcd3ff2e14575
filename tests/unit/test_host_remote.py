"""dcgm-exporter text -> facts and memory readings; remote errors name the URL."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from pytest_k3accept.observe.host.remote import (MIB, Dcgm, Prometheus, RemoteError,
                                                 memory_from_samples, metrics_url,
                                                 nodes_from_samples)


def dcgm_text(host: str = "gpu-a", driver: str = "580.65.06", gpus: int = 2,
              used: int = 1000, free: int = 142000, reserved: int = 771) -> str:
    lines = []
    for metric, value in (("DCGM_FI_DEV_FB_USED", used), ("DCGM_FI_DEV_FB_FREE", free),
                          ("DCGM_FI_DEV_FB_RESERVED", reserved), ("DCGM_FI_DEV_GPU_UTIL", 3)):
        lines += [f"# HELP {metric} x", f"# TYPE {metric} gauge"]
        for g in range(gpus):
            lines.append(f'{metric}{{gpu="{g}",UUID="GPU-{host}-{g}",device="nvidia{g}",'
                         f'modelName="NVIDIA H200",Hostname="{host}",'
                         f'DCGM_FI_DRIVER_VERSION="{driver}"}} {value + g}')
    return "\n".join(lines) + "\n"


@pytest.fixture
def serve() -> Iterator[dict[str, object]]:
    """A loopback HTTP server answering every GET with ``page["body"]`` / ``page["status"]``."""
    page: dict[str, object] = {"body": "", "status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = str(page["body"]).encode()
            self.send_response(int(str(page["status"])))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    page["url"] = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield page
    httpd.shutdown()
    httpd.server_close()


def test_dcgm_scrape_gives_facts_and_memory(serve: dict[str, object]) -> None:
    serve["body"] = dcgm_text() + dcgm_text("gpu-b", "575.57.08", gpus=1)
    source = Dcgm(str(serve["url"]))
    assert source.url.endswith("/metrics")
    nodes = source.facts()
    assert [(n.node, n.driver_version, n.gpu_count) for n in nodes] == [
        ("gpu-a", "580.65.06", 2), ("gpu-b", "575.57.08", 1)]
    gpu1 = nodes[0].gpus[1]
    assert gpu1.name == "NVIDIA H200" and gpu1.uuid == "GPU-gpu-a-1"
    assert gpu1.memory_used_bytes == 1001 * MIB
    assert gpu1.memory_total_bytes == (1001 + 142001 + 772) * MIB
    assert source.read()["gpu-b/gpu0"] == (1000 * MIB, (1000 + 142000 + 771) * MIB)


def test_not_dcgm_and_not_prometheus(serve: dict[str, object]) -> None:
    serve["body"] = "# TYPE up gauge\nup 1\n"
    with pytest.raises(RemoteError, match="no DCGM_FI_\\* series"):
        Dcgm(str(serve["url"]) + "/metrics").facts()
    serve["body"] = "<html>hello</html>"
    with pytest.raises(RemoteError, match="did not answer JSON"):
        Prometheus(str(serve["url"])).query("up")
    serve["status"] = 500
    with pytest.raises(RemoteError, match="HTTP 500"):
        Dcgm(str(serve["url"])).read()


def test_unreachable_names_the_url() -> None:
    from pytest_k3accept.observe.server.launch import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RemoteError, match=f"cannot reach {url}/metrics"):
        Dcgm(url).read()


def test_prometheus_error_body(serve: dict[str, object]) -> None:
    serve["body"] = '{"status":"error","errorType":"bad_data","error":"parse error"}'
    with pytest.raises(RemoteError, match="bad_data: parse error"):
        Prometheus(str(serve["url"])).query("up{")


def test_sample_grouping_falls_back_to_hostname_and_instance() -> None:
    samples = [("DCGM_FI_DEV_FB_USED", {"gpu": "0", "hostname": "h1"}, 10.0),
               ("DCGM_FI_DEV_FB_USED", {"gpu": "1", "instance": "10.0.0.2:9400"}, 20.0),
               ("DCGM_FI_DEV_FB_USED", {"gpu": "x", "Hostname": "h1"}, 30.0),
               ("up", {"gpu": "0"}, 1.0)]
    assert memory_from_samples(samples) == {"10.0.0.2:9400/gpu1": (20 * MIB, None),
                                            "h1/gpu0": (10 * MIB, None)}
    nodes = nodes_from_samples(samples, "t")
    assert [n.node for n in nodes] == ["10.0.0.2:9400", "h1"]
    assert nodes[1].driver_version is None


def test_metrics_url() -> None:
    assert metrics_url("http://h:9400") == "http://h:9400/metrics"
    assert metrics_url("http://h:9400/custom") == "http://h:9400/custom"


def test_credentials_in_urls_never_reach_messages() -> None:
    from pytest_k3accept.observe.host.remote import shown
    from pytest_k3accept.observe.server.launch import free_port

    assert shown("http://user:s3cret@h:9090/x") == "http://***@h:9090/x"
    assert shown("http://h:9090") == "http://h:9090"
    url = f"http://admin:s3cret@127.0.0.1:{free_port()}"
    with pytest.raises(RemoteError) as info:
        Prometheus(url).query("up")
    assert "s3cret" not in str(info.value) and "***@127.0.0.1" in str(info.value)
