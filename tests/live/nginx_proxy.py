"""A real nginx reverse proxy on loopback, in front of a testbed server (live tests only).

Debian's ``nginx`` package (``scripts/system-deps.sh`` installs it), started without root:
``nginx -c CONF -p PREFIX -g 'daemon off;'`` with the pid, logs and temp paths under the
test's tmp directory. ``nginx_factory(upstream, buffering=..., read_timeout=...)`` returns a
:class:`Proxy` (its ``base_url``); every proxy started is stopped at the end of the module.
Import the fixture into a test module: ``from nginx_proxy import nginx_factory``.

Seen here (nginx 1.22.1, Debian 12): ``proxy_buffering on`` does NOT hold an event stream
back for a fast client: vLLM's chunks are forwarded as they come (with ``proxy_http_version``
1.0 or 1.1, large ``proxy_buffers``, ``postpone_output 1m``, ``ssi``/``sub_filter`` on the
stream alike). A proxy that delivers the whole stream at once is what a store-and-forward
proxy does (some ingress and API gateways, serverless front ends): :func:`start_buffering`
runs one (``python nginx_proxy.py buffer PORT UPSTREAM``, an aiohttp process that reads the
real server's whole answer before sending it, naming itself in its ``Server`` header).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import pytest

CONF = """\
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering {buffering};
            proxy_read_timeout {read_timeout}s;
            proxy_connect_timeout 5s;
        }}
    }}
}}
"""


@dataclass
class Proxy:
    """A running nginx: its URL, config and process."""

    base_url: str
    prefix: Path
    process: subprocess.Popen[bytes]
    #: what it sends as its ``Server`` header (``nginx/1.22.1``)
    server: str = ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(tmp: Path, upstream: str, *, buffering: bool = False,
          read_timeout: float = 60) -> Proxy:
    """Start nginx proxying to ``upstream`` (a base URL or ``host:port``); wait until it
    listens (bounded), or fail with its error log."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                      else None)
    if nginx is None:
        from conftest import _unavailable  # the root conftest: skip, or fail under CI

        _unavailable("nginx is not installed (scripts/system-deps.sh installs it as root)")
        raise AssertionError("unreachable")
    port = _free_port()
    prefix = tmp / f"nginx-{port}"
    for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    host = urlsplit(upstream).netloc or upstream
    conf = prefix / "nginx.conf"
    conf.write_text(CONF.format(prefix=prefix, port=port, upstream=host,
                                buffering="on" if buffering else "off",
                                read_timeout=f"{read_timeout:g}"))
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(prefix), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    version = subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr
    proxy = Proxy(f"http://127.0.0.1:{port}", prefix, proc,
                  version.split(":", 1)[-1].strip())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            pytest.fail(f"nginx exited ({proc.returncode}): {err} {proxy.error_log()}",
                        pytrace=False)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proxy
        except OSError:
            time.sleep(0.2)
    proxy.stop()
    pytest.fail(f"nginx did not listen on {port} within 60 s: {proxy.error_log()}",
                pytrace=False)
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def nginx_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Proxy]]:
    """Start real nginx proxies: ``nginx_factory(upstream, buffering=False,
    read_timeout=60)``; all stopped at module end."""
    started: list[Proxy] = []
    tmp = tmp_path_factory.mktemp("nginx")

    def factory(upstream: str, **kw: Any) -> Proxy:
        proxy = start(tmp, upstream, **kw)
        started.append(proxy)
        return proxy

    try:
        yield factory
    finally:
        for proxy in started:
            proxy.stop()


def start_buffering(upstream: str) -> tuple[str, subprocess.Popen[bytes]]:
    """A store-and-forward proxy to ``upstream`` in its own process: (base URL, process)."""
    import sys

    port = _free_port()
    proc = subprocess.Popen([sys.executable, __file__, "buffer", str(port), upstream],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return f"http://127.0.0.1:{port}", proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail(f"the buffering proxy did not start: "
                f"{proc.stderr.read().decode(errors='replace') if proc.stderr else ''}",
                pytrace=False)
    raise AssertionError("unreachable")


def _serve_buffering(port: int, upstream: str) -> None:
    import aiohttp
    from aiohttp import web

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("content-type", "authorization", "accept")}
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            async with session.request(request.method, upstream + request.path_qs,
                                       data=body, headers=headers) as resp:
                whole = await resp.read()  # the whole answer, then one send
                return web.Response(body=whole, status=resp.status, headers={
                    "Content-Type": resp.headers.get("Content-Type", "text/plain"),
                    "Server": "store-and-forward-proxy/1.0"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=True)


if __name__ == "__main__":  # python nginx_proxy.py buffer PORT UPSTREAM
    import sys

    _serve_buffering(int(sys.argv[2]), sys.argv[3])
