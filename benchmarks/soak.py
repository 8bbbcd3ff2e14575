"""Soak: does the load runner's memory grow with the length of a run?

Runs one long closed-loop load (``run_load``, metrics scraping off) against
``stub_server.py`` (its own process) for ``--soak-seconds`` and prints the client
process's resident set size (``VmRSS`` from ``/proc/self/status``) every ``--interval``
seconds, then the growth per 1,000 requests: the least-squares slope of RSS over requests
done, from the samples after the first ``--settle`` share of the run (allocator and import
warm-up). The bound is the profile's own: ``max_seconds`` = the soak, ``requests`` = a
count the soak cannot reach, so the run ends by time like a real soak profile.

    nice -n 10 python benchmarks/soak.py                  # the real figure: 600 s
    python benchmarks/soak.py --soak-seconds 30           # a quick look
    python benchmarks/soak.py --concurrency 64 --chunks 64 --json soak.json

It is CPU bound on the stub (both processes run flat out), so run it under ``nice``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import stub_server  # noqa: E402

PROMPT = "Say something about load testing. " * 4


def rss_bytes(field: str = "VmRSS") -> int:
    """This process's resident set size (``VmHWM``: its peak) from Linux
    ``/proc/self/status``, 0 elsewhere."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x; None with fewer than 2 distinct x."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


async def soak(url: str, a: argparse.Namespace) -> dict[str, Any]:
    """One soak run; returns every sample and the figures."""
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.runner import run_load

    req = [{"messages": [{"role": "user", "content": PROMPT}], "max_tokens": a.chunks}]
    prof = LoadProfile(name="soak", output_tokens=a.chunks, ignore_eos=False,
                       concurrency=a.concurrency, requests=a.requests,
                       max_seconds=float(a.soak_seconds), timeout=None)
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()

    def progress(p: Any) -> None:
        rss = rss_bytes()
        samples.append({"t": round(time.monotonic() - t0, 1), "done": p.done, "rss": rss})
        print(f"  {samples[-1]['t']:>7.1f} s  {p.done:>9,} requests  "
              f"RSS {rss / 2**20:8.1f} MiB  (peak so far {rss_bytes('VmHWM') / 2**20:.1f} "
              "MiB)", flush=True)

    start_rss = rss_bytes()
    async with K3Client(url, stub_server.MODEL, timeout=60.0) as client:
        res = await run_load(client, req, prof, metrics=False, progress=progress,
                             progress_interval=a.interval)
    end_rss, peak_rss = rss_bytes(), rss_bytes("VmHWM")
    settled = [s for s in samples if s["t"] >= a.settle * a.soak_seconds]
    k = slope([(float(s["done"]), float(s["rss"])) for s in settled])
    return {"start_rss": start_rss, "end_rss": end_rss, "peak_rss": peak_rss,
            "samples": samples,
            "requests": res.summary["requests"], "ok": res.summary["ok"],
            "elapsed": res.elapsed, "stopped_by": res.stopped_by,
            "growth_per_1000": None if k is None else k * 1000,
            "ttft_p99_ms": (res.summary["ttft"] or {}).get("p99", 0.0) * 1000,
            "itl_count": (res.summary["itl"] or {}).get("count")}


def main(argv: list[str] | None = None) -> int:
    """Run the soak and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--soak-seconds", type=float, default=600.0,
                    help="the run's length (the profile's max_seconds); default 600")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=64, help="streamed tokens per answer")
    ap.add_argument("--itl-ms", type=float, default=0.2,
                    help="the stub's gap between chunks (default 0.2: a stream that does not "
                         "arrive in one burst, so its ITL is measured and kept)")
    ap.add_argument("--requests", type=int, default=50_000_000,
                    help="the profile's request bound (default: more than a soak reaches)")
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between RSS lines")
    ap.add_argument("--settle", type=float, default=0.1,
                    help="share of the run left out of the slope (warm-up)")
    ap.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    a = ap.parse_args(argv)
    if a.soak_seconds <= 0 or a.concurrency < 1 or a.chunks < 1 or a.interval <= 0:
        ap.error("--soak-seconds, --interval must be > 0; --concurrency, --chunks >= 1")
    print(f"# k3accept soak {time.strftime('%Y-%m-%d %H:%M')} | {platform.machine()} | "
          f"{os.cpu_count()} CPUs | python {platform.python_version()} | "
          f"{a.soak_seconds:g} s at concurrency {a.concurrency}, {a.chunks} tokens per "
          f"answer, {a.itl_ms:g} ms apart", flush=True)
    with stub_server.spawn(chunks=a.chunks, itl_ms=a.itl_ms) as srv:
        out = asyncio.run(soak(srv.base_url, a))
    mib = 2 ** 20
    growth = out["growth_per_1000"]
    print(f"requests {out['requests']:,} ({out['ok']:,} ok) in {out['elapsed']:.0f} s, "
          f"{out['requests'] / out['elapsed']:.0f} req/s, stopped by {out['stopped_by']}, "
          f"{out['itl_count'] or 0:,.0f} ITL gaps kept")
    print(f"RSS at start {out['start_rss'] / mib:.1f} MiB, at the last sample "
          f"{out['samples'][-1]['rss'] / mib if out['samples'] else 0:.1f} MiB, after the "
          f"summary {out['end_rss'] / mib:.1f} MiB, peak (VmHWM) {out['peak_rss'] / mib:.1f} "
          "MiB")
    print("growth per 1,000 requests (after the first "
          f"{a.settle:.0%}): {'unknown' if growth is None else f'{growth / 1024:.1f} KiB'}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
