"""A wire reference for the client's own cost: a loopback TCP relay, in its own process, that
timestamps each HTTP exchange it relays.

vLLM's histograms start their clock after the API server has parsed, templated and tokenized a
request, so "client TTFT - server TTFT" holds the API server's pre-clock work, and at 32K+
tokens that work varies from one request to the next by more than the client's whole cost
(docs/benchmarks.md, "Paired, one request at a time"). The relay sees the same request from
outside the client: the first byte of the request leaving the client, the first response bytes
that carry output text, the last byte of the response. ``client TTFT - wire TTFT`` is then
what the client adds on its two ends (building and sending the request, reading and parsing
the events), with the server's variance on both sides of the subtraction; runner and raw aiohttp
are compared on that figure pair by pair.

The relay runs in a separate process (its work does not share the client's interpreter) and
only forwards and timestamps (``time.perf_counter``: intervals, no clock shared with the
client is needed). It adds the same two loopback hops to every request of both clients.
Standard library only. ``with WireTap("http://127.0.0.1:8000") as tap: tap.base_url,
tap.take()``.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import re
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

#: the first event with output text (vLLM's first chat event is the role with empty content)
_TEXT = re.compile(rb'"(?:content|text)":\s?"(?!")')
_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.I)


@dataclass
class Exchange:
    """One request and its response as the relay saw them (seconds, the relay's clock)."""

    head: bytes  # the request line
    request_at: float  # first request byte from the client
    first_text_at: float | None  # the response bytes that carried the first output text
    end_at: float | None  # the response's last byte

    @property
    def ttft(self) -> float | None:
        return None if self.first_text_at is None else self.first_text_at - self.request_at

    @property
    def e2e(self) -> float | None:
        return None if self.end_at is None else self.end_at - self.request_at


class _Conn:
    """The state of one client connection: the exchange in flight and its response so far."""

    def __init__(self, done: list[Exchange], lock: threading.Lock) -> None:
        self.done, self.lock = done, lock
        self.cur: Exchange | None = None
        self.resp = b""
        self.body_at: int | None = None  # offset of the response body (after the headers)
        self.length: int | None = None

    def request_bytes(self, data: bytes, now: float) -> None:
        if self.cur is None:
            self.cur = Exchange(data.split(b"\r\n", 1)[0][:200], now, None, None)
            self.resp, self.body_at, self.length = b"", None, None

    def response_bytes(self, data: bytes, now: float) -> None:
        cur = self.cur
        if cur is None:
            return
        start = max(0, len(self.resp) - 16)  # a match may straddle two reads
        self.resp += data
        if self.body_at is None:
            h = self.resp.find(b"\r\n\r\n")
            if h >= 0:
                self.body_at = h + 4
                m = _LENGTH.search(self.resp, 0, h + 2)
                self.length = int(m.group(1)) if m else None
        if cur.first_text_at is None and _TEXT.search(self.resp, start):
            cur.first_text_at = now
        ended = self.body_at is not None and (
            len(self.resp) - self.body_at >= self.length if self.length is not None
            else self.resp.endswith(b"0\r\n\r\n"))
        if ended:
            cur.end_at = now
            with self.lock:
                self.done.append(cur)
            self.cur = None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, note: Any) -> None:
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            note(data, time.perf_counter())  # stamped before it is forwarded
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def _serve(host: str, port: int, control: Any) -> None:
    done: list[Exchange] = []
    lock = threading.Lock()

    async def handle(creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        sreader, swriter = await asyncio.open_connection(host, port)
        conn = _Conn(done, lock)
        try:
            await asyncio.gather(_pipe(creader, swriter, conn.request_bytes),
                                 _pipe(sreader, cwriter, conn.response_bytes))
        except asyncio.CancelledError:
            # the relay stopping with a kept-alive connection open: close it quietly (asyncio's
            # stream callback would print the cancellation as an error)
            swriter.close()
            cwriter.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        control.send(server.sockets[0].getsockname()[1])
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def commands() -> None:
            while True:
                try:
                    cmd = control.recv()
                except EOFError:
                    cmd = "stop"
                if cmd == "stop":
                    loop.call_soon_threadsafe(stop.set)
                    return
                with lock:
                    out = [(e.head, e.request_at, e.first_text_at, e.end_at) for e in done]
                    done.clear()
                control.send(out)

        threading.Thread(target=commands, daemon=True).start()
        async with server:
            await stop.wait()

    asyncio.run(main())


class WireTap:
    """The relay in front of ``upstream``; point the clients at :attr:`base_url`."""

    def __init__(self, upstream: str) -> None:
        u = urlsplit(upstream)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.base_url = ""
        self._proc: Any = None
        self._ctl: Any = None

    def __enter__(self) -> "WireTap":
        ctx = mp.get_context("spawn")
        self._ctl, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(self.host, self.port, child), daemon=True)
        self._proc.start()
        if not self._ctl.poll(30):
            raise RuntimeError("wire tap: the relay did not start")
        self.base_url = f"http://127.0.0.1:{self._ctl.recv()}"
        return self

    def take(self, want: int = 1, prefix: bytes = b"POST ", timeout: float = 5.0
             ) -> list[Exchange]:
        """The finished exchanges since the last call whose request line starts with
        ``prefix``, waiting up to ``timeout`` s for ``want`` of them."""
        got: list[Exchange] = []
        deadline = time.monotonic() + timeout
        while True:
            self._ctl.send("take")
            got += [Exchange(*t) for t in self._ctl.recv() if t[0].startswith(prefix)]
            if len(got) >= want or time.monotonic() > deadline:
                return got
            time.sleep(0.01)

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            try:
                self._ctl.send("stop")
            except (OSError, ValueError):
                pass
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
