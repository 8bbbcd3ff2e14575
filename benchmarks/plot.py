"""The context axis's plot: client CPU per request vs request bytes, log-log, one line per
tool and concurrency, with the "proportional to bytes" reference line. A hand-written SVG
from ``run.py --contexts ... --json FILE`` (no plotting dependency).

    python benchmarks/plot.py /tmp/bench-ctx.json docs/benchmark-context.svg
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

W, H, LEFT, RIGHT, TOP, BOTTOM = 760, 470, 70, 210, 30, 50
COLORS = {"k3accept runner": "#d62728", "raw aiohttp": "#1f77b4",
          "vllm bench serve": "#2ca02c", "GuideLLM 0.8.1": "#9467bd",
          "AIPerf 0.13.0": "#ff7f0e", "inference-perf 0.7.0": "#8c564b"}


def series(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(tool, mode) -> [(request bytes, CPU us per request)] over the measured lengths."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in rows:
        if r.get("cpu_us") and r.get("req_bytes"):
            out.setdefault((r["tool"], r["mode"]), []).append((r["req_bytes"], r["cpu_us"]))
    return {k: sorted(v) for k, v in out.items()}


def _decades(lo: float, hi: float) -> list[float]:
    return [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def svg(rows: list[dict[str, Any]], title: str) -> str:
    """The plot as an SVG document."""
    lines = series(rows)
    if not lines:
        raise ValueError("no row with both cpu_us and req_bytes")
    xs = [x for pts in lines.values() for x, _ in pts]
    ys = [y for pts in lines.values() for _, y in pts]
    xt, yt = _decades(min(xs), max(xs)), _decades(min(ys), max(ys))
    x0, x1, y0, y1 = (math.log10(v) for v in (xt[0], xt[-1], yt[0], yt[-1]))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (math.log10(x) - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return TOP + ph - (math.log10(y) - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="18" font-size="13">{title}</text>']
    for x in xt:
        out.append(f'<line x1="{px(x):.1f}" y1="{TOP}" x2="{px(x):.1f}" y2="{TOP + ph}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{px(x):.1f}" y="{TOP + ph + 15}" text-anchor="middle">'
                   f'{_bytes(x)}</text>')
    for y in yt:
        out.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + pw}" y2="{py(y):.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 5}" y="{py(y) + 4:.1f}" text-anchor="end">'
                   f'{_us(y)}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 12}" text-anchor="middle">'
               'request body bytes (as the stub received them); peers: CPU incl. start-up'
               '</text>')
    out.append(f'<text x="16" y="{TOP + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {TOP + ph / 2})">client CPU per request</text>')
    # the reference: CPU proportional to bytes, through the runner's smallest point
    ref = lines.get(("k3accept runner", "c=1")) or next(iter(lines.values()))
    bx, by = ref[0]
    k = by / bx
    lo, hi = max(xt[0], yt[0] / k), min(xt[-1], yt[-1] / k)
    if hi > lo:
        out.append(f'<line x1="{px(lo):.1f}" y1="{py(k * lo):.1f}" x2="{px(hi):.1f}" '
                   f'y2="{py(k * hi):.1f}" stroke="#888" stroke-dasharray="6 4"/>')
    legend = [("proportional to bytes", "#888", "6 4")]
    for (tool, mode), pts in sorted(lines.items()):
        color = COLORS.get(tool, "#444")
        dash = "" if mode == "c=1" else "3 2"
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>'
                for x, y in pts]
        legend.append((f"{tool} {mode}", color, dash))
    for i, (name, color, dash) in enumerate(legend):
        y = TOP + 10 + i * 16
        out.append(f'<line x1="{W - RIGHT + 12}" y1="{y}" x2="{W - RIGHT + 36}" y2="{y}" '
                   f'stroke="{color}" stroke-width="2"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        out.append(f'<text x="{W - RIGHT + 40}" y="{y + 4}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _bytes(v: float) -> str:
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if v >= size:
            return f"{v / size:g} {unit}"
    return f"{v:g} B"


def _us(v: float) -> str:
    return f"{v / 1e3:g} ms" if v >= 1e3 else f"{v:g} us"


def main(argv: list[str] | None = None) -> int:
    """``plot.py RUN.json OUT.svg [TITLE]``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(__doc__)
        return 2
    rows = json.loads(open(args[0]).read())["context"]
    title = args[2] if len(args) > 2 else "Client CPU per request vs prompt bytes (log-log)"
    with open(args[1], "w") as fh:
        fh.write(svg(rows, title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
