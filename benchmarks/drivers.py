"""In-process load drivers for ``run.py``: the plugin's load runner and raw aiohttp.

Both send the same chat body (:data:`PROMPT`, ``max_tokens`` = chunks, streamed with
``include_usage``), closed loop (``concurrency`` workers back to back) or open loop (Poisson
arrivals at ``rate``, seeded), after a warm-up phase on the same client (so connections are
open). Each returns a :func:`row`: achieved req/s, mean in-flight concurrency, client TTFT
p50/p99 and this process's CPU time per request over the measured phase only.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import time
from typing import Any

from pytest_k3accept.observe.load import stats

#: ~32 prompt tokens (the stub counts len/4; GuideLLM and vllm bench get 32 synthetic tokens)
PROMPT = "Summarise the benchmark: " + " ".join(f"item{i}" for i in range(17))
MODEL = "stub-model"
perf = time.perf_counter


def body(chunks: int, prompt: str = PROMPT) -> dict[str, Any]:
    """The request every in-process driver sends (``prompt``: the context axis's long one)."""
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": chunks, "stream": True, "stream_options": {"include_usage": True}}


def row(tool: str, mode: str, ok: int, errors: int, elapsed: float, conc: float | None,
        ttft: list[float] | dict[str, float] | None, cpu_s: float | None = None,
        note: str = "") -> dict[str, Any]:
    """One table row (times in ms); ``ttft`` as seconds or a stats distribution."""
    dist = stats.distribution(ttft) if isinstance(ttft, list) else ttft
    return {"tool": tool, "mode": mode, "ok": ok, "errors": errors,
            "rps": ok / elapsed if elapsed > 0 else 0.0, "conc": conc,
            "ttft_p50_ms": dist["p50"] * 1e3 if dist else None,
            "ttft_p99_ms": dist["p99"] * 1e3 if dist else None,
            "cpu_us": cpu_s / max(1, ok + errors) * 1e6 if cpu_s is not None else None,
            "note": note}


def skipped(tool: str, mode: str, why: str) -> dict[str, Any]:
    """A row that says why a tool did not run."""
    return {"tool": tool, "mode": mode, "ok": 0, "errors": 0, "rps": None, "conc": None,
            "ttft_p50_ms": None, "ttft_p99_ms": None, "cpu_us": None, "note": why}


# ------------------------------------------------------------------ the plugin's runner

async def _runner(url: str, conc: int | None, rate: float | None, n: int, warm: int,
                  chunks: int, cap: float, procs: int = 1,
                  prompt: str = PROMPT) -> dict[str, Any]:
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.runner import run_load

    if procs > 1:
        return await _split(url, conc, rate, n, warm, chunks, cap, procs)

    req = [{"messages": [{"role": "user", "content": prompt}], "max_tokens": chunks}]
    base = LoadProfile(name="bench", output_tokens=chunks, ignore_eos=False,
                       max_seconds=cap, timeout=None)
    closed = base.replace("bench", concurrency=conc or 1, requests=warm)
    prof = base.replace("bench", concurrency=conc, rate=rate, requests=n, seed=1) \
        if rate else base.replace("bench", concurrency=conc, requests=n)
    async with K3Client(url, MODEL, timeout=60.0) as client:
        if warm:
            await run_load(client, req, closed, metrics=False)
        gc.collect()
        c0 = time.process_time()
        res = await run_load(client, req, prof, metrics=False)
        cpu = time.process_time() - c0
    s = res.summary
    return row("k3accept runner", "", s["ok"], s["errors"], res.elapsed,
               res.achieved_concurrency["mean"], s["ttft"], cpu)


async def _split(url: str, conc: int | None, rate: float | None, n: int, warm: int,
                 chunks: int, cap: float, procs: int) -> dict[str, Any]:
    """The runner over ``procs`` worker processes (``processes = procs``, LocalPlacement).

    CPU per request counts the run only: this process's CPU over ``run_load`` (spawning,
    the start handshake, polling, merging) plus each worker's CPU over its share
    (``client_cpu_by_process``); the workers' interpreter start and imports (before the
    agreed start) are measured apart, from ``RUSAGE_CHILDREN``, and given in the note."""
    import resource

    from pytest_k3accept.observe.endpoint.discover import Endpoint
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.runner import run_load

    req = [{"messages": [{"role": "user", "content": PROMPT}], "max_tokens": chunks}]
    base = LoadProfile(name="bench", output_tokens=chunks, ignore_eos=False,
                       max_seconds=cap, timeout=None)
    prof = (base.replace("bench", concurrency=conc, rate=rate, requests=n, seed=1,
                         processes=procs) if rate else
            base.replace("bench", concurrency=conc, requests=n, processes=procs))
    ep = Endpoint(url.removesuffix("/v1/chat/completions"), MODEL, timeout=60.0)
    if warm:  # the server's side warmed as for one process (the workers start fresh)
        await run_load(ep, req, base.replace("bench", concurrency=conc or 1, requests=warm),
                       metrics=False)
    gc.collect()
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0 = time.process_time()
    res = await run_load(ep, req, prof, metrics=False)
    own = time.process_time() - c0
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s = res.summary
    shares = [c * res.elapsed for c in s["client_cpu_by_process"] if c is not None]
    workers = sum(shares)
    children = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    note = (f"{procs} processes: workers {workers:.2f} s CPU over the run, "
            f"+{max(0.0, children - workers):.2f} s start-up (not counted)"
            + (f"; PARTIAL: {s['partial']}" if s.get("partial") else "")
            + ("; client-limited" if s.get("client_limited") else ""))
    return row(f"k3accept runner x{procs}", "", s["ok"], s["errors"], res.elapsed,
               res.achieved_concurrency["mean"], s["ttft"], own + workers, note=note)


# ------------------------------------------------------------------ raw aiohttp

async def _raw(url: str, conc: int | None, rate: float | None, n: int, warm: int,
               chunks: int, cap: float, prompt: str = PROMPT) -> dict[str, Any]:
    import aiohttp

    payload = json.dumps(body(chunks, prompt)).encode()
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    loads = json.loads
    ttfts: list[float] = []
    spans: list[tuple[float, float]] = []
    failed = 0

    async def one(s: aiohttp.ClientSession, keep: bool) -> None:
        nonlocal failed
        t0 = perf()
        first = None
        done = False
        try:
            async with s.post(url, data=payload, headers=headers) as resp:
                if resp.status == 200:
                    async for line in resp.content:
                        if line[:5] != b"data:":
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            done = True
                            break
                        ev = loads(data)
                        if first is None and ev.get("choices"):
                            first = perf()
        except aiohttp.ClientError:
            done = False
        if keep:
            spans.append((t0, perf()))
            if done and first is not None:
                ttfts.append(first - t0)
            else:
                failed += 1

    async def closed(s: aiohttp.ClientSession, count: int, keep: bool, stop: float) -> None:
        left = iter(range(count))

        async def worker() -> None:
            for _ in left:
                if perf() > stop:
                    return
                await one(s, keep)
        await asyncio.gather(*(worker() for _ in range(min(conc or 1, count))))

    async def opened(s: aiohttp.ClientSession, stop: float) -> None:
        rng, sem = random.Random(1), asyncio.Semaphore(conc) if conc else None
        tasks, at = [], perf()

        async def capped() -> None:
            try:
                await one(s, True)
            finally:
                if sem is not None:
                    sem.release()
        for _ in range(n):
            delay = at - perf()
            if delay > 0:
                await asyncio.sleep(delay)
            if perf() > stop:
                break
            if sem is not None:
                await sem.acquire()
            tasks.append(asyncio.create_task(capped()))
            at += rng.expovariate(rate or 1.0)
        await asyncio.gather(*tasks)

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, auto_decompress=False,
                                     timeout=aiohttp.ClientTimeout(sock_read=60)) as s:
        if warm:
            await closed(s, warm, False, perf() + cap)
        gc.collect()
        c0, t0 = time.process_time(), perf()
        if rate:
            await opened(s, t0 + cap)
        else:
            await closed(s, n, True, t0 + cap)
        elapsed, cpu = perf() - t0, time.process_time() - c0
    conc_mean = stats.concurrency(spans, elapsed)["mean"]
    return row("raw aiohttp", "", len(ttfts), failed, elapsed, conc_mean, ttfts, cpu)


def run_inproc(tool: str, url: str, *, conc: int | None, rate: float | None, n: int,
               warm: int, chunks: int, cap: float, procs: int = 1,
               prompt: str = PROMPT) -> dict[str, Any]:
    """Run ``tool`` ("runner" or "raw") for one phase in a fresh event loop; the runner
    over ``procs`` worker processes when ``procs`` > 1; ``prompt`` the user message."""
    try:
        if tool == "runner":
            return asyncio.run(_runner(url, conc, rate, n, warm, chunks, cap, procs, prompt))
        return asyncio.run(_raw(url, conc, rate, n, warm, chunks, cap, prompt))
    except Exception as exc:  # noqa: BLE001 - a broken phase is a row, not a crash
        name = "k3accept runner" if tool == "runner" else "raw aiohttp"
        return skipped(name, "", f"failed: {type(exc).__name__}: {exc}")
