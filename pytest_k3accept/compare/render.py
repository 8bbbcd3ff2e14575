"""A comparison as terminal text, Markdown, an HTML fragment and plain data (pure).

The HTML is a self-contained fragment (inline styles only: dark text on a light background,
contrast above WCAG AA) for the report; the Markdown is for a pipeline's step summary and
``k3accept compare --markdown``; :func:`data` is what the record keeps under
``"comparison"`` and ``k3accept compare --json`` prints.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from .figures import SESSION, Row
from .thresholds import Thresholds, figure

if TYPE_CHECKING:  # pragma: no cover
    from .comparison import Comparison, Unavailable

_INK, _PAPER, _RULE = "#1a1a1a", "#ffffff", "#8a8a8a"
_MARK_INK = {"worse": "#8b0000", "better": "#0b5d1e", "same": _INK, "unknown": "#4a4a4a"}


def value(v: float | None, unit: str) -> str:
    """A figure in its unit (times in ms below a second)."""
    if v is None:
        return "unknown"
    if unit == "s":
        return f"{v * 1000:.1f} ms" if abs(v) < 1 else f"{v:.3f} s"
    if unit == "%":
        return f"{v * 100:.1f} %"
    if unit == "req/s":
        return f"{v:.2f} req/s"
    if unit == "tok/s":
        return f"{v:.1f} tok/s"
    return f"{v:g}"


def change(row: Row) -> str:
    """The change of a row: relative in %, rates in points, counts as a difference."""
    if row.old is None or row.new is None:
        return "n/a"
    if row.change is None:
        return "from 0"
    fig = figure(row.key, row.label)
    if fig.relative:
        return f"{row.change * 100:+.1f} %"
    if fig.unit == "%":
        return f"{row.change * 100:+.1f} pts"
    return f"{row.change:+g}"


def regression_line(row: Row, th: Thresholds) -> str:
    """``"TTFT p99 of load 'x' ...: 412.0 ms now vs 163.8 ms in the baseline (+151.5 %,
    allowed +10 %)"``."""
    where = "" if row.run == SESSION else f" of {row.run}"
    return (f"REGRESSION {row.label}{where}: {value(row.new, row.unit)} now vs "
            f"{value(row.old, row.unit)} in the baseline ({change(row)}, allowed "
            f"{th.describe(row.key)})")


def _head(c: "Comparison") -> list[str]:
    old, new = c.old, c.new
    read_as = (f"schema {old.written_as}" if old.written_as == old.data.get("schema_version")
               else f"schema {old.written_as}, read as {old.data.get('schema_version')}")
    return [f"{c.label}: {old.source} (written {old.generated_at}, {read_as}) vs "
            f"{new.source} (written {new.generated_at})",
            f"verdict: {c.verdicts}", f"request set: {c.requests.line}"]


def text_lines(c: "Comparison") -> list[str]:
    """The comparison as terminal lines (``k3accept compare`` without options)."""
    lines = _head(c)
    n = len(c.conditions.variables)
    lines.append(f"conditions: {n} variable{'' if n == 1 else 's'} changed")
    lines += [f"  {ch.line()}" for ch in c.conditions.changes]
    lines += [f"  not compared: {s}" for s in c.conditions.one_sided]
    if c.conditions.unknown_both:
        lines.append(f"  unknown in both: {', '.join(c.conditions.unknown_both)}")
    lines += [f"{cid}: {outcome or 'not decided'} - {msg}"
              for cid, (outcome, msg) in c.items.items()]
    lines.append("figures (baseline -> this session, change, mark):")
    run = None
    for r in c.rows:
        if r.run != run:
            run = r.run
            lines.append(f"  {'startup' if run == SESSION else run}")
        bad = f"  {'REGRESSION' if r.regression else ''} (allowed {c.thresholds.describe(r.key)})" \
            if r.threshold is not None else ""
        lines.append(f"    {r.label:<38} {value(r.old, r.unit):>14} -> "
                     f"{value(r.new, r.unit):<14} {change(r):>9}  {r.mark}{bad.rstrip()}")
    regs = c.regressions
    lines.append(f"regressions beyond the thresholds: {len(regs) or 'none'}")
    lines += [f"  {r}" for r in regs]
    lines += [f"note: {n}" for n in c.notes]
    return lines


