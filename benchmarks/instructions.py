"""The client's work per request, counted exactly: the runner and raw aiohttp under valgrind.

``python benchmarks/instructions.py [--contexts 8192,131072,1048576] [--concurrency 1,64]``
(``.tox/bench/bin/python``: the bench environment has aiohttp) starts the stub server of the
context axis (``stub_server.py``, its own process, outside valgrind) and runs each tool in each
cell twice under valgrind's callgrind, with ``n1`` and ``n2`` measured requests (the same
warm-up before both). ``(Ir(n2) - Ir(n1)) / (n2 - n1)`` is the tool's instructions per
request: interpreter start, imports, session set-up and warm-up are in both runs and cancel.

Why: the context axis times req/s and CPU per request, and on this 2-core VM a tool's own
repeats of a cell spread by 20-40 % (docs/benchmarks.md), more than the 10 % its target
allows, so a timed ratio moves from run to run. An instruction count does not depend on what
else the machine is doing: the same cell counts within about 1 % run to run. Where the client is
what limits req/s (one stream, short prompts), fewer instructions per request is more req/s on
any machine; the count is the robust half of the comparison, the timed axis the other half.

What it does not count: the kernel's side (the syscalls, the copies into and out of sockets:
``strace -c`` shows both tools making the same syscalls per request, docs/benchmarks.md), and
what instructions cost in time (cache misses). Needs ``valgrind`` on PATH (Debian: ``apt-get
install valgrind``); without it the script says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT_CONTEXTS = "8192,32768,131072,524288,1048576"
#: prompt bytes per cell between the two runs (their difference in requests: at least 8 and
#: two rounds of the streams, at most 320); under valgrind a request costs 30-100x its time
BUDGET = 24 << 20
_COLLECTED = re.compile(r"Collected : (\d+)")


def requests_for(tokens: int, conc: int) -> tuple[int, int]:
    """``(n1, n2)``: the two runs' measured requests for a cell."""
    n1 = max(4, 2 * conc)
    delta = max(8, 2 * conc, min(320, BUDGET // (4 * tokens)))
    return n1, n1 + delta


def count(tool: str, url: str, *, n: int, warm: int, tokens: int, conc: int,
          chunks: int) -> tuple[int | None, str]:
    """Instructions of one run of ``tool`` under callgrind (None and why when it failed)."""
    spec = json.dumps({"tool": tool, "url": url, "n": n, "warm": warm, "tokens": tokens,
                       "conc": conc, "chunks": chunks})
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           sys.executable, os.path.abspath(__file__), "--child", spec]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"exit {proc.returncode}: {tail[0][:160]}"
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    if row.get("ok") != n or row.get("errors"):
        return None, f"{row.get('ok')} of {n} answered, {row.get('errors')} errors"
    return int(found.group(1)), ""


def cell(url: str, base_url: str, tokens: int, conc: int, chunks: int) -> dict[str, Any]:
    """Instructions per request of both tools in one cell."""
    n1, n2 = requests_for(tokens, conc)
    warm = max(conc, 8)
    out: dict[str, Any] = {"tokens": tokens, "conc": conc, "requests": (n1, n2)}
    for tool, target in (("raw", url), ("runner", base_url)):
        a, why_a = count(tool, target, n=n1, warm=warm, tokens=tokens, conc=conc, chunks=chunks)
        b, why_b = count(tool, target, n=n2, warm=warm, tokens=tokens, conc=conc, chunks=chunks)
        out[tool] = (b - a) / (n2 - n1) if a is not None and b is not None else None
        out[f"{tool}_why"] = why_a or why_b
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'context':>8} {'mode':<5} {'requests':>9} {'raw aiohttp':>13} {'runner':>13} "
             f"{'runner/raw':>10}",
             "-" * 63]
    for r in rows:
        raw, run = r["raw"], r["runner"]
        ratio = f"{run / raw:.2f}" if raw and run else "-"
        lines.append(f"{r['tokens']:>8} {'c=' + str(r['conc']):<5} "
                     f"{r['requests'][1] - r['requests'][0]:>9} "
                     f"{f'{raw:,.0f}' if raw else '-':>13} {f'{run:,.0f}' if run else '-':>13} "
                     f"{ratio:>10}"
                     + "".join(f"  {t}: {r[t + '_why']}" for t in ("raw", "runner")
                               if r[t + "_why"]))
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]]) -> str:
    ratios = [(r["runner"] / r["raw"], r) for r in rows if r["raw"] and r["runner"]]
    if not ratios:
        return "runner <= raw aiohttp's instructions per request: unknown (no cell counted)"
    top, where = max(ratios, key=lambda x: x[0])
    below = sum(x <= 1.0 for x, _ in ratios)
    state = "met" if below == len(rows) else "NOT met" if below < len(ratios) else "unknown"
    return (f"runner <= raw aiohttp's instructions per request: {state}: {below} of "
            f"{len(rows)} cells (highest {top:.2f} at {where['tokens']} tokens, "
            f"c={where['conc']})")


def _child(spec: dict[str, Any]) -> None:
    """Inside valgrind: one driver run, its row as the last stdout line."""
    import context
    import drivers

    row = drivers.run_inproc(spec["tool"], spec["url"], conc=spec["conc"], rate=None,
                             n=spec["n"], warm=spec["warm"], chunks=spec["chunks"], cap=3600.0,
                             prompt=context.prompt_text(spec["tokens"]))
    print(json.dumps(row), flush=True)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        _child(json.loads(argv[1]))
        return 0
    import context
    import stub_server

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=context.parse_contexts,
                        default=context.parse_contexts(DEFAULT_CONTEXTS))
    parser.add_argument("--concurrency", default="1,64",
                        help="streams per cell, comma-separated (default 1,64)")
    parser.add_argument("--chunks", type=int, default=16, help="stream chunks per answer")
    a = parser.parse_args(argv)
    try:
        concs = sorted({int(c) for c in a.concurrency.split(",") if c.strip()})
    except ValueError:
        parser.error(f"--concurrency: {a.concurrency!r} is not a list of stream counts")
    if not concs or min(concs) < 1:
        parser.error("--concurrency: at least one stream count >= 1")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind): nothing counted",
              file=sys.stderr)
        return 2
    version = subprocess.run(["valgrind", "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    print(f"# k3accept client instructions per request, {time.strftime('%Y-%m-%d %H:%M')} | "
          f"{version} | python {sys.version.split()[0]} | stub chunks={a.chunks}", flush=True)
    rows = []
    t0 = time.monotonic()
    with stub_server.spawn(chunks=a.chunks, max_model_len=2 * max(a.contexts)) as srv:
        for tokens in a.contexts:
            for conc in concs:
                rows.append(cell(srv.url, srv.base_url, tokens, conc, a.chunks))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    print(verdict(rows))
    print(f"# total {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
