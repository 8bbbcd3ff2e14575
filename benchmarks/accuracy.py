"""The runner's clock against vLLM's own: TTFT and e2e means over the same requests.

Starts the embedded CPU vLLM testbed (tiny model, ``pytest_k3accept.testbed`` +
``server.launch.ServerProcess``, as the test suite's ``testbed`` fixture does), runs a set of
streamed requests through :func:`pytest_k3accept.observe.load.runner.run_load`, and compares the
client's mean TTFT / e2e with the server's histograms ``vllm:time_to_first_token_seconds``
and ``vllm:e2e_request_latency_seconds`` (sum and count increases over exactly those
requests -> mean). The difference is what the client adds (HTTP, SSE parsing, event loop),
plus vLLM's API-server work before its clock starts (request parsing, chat template,
tokenization) and after it stops (detokenization, the last SSE writes).

To tell the two apart, every phase also runs the same requests through **raw aiohttp** (one
session, ``readline`` over the event stream, no plugin code) against the same server: what raw
aiohttp adds over the server's clock is the API server's work outside its histogram plus a
minimal client; what the runner adds *beyond raw aiohttp* (``runner - raw``) is the runner's
own cost (target: within 0.5 ms of raw aiohttp at 1 stream).

Context axis: ``contexts`` (prompt tokens; 0 = the short default prompt) runs each phase at
each length, with prompts built to the token by the synthetic generator on the ``long``
testbed model (128K context). Prefix caching is off on this server, so a repeated prompt costs
what its first run cost. Standalone::

    python benchmarks/accuracy.py --contexts 0,8192,32768 --phases 1=8,8=16
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from drivers import PROMPT

TTFT, E2E = "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"


class Testbed:
    """A real vLLM CPU server for the accuracy phase; ``with Testbed() as url``."""

    def __init__(self, timeout: float = 300.0, *, variant: str = "tiny",
                 max_model_len: int = 2048, kv_cache_bytes: int = 1 << 30) -> None:
        self.timeout = timeout
        self.variant, self.max_model_len, self.kv_cache_bytes = (variant, max_model_len,
                                                                 kv_cache_bytes)
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
        model = testbed.build_model(self.variant)
        port = free_port()
        self.base_url, self.model = f"http://127.0.0.1:{port}", str(model)
        self.proc = ServerProcess()
        argv = testbed.pinned(testbed.server_command(  # the last CPU left to the client
            model, port=port, max_model_len=self.max_model_len,
            kv_cache_bytes=self.kv_cache_bytes, extra_args=["--no-enable-prefix-caching"]))
        self.proc.start(argv, env=testbed.server_env(),
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


def _raw_body(model: str, messages: list[dict[str, Any]], chunks: int) -> bytes:
    import json as _json

    return _json.dumps({"model": model, "messages": messages, "max_tokens": chunks,
                        "stream": True, "stream_options": {"include_usage": True},
                        "ignore_eos": True}).encode()


async def _raw_one(session: Any, url: str, body: bytes) -> tuple[float, float, float]:
    """(TTFT, e2e, first event) seconds of one streamed request through raw aiohttp:
    ``readline`` over the event stream. TTFT is the first event with output text, as the
    runner counts it (vLLM's first event is the assistant role with empty content, and a
    random-weight model's first tokens can decode to no text); "first event" is the first
    ``choices`` event, whatever it carries."""
    import json as _json

    t0 = time.perf_counter()
    first = event = None
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) \
            as resp:
        if resp.status != 200:
            raise RuntimeError(f"raw aiohttp: HTTP {resp.status}: {(await resp.text())[:200]}")
        async for line in resp.content:
            if line[:5] != b"data:":
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            if first is None:
                now = time.perf_counter()
                choices = _json.loads(data).get("choices") or [{}]
                event = event or (now if choices != [{}] else None)
                if (choices[0].get("delta") or {}).get("content"):
                    first = now
    end = time.perf_counter()
    return (first or end) - t0, end - t0, (event or end) - t0


def _raw_session() -> Any:
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                 timeout=aiohttp.ClientTimeout(total=None, sock_read=600))


def _raw_aiohttp(base_url: str, model: str, messages: list[dict[str, Any]], *, conc: int,
                 n: int, chunks: int) -> list[tuple[float, float, float]]:
    """:func:`_raw_one` for ``n`` requests at ``conc`` streams over one session."""
    body = _raw_body(model, messages, chunks)
    url = f"{base_url}/v1/chat/completions"

    async def go() -> list[tuple[float, float, float]]:
        out: list[tuple[float, float, float]] = []
        todo = iter(range(n))
        async with _raw_session() as session:
            async def worker() -> None:
                for _ in todo:
                    out.append(await _raw_one(session, url, body))
            await asyncio.gather(*(worker() for _ in range(conc)))
        return out
    return asyncio.run(go())


def paired(runner: list[float], raw: list[float]) -> dict[str, float | int | None]:
    """Paired differences ``runner[i] - raw[i]`` (ms, each pair run back to back): median,
    mean and the half-width of the mean's 95 % interval (normal approximation)."""
    import statistics

    d = [a - b for a, b in zip(runner, raw)]
    if not d:
        return {"pairs": 0, "median": None, "mean": None, "ci95": None}
    sd = statistics.stdev(d) if len(d) > 1 else None
    return {"pairs": len(d), "median": statistics.median(d), "mean": statistics.fmean(d),
            "ci95": 1.96 * sd / len(d) ** 0.5 if sd is not None else None}


def measure_paired(base_url: str, *, n: int, chunks: int = 16,
                   messages: list[dict[str, Any]] | None = None, wire: bool = True
                   ) -> dict[str, Any]:
    """At 1 stream, one request at a time, runner and raw aiohttp alternating (ABBA, so a
    drift of the machine cancels), ``/metrics`` scraped after every request: each request's
    own server TTFT / e2e (the histogram's sum moved by exactly that request), so what each
    client adds over the server's clock is known per request and the two clients are
    compared pair by pair, not mean against mean of different requests.

    ``wire``: both clients go through a :class:`wire.WireTap` relay, and each request's client
    TTFT / e2e is also compared with what the relay saw of the same request (its first byte
    out -> the first bytes with text back / the response's last byte): that difference holds
    no server time at all, so the API server's pre-clock work, which varies by milliseconds
    per request at 32K+ tokens, no longer hides the clients' own costs (``*_wire_*`` keys)."""
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.runner import run_load
    from pytest_k3accept.observe.metrics import MetricsScraper

    model = _served_model(base_url)
    messages = messages or [{"role": "user", "content": PROMPT}]
    req = [{"messages": messages, "max_tokens": chunks}]
    prof = LoadProfile(name="accuracy", concurrency=1, requests=1, output_tokens=chunks,
                       ignore_eos=True, max_seconds=3600.0)
    body = _raw_body(model, messages, chunks)
    scraper = MetricsScraper(base_url, timeout=30.0)
    added: dict[str, dict[str, list[float]]] = {
        who: {"ttft": [], "e2e": [], "ttft_wire": [], "e2e_wire": []}
        for who in ("runner", "raw")}
    tap: Any = None
    if wire:
        from wire import WireTap

        tap = WireTap(base_url).__enter__()
    client_url = tap.base_url if tap else base_url
    url = f"{client_url}/v1/chat/completions"

    async def go() -> None:
        async with K3Client(client_url, model, timeout=900.0) as client, \
                _raw_session() as session:
            await run_load(client, req, prof.replace("warm"), metrics=False)
            await _raw_one(session, url, body)
            if tap:
                tap.take(2)
            order = [("runner", "raw"), ("raw", "runner")]
            for i in range(n):
                for who in order[i % 2]:
                    before = scraper.scrape()
                    if who == "runner":
                        res = await run_load(client, req, prof, metrics=False)
                        s = res.summary
                        if not s["ok"]:
                            raise RuntimeError(f"runner request failed: {s}")
                        ttft, e2e = s["ttft"]["mean"], s["e2e"]["mean"]
                    else:
                        ttft, e2e, _ = await _raw_one(session, url, body)
                    delta = _settled(scraper, before, 1) - before
                    for key, name, value in (("ttft", TTFT, ttft), ("e2e", E2E, e2e)):
                        server_sum, count = delta.histogram(name)
                        if count != 1:
                            raise RuntimeError(f"{name}: {count} requests counted, not 1")
                        added[who][key].append((value - server_sum) * 1e3)
                    if tap:
                        seen = tap.take(1)
                        if len(seen) != 1 or seen[0].ttft is None or seen[0].e2e is None:
                            raise RuntimeError(f"wire tap: {len(seen)} exchanges seen, not 1")
                        added[who]["ttft_wire"].append((ttft - seen[0].ttft) * 1e3)
                        added[who]["e2e_wire"].append((e2e - seen[0].e2e) * 1e3)

    try:
        asyncio.run(go())
    finally:
        scraper.close()
        if tap:
            tap.__exit__()
    out: dict[str, Any] = {"concurrency": 1, "requests": n, "ok": n, "server_count": 2 * n,
                           "pairs": n}
    for key in ("ttft", "e2e", "ttft_wire", "e2e_wire"):
        import statistics

        if not added["runner"][key]:
            continue
        out[f"{key}_added_median_ms"] = statistics.median(added["runner"][key])
        out[f"{key}_raw_added_median_ms"] = statistics.median(added["raw"][key])
        out[f"{key}_paired_ms"] = paired(added["runner"][key], added["raw"][key])
    return out


def paired_line(p: dict[str, Any]) -> str:
    """A paired phase as a table line (ms)."""
    ctx = f"{p['context_tokens']}t" if p.get("context_tokens") else "short"
    parts = [f"{ctx:<7} c=1   pairs={p['pairs']:<3}"]
    for key in ("ttft", "e2e"):
        d = p[f"{key}_paired_ms"]
        ci = "" if d["ci95"] is None else f" +- {d['ci95']:.2f}"
        runner, raw = p[f"{key}_added_median_ms"], p[f"{key}_raw_added_median_ms"]
        parts.append(f"{key.upper() if key == 'ttft' else key} added median runner "
                     f"{runner:+.2f} raw {raw:+.2f}; runner - raw per pair: median "
                     f"{d['median']:+.2f}, mean {d['mean']:+.2f}{ci}")
    for key in ("ttft_wire", "e2e_wire"):
        d = p.get(f"{key}_paired_ms")
        if not d:
            continue
        ci = "" if d["ci95"] is None else f" +- {d['ci95']:.2f}"
        name = "TTFT" if key == "ttft_wire" else "e2e"
        parts.append(f"{name} over the wire: runner {p[f'{key}_added_median_ms']:+.2f} raw "
                     f"{p[f'{key}_raw_added_median_ms']:+.2f}; runner - raw per pair: median "
                     f"{d['median']:+.2f}, mean {d['mean']:+.2f}{ci}")
    return " | ".join(parts)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def measure(base_url: str, *, conc: int, n: int, chunks: int = 16,
            messages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Client vs server means (ms) for ``n`` streamed requests at ``conc`` streams, through
    the runner and through raw aiohttp (each against the server's histograms over exactly
    its own requests)."""
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.runner import run_load
    from pytest_k3accept.observe.metrics import MetricsScraper

    model = _served_model(base_url)
    messages = messages or [{"role": "user", "content": PROMPT}]
    req = [{"messages": messages, "max_tokens": chunks}]
    prof = LoadProfile(name="accuracy", concurrency=conc, requests=n, output_tokens=chunks,
                       ignore_eos=True, max_seconds=3600.0)
    scraper = MetricsScraper(base_url, timeout=30.0)

    async def go() -> Any:
        async with K3Client(base_url, model, timeout=900.0) as client:
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
    raw_before = scraper.scrape()
    raw = _raw_aiohttp(base_url, model, messages, conc=conc, n=n, chunks=chunks)
    raw_delta = _settled(scraper, raw_before, len(raw)) - raw_before
    for i, (key, name) in enumerate((("ttft", TTFT), ("e2e", E2E))):
        server = delta.histogram_mean(name)
        client = s[key]["mean"] if s[key] else None
        out[f"{key}_client_ms"] = client * 1e3 if client is not None else None
        out[f"{key}_server_ms"] = server * 1e3 if server is not None else None
        added = (client - server) * 1e3 if None not in (client, server) else None
        out[f"{key}_added_ms"] = added
        out[f"{key}_client_p99_ms"] = s[key]["p99"] * 1e3 if s[key] else None
        raw_server, raw_client = raw_delta.histogram_mean(name), _mean([r[i] for r in raw])
        raw_added = (raw_client - raw_server) * 1e3 if None not in (raw_client, raw_server) \
            else None
        out[f"{key}_raw_added_ms"] = raw_added
        # the runner's own cost: what it adds over the server's clock beyond what raw
        # aiohttp adds over the same server's clock
        out[f"{key}_runner_minus_raw_ms"] = added - raw_added \
            if added is not None and raw_added is not None else None
    event, text = _mean([r[2] for r in raw]), _mean([r[0] for r in raw])
    out["first_event_to_text_ms"] = (text - event) * 1e3 \
        if text is not None and event is not None else None
    return out


def _messages(base_url: str, tokens: int) -> list[dict[str, Any]]:
    """One user message that renders to exactly ``tokens`` prompt tokens of the served model
    (the synthetic generator, over the server's ``/tokenize``)."""
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.synthetic import generate

    async def go() -> Any:
        async with K3Client(base_url, _served_model(base_url), timeout=120.0) as client:
            return await generate(client, LoadProfile(name=f"accuracy-{tokens}",
                                                      context_tokens=tokens, requests=1,
                                                      output_tokens=16, seed=tokens))
    return list(asyncio.run(go()).requests[0].messages)


def run(phases: list[tuple[int, int]], log: Callable[[str], object] = print,
        telemetry_s: float = 5.0, contexts: tuple[int, ...] = (0,),
        pairs: dict[int, int] | None = None) -> dict[str, Any]:
    """Start the testbed, measure each (concurrency, requests) phase at each context length
    (0 = the short default prompt; longer ones on the ``long`` model), and where ``pairs``
    names the length, that many runner / raw aiohttp pairs one request at a time
    (:func:`measure_paired`); then the telemetry sampler's CPU cost against the same server;
    stop the server."""
    from overhead import telemetry_cpu

    t0 = time.monotonic()
    long = max(contexts) > 2000
    bed = Testbed(variant="long", max_model_len=131_072, kv_cache_bytes=512 << 20) if long \
        else Testbed()
    with bed as tb:
        log(f"# vLLM testbed ({bed.variant}) ready at {tb.base_url} in "
            f"{time.monotonic() - t0:.0f} s")
        results = []
        for tokens in contexts:
            messages = _messages(tb.base_url, tokens) if tokens else None
            for c, n in phases:
                p = measure(tb.base_url, conc=c, n=n, messages=messages)
                p["context_tokens"] = tokens or None
                results.append(p)
                log(line(p))
            if (pairs or {}).get(tokens):
                p = measure_paired(tb.base_url, n=(pairs or {})[tokens], messages=messages)
                p["context_tokens"] = tokens or None
                results.append(p)
                log(paired_line(p))
        tel = telemetry_cpu(tb.base_url, seconds=telemetry_s)
    return {"phases": results, "telemetry": tel}


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def line(p: dict[str, Any]) -> str:
    """One phase as a table line (ms)."""
    ctx = f"{p['context_tokens']}t" if p.get("context_tokens") else "short"
    return (f"{ctx:<7} c={p['concurrency']:<3} n={p['ok']:<4} TTFT client "
            f"{_fmt(p['ttft_client_ms'], '.2f')} server {_fmt(p['ttft_server_ms'], '.2f')} "
            f"added {_fmt(p['ttft_added_ms'], '+.2f')} (raw aiohttp "
            f"{_fmt(p['ttft_raw_added_ms'], '+.2f')}; runner - raw "
            f"{_fmt(p['ttft_runner_minus_raw_ms'], '+.2f')}) | e2e added "
            f"{_fmt(p['e2e_added_ms'], '+.2f')} (raw {_fmt(p['e2e_raw_added_ms'], '+.2f')}; "
            f"runner - raw {_fmt(p['e2e_runner_minus_raw_ms'], '+.2f')}) | client TTFT p99 "
            f"{_fmt(p['ttft_client_p99_ms'], '.2f')} | first event -> first text "
            f"{_fmt(p['first_event_to_text_ms'], '.2f')}")


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/accuracy.py``: the accuracy phase alone."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", default="0", help="prompt tokens, e.g. 0,8192,32768")
    ap.add_argument("--phases", default="1=40,64=256",
                    help="concurrency=requests pairs, e.g. 1=8,8=16 ('' for none)")
    ap.add_argument("--pairs", default="",
                    help="context=pairs at 1 stream, one request at a time, runner and raw "
                         "aiohttp alternating, e.g. 0=40,8192=20,32768=10")
    a = ap.parse_args(argv)
    phases = [(int(c), int(n)) for c, n in (p.split("=") for p in a.phases.split(",") if p)]
    pairs = {int(c): int(n) for c, n in (p.split("=") for p in a.pairs.split(",") if p)}
    contexts = tuple(int(x) for x in a.contexts.split(","))
    contexts = tuple(dict.fromkeys(contexts + tuple(pairs)))
    print(f"# accuracy: runner and raw aiohttp vs vLLM's own histograms (means, ms); "
          f"{time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}", flush=True)
    run(phases, lambda s: print(s, flush=True), contexts=contexts, pairs=pairs)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
