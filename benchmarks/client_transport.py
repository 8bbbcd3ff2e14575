"""Benchmark httpx-API streaming clients against raw aiohttp.

Starts ``stub_server.py`` in a separate process (own interpreter, own GIL, own
event loop), then for each concurrency runs every client driver from
``clients.py`` closed-loop with the same request count and prints::

    client  conc  ok  err  req/s  TTFT p50/p99 (ms)  e2e p50/p99 (ms)  ratio-to-aiohttp

Usage::

    /root/.venvs/k3dev/bin/python benchmarks/client_transport.py            # full
    /root/.venvs/k3dev/bin/python benchmarks/client_transport.py --quick    # CI, < 60 s
    ... --clients aiohttp_raw,httpx_aiohttp_raw --concurrency 64 --requests 64=5000
    ... --uvloop        # client loop = uvloop (server uses uvloop by default)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import clients  # noqa: E402
import stub_server  # noqa: E402

DEFAULT_REQUESTS = {1: 200, 64: 3000, 512: 5000}
QUICK_REQUESTS = {1: 30, 64: 300, 512: 600}
QUICK_CLIENTS = ("aiohttp_raw", "httpx_default", "httpx_aiohttp", "httpx_lean_send",
                 "httpx_lean_send_nc")


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, math.ceil(p / 100.0 * len(xs)) - 1))
    return xs[k]


def summarize(name: str, conc: int, recs: list[clients.Record]) -> dict:
    ok = [r for r in recs if r.ok]
    wall = (max(r.end for r in recs) - min(r.start for r in ok)) if ok else float("nan")
    ttft = [r.ttft for r in ok]
    e2e = [r.e2e for r in ok]
    itl = [x for r in ok for x in r.itls]
    bad_chunks = sum(1 for r in ok if r.usage is None)
    errs = [r.error for r in recs if not r.ok]
    return {
        "client": name, "concurrency": conc, "ok": len(ok), "errors": len(errs),
        "first_error": errs[0] if errs else None, "missing_usage": bad_chunks,
        "wall_s": wall, "rps": len(ok) / wall if ok else 0.0,
        "ttft_p50_ms": pct(ttft, 50) * 1e3, "ttft_p99_ms": pct(ttft, 99) * 1e3,
        "e2e_p50_ms": pct(e2e, 50) * 1e3, "e2e_p99_ms": pct(e2e, 99) * 1e3,
        "itl_p99_ms": pct(itl, 99) * 1e3,
        "cpu_us_per_req": getattr(recs, "cpu_s", float("nan")) / max(1, len(recs)) * 1e6,
        "chunks_mean": sum(r.n_chunks for r in ok) / len(ok) if ok else 0.0,
    }


def parse_requests(spec: str | None, base: dict[int, int]) -> dict[int, int]:
    out = dict(base)
    if spec:
        for part in spec.split(","):
            c, n = part.split("=")
            out[int(c)] = int(n)
    return out


def run_one(driver, url: str, conc: int, n: int, chunks: int, warmup: int, use_uvloop: bool):
    gc.collect()
    coro = driver(url, conc, n, chunks, warmup=warmup)
    if use_uvloop:
        import uvloop  # type: ignore[import-not-found]
        return uvloop.run(coro)
    return asyncio.run(coro)


def fmt_row(r: dict, base: dict | None) -> str:
    ratio = r["rps"] / base["rps"] if base else float("nan")
    cpu_ratio = r["cpu_us_per_req"] / base["cpu_us_per_req"] if base else float("nan")
    return (f"{r['client']:<22} {r['concurrency']:>5} {r['ok']:>6} {r['errors']:>4} "
            f"{r['rps']:>9.0f} {r['ttft_p50_ms']:>9.2f} {r['ttft_p99_ms']:>9.2f} "
            f"{r['e2e_p50_ms']:>9.2f} {r['e2e_p99_ms']:>9.2f} {ratio:>6.2f} "
            f"{r['cpu_us_per_req']:>7.0f} {cpu_ratio:>6.2f}")


HEADER = (f"{'client':<22} {'conc':>5} {'ok':>6} {'err':>4} {'req/s':>9} "
          f"{'ttft_p50':>9} {'ttft_p99':>9} {'e2e_p50':>9} {'e2e_p99':>9} {'ratio':>6} "
          f"{'cpu_us':>7} {'cpu_x':>6}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="httpx transport / SSE-reading benchmark")
    ap.add_argument("--clients", default=None,
                    help=f"comma list from {list(clients.DRIVERS)} (default: all; "
                         f"--quick: {','.join(QUICK_CLIENTS)})")
    ap.add_argument("--concurrency", default="1,64,512")
    ap.add_argument("--requests", default=None,
                    help="per-concurrency counts, e.g. 1=200,64=3000,512=5000")
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=None,
                    help="warm-up requests per run (default: max(2*conc, 20))")
    ap.add_argument("--quick", action="store_true", help="small counts for CI (< 60 s)")
    ap.add_argument("--uvloop", action="store_true", help="run the *client* on uvloop")
    ap.add_argument("--server-stdlib-loop", action="store_true",
                    help="run the stub on the stdlib loop (default: uvloop if installed)")
    ap.add_argument("--pin", action="store_true",
                    help="pin server to the last CPU and client to CPU 0")
    ap.add_argument("--repeat", type=int, default=None,
                    help="runs per (client, conc), interleaved; best req/s is reported "
                         "(default 3, --quick 1)")
    ap.add_argument("--max-phase-s", type=float, default=None,
                    help="cap each warm-up/measured phase at this many seconds (req/s is "
                         "then over the requests finished; 'ok' shows how many)")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every repeat")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write results as JSON here")
    a = ap.parse_args(argv)

    if a.repeat is None:
        a.repeat = 1 if a.quick else 3
    if a.quick and a.max_phase_s is None:
        a.max_phase_s = 4.0
    clients.MAX_PHASE_S = a.max_phase_s
    if a.clients is None:
        a.clients = ",".join(QUICK_CLIENTS if a.quick else clients.DRIVERS)
    names = [n for n in a.clients.split(",") if n]
    for n in names:
        if n not in clients.DRIVERS:
            ap.error(f"unknown client {n!r}")
    concs = [int(c) for c in a.concurrency.split(",")]
    reqs = parse_requests(a.requests, QUICK_REQUESTS if a.quick else DEFAULT_REQUESTS)
    ncpu = os.cpu_count() or 1
    srv_cpu = ncpu - 1 if (a.pin and ncpu > 1) else None
    if a.pin and ncpu > 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})

    results: list[dict] = []
    t_start = time.perf_counter()
    with stub_server.spawn(port=a.port, chunks=a.chunks,
                           use_uvloop=not a.server_stdlib_loop, cpu=srv_cpu) as srv:
        print(f"# stub {srv.url} chunks={a.chunks} python={sys.version.split()[0]} "
              f"client_loop={'uvloop' if a.uvloop else 'asyncio'} "
              f"server_loop={'asyncio' if a.server_stdlib_loop else 'uvloop-if-installed'} "
              f"cpus={ncpu} pin={a.pin}", flush=True)
        # global warm-up: imports, server JIT-free paths, first connections
        run_one(clients.DRIVERS[clients.BASELINE], srv.url, 8, 200, a.chunks, 0, a.uvloop)
        print(f"# times in ms; ratio = req/s / {clients.BASELINE} req/s at the same concurrency; "
              f"best of {a.repeat} interleaved repeats by req/s [min-max req/s]")
        print("# cpu_us = client-process CPU per request (robust to CPU stolen by other "
              "processes), min over repeats; cpu_x = cpu_us / baseline cpu_us")
        print(HEADER, flush=True)
        for conc in concs:
            n = reqs.get(conc, max(200, conc * 8))
            warm = a.warmup if a.warmup is not None else (
                max(conc, 10) if a.quick else max(2 * conc, 20))
            # Interleave clients and repeat: on a shared 2-core box other work
            # steals CPU; keeping the best repeat (max req/s) per client filters it.
            best: dict[str, dict] = {}
            allrps: dict[str, list[float]] = {nm: [] for nm in names}
            allcpu: dict[str, list[float]] = {nm: [] for nm in names}
            for rep in range(a.repeat):
                for name in (names if rep % 2 == 0 else names[::-1]):
                    recs = run_one(clients.DRIVERS[name], srv.url, conc, n, a.chunks, warm,
                                   a.uvloop)
                    r = summarize(name, conc, recs)
                    allrps[name].append(r["rps"])
                    allcpu[name].append(r["cpu_us_per_req"])
                    if name not in best or r["rps"] > best[name]["rps"]:
                        best[name] = r
                    if a.verbose:
                        print("  " + fmt_row(r, None), flush=True)
            for name in names:  # CPU/request: min over repeats (least disturbed)
                best[name]["cpu_us_per_req"] = min(allcpu[name])
            base = best.get(clients.BASELINE)
            for name in names:
                r = best[name]
                r["ratio"] = r["rps"] / base["rps"] if base else None
                r["cpu_ratio"] = r["cpu_us_per_req"] / base["cpu_us_per_req"] if base else None
                r["rps_all"] = allrps[name]
                results.append(r)
                spread = (f"  [{min(allrps[name]):.0f}-{max(allrps[name]):.0f}]"
                          if a.repeat > 1 else "")
                print(fmt_row(r, base) + spread, flush=True)
                if r["errors"]:
                    print(f"#   {r['errors']} errors, first: {r['first_error']}", flush=True)
                if r["missing_usage"] or (r["ok"] and abs(r["chunks_mean"] - a.chunks) > 1e-9):
                    print(f"#   WARNING chunks_mean={r['chunks_mean']:.2f} "
                          f"missing_usage={r['missing_usage']}", flush=True)
    print(f"# total {time.perf_counter() - t_start:.1f} s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