def md_escape(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return (str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
            .replace("<", "&lt;").replace(">", "&gt;"))


def markdown(c: "Comparison") -> str:
    """The comparison as GitHub-flavoured Markdown."""
    e = md_escape
    out = [f"#### {e(c.label)}", ""] if c.label != "baseline" else []
    if c.requests.status == "different":
        out += [f"> **{e(c.requests.line)}**", ""]
    out += [f"- {e(line)}" for line in _head(c)[:2]]
    if c.requests.status != "different":
        out.append(f"- request set: {e(c.requests.line)}")
    out += [f"- {cid}: **{outcome or 'not decided'}**: {e(msg)}"
            for cid, (outcome, msg) in c.items.items()]
    regs = c.regressions
    out.append(f"- regressions beyond the thresholds: **{len(regs) or 'none'}**"
               + (" (marked REGRESSION in the table)" if regs else ""))
    out += ["", "| condition | baseline | this session | counted |", "|---|---|---|---|"]
    out += [f"| {e(ch.label)} | {e(ch.old)} | {e(ch.new)} | "
            f"{'yes' if ch.counted else 'no: ' + e(ch.incidental)} |"
            for ch in c.conditions.changes] or ["| (none changed) | | | |"]
    if c.conditions.one_sided or c.conditions.unknown_both:
        out.append("")
        out += [f"- not compared: {e(s)}" for s in c.conditions.one_sided]
        if c.conditions.unknown_both:
            out.append(f"- unknown in both: {e(', '.join(c.conditions.unknown_both))}")
    out += ["", "| run | figure | baseline | this session | change | mark | threshold |",
            "|---|---|---|---|---|---|---|"]
    for r in c.rows:
        mark = "**REGRESSION**" if r.regression else (f"**{r.mark}**" if r.mark == "worse"
                                                      else r.mark)
        out.append(f"| {e('startup' if r.run == SESSION else r.run)} | {e(r.label)} | "
                   f"{value(r.old, r.unit)} | {value(r.new, r.unit)} | {change(r)} | {mark} | "
                   f"{c.thresholds.describe(r.key)} |")
    if c.notes:
        out.append("")
        out += [f"- note: {e(n)}" for n in c.notes]
    return "\n".join(out) + "\n"


def _td(text: str, style: str = "") -> str:
    return (f'<td style="border:1px solid {_RULE};padding:2px 6px;{style}">'
            f"{html.escape(text)}</td>")


def _table(head: list[str], body: list[str]) -> str:
    th = "".join(f'<th style="border:1px solid {_RULE};padding:2px 6px;text-align:left;'
                 f'background:#eeeeee;color:{_INK}">{html.escape(h)}</th>' for h in head)
    return (f'<table class="k3-comparison-table" style="border-collapse:collapse;'
            f'margin:6px 0;color:{_INK};background:{_PAPER}"><tr>{th}</tr>{"".join(body)}'
            "</table>")


def _section(label: str, inner: str) -> str:
    head = ("" if label == "baseline" else
            f'<h4 style="color:{_INK};margin:0 0 6px 0">{html.escape(label)}</h4>')
    return (f'<section class="k3-comparison" style="color:{_INK};background:{_PAPER};'
            f'border:1px solid {_RULE};padding:8px 12px;margin:8px 0">{head}{inner}'
            "</section>")


def html_fragment(c: "Comparison") -> str:
    """The comparison as a self-contained HTML fragment (inline styles only)."""
    esc = html.escape
    parts = []
    if c.requests.status == "different":
        parts.append(f'<p style="color:#8b0000;font-weight:bold">{esc(c.requests.line)}</p>')
    items = "".join(f"<li>{esc(line)}</li>" for line in _head(c)[:2])
    if c.requests.status != "different":
        items += f"<li>request set: {esc(c.requests.line)}</li>"
    items += "".join(f"<li>{esc(cid)}: <b>{esc(o or 'not decided')}</b>: {esc(m)}</li>"
                     for cid, (o, m) in c.items.items())
    regs = c.regressions
    items += (f"<li>regressions beyond the thresholds: <b>{len(regs) or 'none'}</b>"
              + ("<ul>" + "".join(f'<li style="color:#8b0000">{esc(r)}</li>' for r in regs)
                 + "</ul>" if regs else "") + "</li>")
    parts.append(f'<ul style="color:{_INK};margin:4px 0">{items}</ul>')
    body = [f"<tr>{_td(ch.label)}{_td(ch.old)}{_td(ch.new)}"
            f"{_td('yes' if ch.counted else 'no: ' + ch.incidental)}</tr>"
            for ch in c.conditions.changes] or [f"<tr>{_td('(none changed)')}{_td('')}"
                                                f"{_td('')}{_td('')}</tr>"]
    parts.append(_table(["condition", "baseline", "this session", "counted"], body))
    rows = []
    for r in c.rows:
        ink = _MARK_INK["worse" if r.regression else r.mark]
        mark = "REGRESSION" if r.regression else r.mark
        rows.append(f"<tr>{_td('startup' if r.run == SESSION else r.run)}{_td(r.label)}"
                    f"{_td(value(r.old, r.unit))}{_td(value(r.new, r.unit))}{_td(change(r))}"
                    f"{_td(mark, f'color:{ink};font-weight:bold' if mark != 'same' else '')}"
                    f"{_td(c.thresholds.describe(r.key))}</tr>")
    parts.append(_table(["run", "figure", "baseline", "this session", "change", "mark",
                         "threshold"], rows))
    parts += [f'<p style="color:{_INK};margin:2px 0">note: {esc(n)}</p>' for n in c.notes]
    return _section(c.label, "".join(parts))


def unavailable_html(u: "Unavailable") -> str:
    """"no comparison: why" as an HTML fragment."""
    return _section(u.label, f'<p style="color:{_INK}"><b>no comparison</b>: '
                             f"{html.escape(u.reason)}</p>")


def data(c: "Comparison") -> dict[str, Any]:
    """Plain, JSON-serializable values (the record's ``comparison``)."""
    return {
        "available": True, "label": c.label,
        "baseline": {"source": c.old.source, "generated_at": c.old.generated_at,
                     "schema_version": c.old.written_as, "verdict": c.old.verdict},
        "session": {"source": c.new.source, "generated_at": c.new.generated_at,
                    "verdict": c.new.verdict},
        "verdicts": c.verdicts,
        "request_set": c.requests.as_dict(),
        "changes": [ch.as_dict() for ch in c.conditions.changes],
        "changed_variables": c.conditions.variables,
        "not_compared": list(c.conditions.one_sided),
        "unknown_in_both": list(c.conditions.unknown_both),
        "checklist": {cid: {"outcome": o, "message": m} for cid, (o, m) in c.items.items()},
        "figures": [r.as_dict() for r in c.rows],
        "regressions": c.regressions,
        "thresholds": c.thresholds.as_dict(),
        "notes": list(c.notes),
    }
