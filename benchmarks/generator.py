"""The synthetic generator's cost: prompts of exactly N tokens, built on the real vLLM server.

``python benchmarks/generator.py [--lengths 8192,32768,131072,524288,1048576] [--repeats 2]``
starts the embedded CPU vLLM testbed with the ``long`` model (``max_position_embeddings``
1,048,576, served with a 128K context, as ``accuracy.py`` does) and builds one prompt of each
length with :func:`pytest_k3accept.observe.load.synthetic.generate`, the generator that
``context_tokens`` profiles use. The prompt's length is measured by the server's own
``/tokenize`` (vLLM checks no context length there, so prompts longer than the served context
can be counted; serving them is another matter). Printed per length: ``/tokenize`` calls,
the tokens the server tokenized for it (as a multiple of the prompt's: the secant search's
probes of the whole text), seconds per prompt (best of ``--repeats``) and the part of them spent
waiting for ``/tokenize`` (the server's tokenization and the transfer of its answer),
microseconds per token, the token count the server measured, and the growth against the
previous length (seconds ratio / tokens ratio: <= 1 is at most linear), for the whole build and
for the generator's own part (the seconds not spent waiting for the server).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from typing import Any


def build(base_url: str, model: str, tokens: int) -> dict[str, Any]:
    """One prompt of ``tokens`` tokens: calls, seconds and the measured length."""
    from pytest_k3accept.observe.endpoint.client import K3Client
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.synthetic import CallCounting, generate, tokenize_counter

    counting: CallCounting | None = None

    async def go() -> Any:
        nonlocal counting
        async with K3Client(base_url, model, timeout=600.0) as client:
            counting = CallCounting(tokenize_counter(client))
            return await generate(client, LoadProfile(
                name=f"gen-{tokens}", context_tokens=tokens, requests=1, output_tokens=4,
                seed=tokens), counter=counting)

    t0 = time.perf_counter()
    rs = asyncio.run(go())
    seconds = time.perf_counter() - t0
    measured = rs.meta.get("measured_prompt_tokens") or [None]
    calls = counting.calls if counting is not None else 0
    tokenized = counting.tokens if counting is not None else 0
    waited = counting.seconds if counting is not None else 0.0
    return {"tokens": tokens, "calls": calls, "seconds": seconds, "measured": measured[0],
            "deviation": rs.meta.get("max_prompt_deviation"), "tokenized": tokenized,
            "server_s": waited}


def _seconds(row: dict[str, Any], own: bool = False) -> float:
    """The row's seconds; ``own``: those not spent waiting for ``/tokenize`` (the generator's
    own work)."""
    return max(1e-9, row["seconds"] - row.get("server_s", 0.0)) if own else row["seconds"]


def growth(rows: list[dict[str, Any]], own: bool = False) -> list[float | None]:
    """Per row, (seconds ratio) / (tokens ratio) against the previous row (None for the first):
    <= 1 means the cost grew at most linearly with the length. ``own``: the seconds not spent
    waiting for the server."""
    out: list[float | None] = [None]
    for prev, row in zip(rows, rows[1:]):
        out.append((_seconds(row, own) / _seconds(prev, own)) / (row["tokens"] / prev["tokens"]))
    return out


def slope(rows: list[dict[str, Any]], own: bool = False) -> float | None:
    """Least-squares slope of log(seconds) against log(tokens) (1 = proportional); ``own``:
    of the seconds not spent waiting for the server."""
    if len(rows) < 2:
        return None
    xs = [math.log(r["tokens"]) for r in rows]
    ys = [math.log(_seconds(r, own)) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as text."""
    lines = [f"{'tokens':>9} {'calls':>5} {'tokenized':>9} {'seconds':>8} {'server':>7} "
             f"{'us/token':>8} {'measured':>9} {'growth':>6} {'own':>5}"]
    fmt = (lambda g: "-" if g is None else format(g, ".2f"))
    for row, g, go in zip(rows, growth(rows), growth(rows, own=True)):
        tokenized = row.get("tokenized")
        ratio = f"{tokenized / row['tokens']:.1f}x" if tokenized else "-"
        server = f"{row['server_s']:.2f}" if "server_s" in row else "-"
        lines.append(f"{row['tokens']:>9} {row['calls']:>5} {ratio:>9} {row['seconds']:>8.2f} "
                     f"{server:>7} {row['seconds'] / row['tokens'] * 1e6:>8.1f} "
                     f"{row['measured']!s:>9} {fmt(g):>6} {fmt(go):>5}")
    s = slope(rows)
    if s is not None:
        lines.append(f"log-log slope of seconds against tokens: {s:.2f} (1 = linear)")
        if all("server_s" in r for r in rows):
            lines.append(f"... of the generator's own seconds (not waiting for /tokenize): "
                         f"{slope(rows, own=True):.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/generator.py``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="8192,32768,131072,524288,1048576")
    ap.add_argument("--repeats", type=int, default=2, help="builds per length; best kept")
    a = ap.parse_args(argv)
    from accuracy import Testbed, _served_model

    lengths = [int(x) for x in a.lengths.split(",")]
    print(f"# synthetic generator on the long testbed model; {time.strftime('%Y-%m-%d %H:%M')}, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    t0 = time.monotonic()
    with Testbed(variant="long", max_model_len=131_072, kv_cache_bytes=256 << 20) as tb:
        print(f"# server ready in {time.monotonic() - t0:.0f} s", flush=True)
        model = _served_model(tb.base_url)
        rows = []
        for n in lengths:
            runs = [build(tb.base_url, model, n) for _ in range(max(1, a.repeats))]
            rows.append(min(runs, key=lambda r: r["seconds"]))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
