"""A REAL Prometheus (Debian package ``prometheus``, ``/usr/bin/prometheus``) on loopback for
the live tests: a temporary config and TSDB, every target scraped each second.

``start(tmp, {"job": "host:port", ...})`` is a context manager yielding Prometheus' URL once
it is ready and has scraped every target once (``up{job=...} == 1``); it stops Prometheus at
the end. Without the program the test skips with the reason, and fails under
``K3ACCEPT_LIVE_REQUIRED=1`` (the root conftest's ``_unavailable``), as in CI.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import httpx
import pytest

#: seconds between two scrapes of each target (and the scrape timeout)
SCRAPE_INTERVAL = 1.0


def wait_until(what: str, probe: Callable[[], Any], timeout: float = 45.0) -> Any:
    """``probe()``'s first truthy answer (exceptions count as not yet), polled every 0.25 s;
    the test fails naming ``what`` and the last answer after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        try:
            last = probe()
            if last:
                return last
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.25)
    pytest.fail(f"{what} did not happen within {timeout:.0f} s (last: {last!r})")


def config(targets: Mapping[str, str]) -> str:
    """prometheus.yml scraping each ``job: host:port`` every :data:`SCRAPE_INTERVAL`."""
    jobs = "".join(f"  - job_name: {job}\n    static_configs: [{{targets: [\"{address}\"]}}]\n"
                   for job, address in targets.items())
    return (f"global:\n  scrape_interval: {SCRAPE_INTERVAL:g}s\n"
            f"  scrape_timeout: {SCRAPE_INTERVAL:g}s\nscrape_configs:\n{jobs}")


def last_scrape(url: str, job: str) -> float:
    """When Prometheus last scraped ``job`` (Unix seconds; 0.0 before the first scrape)."""
    from pytest_k3accept.observe.host.remote import Prometheus

    prom = Prometheus(url)
    try:
        found = prom.query(f'timestamp(up{{job="{job}"}})')
    finally:
        prom.close()
    return min((value for _, _, value in found), default=0.0)


def scraped_after(url: str, job: str, moment: float, timeout: float = 15.0) -> float:
    """Wait until Prometheus has scraped ``job`` after ``moment``; that scrape's time."""
    return float(wait_until(f"a scrape of {job} after {moment:.1f}",
                            lambda: (t := last_scrape(url, job)) > moment and t, timeout))


@contextlib.contextmanager
def start(tmp: Path, targets: Mapping[str, str], timeout: float = 45.0) -> Iterator[str]:
    """Run Prometheus scraping ``targets`` (``{job: "host:port"}``); yields its URL."""
    from pytest_k3accept.observe.host.remote import Prometheus
    from pytest_k3accept.observe.server.launch import free_port

    exe = shutil.which("prometheus")
    if exe is None:
        from conftest import _unavailable  # the root conftest: skip, or fail under CI

        _unavailable("prometheus is not installed (Debian: apt-get install -y prometheus; "
                     "scripts/system-deps.sh installs it as root)")
        raise AssertionError("unreachable")
    path = tmp / "prometheus.yml"
    path.write_text(config(targets))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([exe, f"--config.file={path}",
                                 f"--storage.tsdb.path={tmp / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until("Prometheus ready",
                       lambda: httpx.get(f"{url}/-/ready").status_code == 200, timeout)
            prom = Prometheus(url)
            for job in targets:
                wait_until(f"a first successful scrape of {job}",
                           lambda: any(v == 1.0 for _, _, v in prom.query(f'up{{job="{job}"}}')),
                           timeout)
            prom.close()
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
