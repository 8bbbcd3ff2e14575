"""The runner's clock against vLLM's own: TTFT and e2e means over the same requests.

Starts the embedded CPU vLLM testbed (tiny model, ``pytest_k3accept.testbed`` +
``server.launch.ServerProcess``, as the test suite's ``testbed`` fixture does), runs a set of
streamed requests through :func:`pytest_k3accept.observe.load.runner.run_load`, and compares the
client's mean TTFT / e2e with the server's histograms ``vllm:time_to_first_token_seconds``
and ``vllm:e2e_request_latency_seconds`` (sum and count increases over exactly those
requests -> mean). The difference is what the client adds (HTTP, SSE parsing, event loop),
plus vLLM's API-server work before its clock starts (request parsing, chat template,
tokenization) and after it stops (detokenization, the last SSE writes).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from drivers import PROMPT

TTFT, E2E = "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"


class Testbed:
    """A real vLLM CPU server for the accuracy phase; ``with Testbed() as url``."""

    def __init__(self, timeout: float = 300.0) -> None:
        self.timeout = timeout
        self.proc: Any = None
        self.base_url = ""
        self.model = ""
        self._tmp = tempfile.TemporaryDirectory(prefix="k3b-vllm-")

    def __enter__(self) -> "Testbed":
        from pytest_k3accept import testbed
        from pytest_k3accept.observe.server.launch import ServerProcess, free_port

        reason = testbed.unavailable_reason()
        if reason:
            raise RuntimeError(f"vLLM testbed unavailable: {reason}")
        model = testbed.build_model("tiny")
        port = free_port()
        self.base_url, self.model = f"http://127.0.0.1:{port}", str(model)
        self.proc = ServerProcess()
        self.proc.start(testbed.server_command(model, port=port), env=testbed.server_env(),
                        log_path=Path(self._tmp.name) / "vllm.log")
        try:
            self.proc.wait_ready(self.base_url, self.timeout)
        except Exception:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.stop()
        self._tmp.cleanup()


def _served_model(base_url: str) -> str:
    import httpx

    return str(httpx.get(f"{base_url}/v1/models", timeout=10).json()["data"][0]["id"])


def _settled(scraper: Any, before: Any, count: int, timeout: float = 10.0) -> Any:
    """Scrape until the server's TTFT histogram counted ``count`` more requests."""
    deadline = time.monotonic() + timeout
    while True:
        after = scraper.scrape()
        if (after - before).histogram(E2E)[1] >= count or time.monotonic() > deadline:
            return after
        time.sleep(0.1)


def measure(base_url: str, *, conc: int, n: int, chunks: int = 16) -> dict[str, Any]:
    """Client vs server means (ms) for ``n`` streamed requests at ``conc`` streams."""
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.runner import run_load
    from pytest_k3accept.observe.metrics import MetricsScraper

    model = _served_model(base_url)
    req = [{"messages": [{"role": "user", "content": PROMPT}], "max_tokens": chunks}]
    prof = LoadProfile(name="accuracy", concurrency=conc, requests=n, output_tokens=chunks,
                       ignore_eos=True, max_seconds=600.0)
    scraper = MetricsScraper(base_url, timeout=10.0)

    async def go() -> Any:
        async with K3Client(base_url, model, timeout=120.0) as client:
            await run_load(client, req, prof.replace("warm", requests=min(n, conc)),
                           metrics=False)
            before = scraper.scrape()
            res = await run_load(client, req, prof, metrics=False)
            return before, res

    before, res = asyncio.run(go())
    delta = _settled(scraper, before, res.summary["ok"]) - before
    s = res.summary
    out: dict[str, Any] = {"concurrency": conc, "requests": n, "ok": s["ok"],
                           "server_count": delta.histogram(E2E)[1]}
    for key, name in (("ttft", TTFT), ("e2e", E2E)):
        server = delta.histogram_mean(name)
        client = s[key]["mean"] if s[key] else None
        out[f"{key}_client_ms"] = client * 1e3 if client is not None else None
        out[f"{key}_server_ms"] = server * 1e3 if server is not None else None
        out[f"{key}_added_ms"] = (client - server) * 1e3 if None not in (client, server) \
            else None
        out[f"{key}_client_p99_ms"] = s[key]["p99"] * 1e3 if s[key] else None
    return out


def run(phases: list[tuple[int, int]], log: Callable[[str], object] = print,
        telemetry_s: float = 5.0) -> dict[str, Any]:
    """Start the testbed, measure each (concurrency, requests) phase, then the telemetry
    sampler's CPU cost against the same server; stop the server."""
    from overhead import telemetry_cpu

    t0 = time.monotonic()
    with Testbed() as tb:
        log(f"# vLLM testbed ready at {tb.base_url} in {time.monotonic() - t0:.0f} s")
        results = [measure(tb.base_url, conc=c, n=n) for c, n in phases]
        tel = telemetry_cpu(tb.base_url, seconds=telemetry_s)
    return {"phases": results, "telemetry": tel}
