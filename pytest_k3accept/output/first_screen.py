"""The report's first screen: "can we ship?" answered without scrolling (pure: record -> HTML).

The verdict in a box coloured by what it means, its headline, the reasons (once: they cite
the evidence they rest on), the advice, the limits that held, the checklist items not
checked, the notes not said already (a usage error that stopped the run) and, with a
baseline, the comparison. The checklist table follows it (:mod:`.report`).
Everything from the record is escaped here.
"""

from __future__ import annotations

import html
import json
from typing import Any, Iterable, Mapping

#: verdict -> the colour class of its box (go / stop / look closer)
TONE = {"keep": "go", "accept-limits": "look", "functional-only": "look", "undecided": "look",
        "scale": "stop", "move-environment": "stop"}
_MAX = 600

#: colours chosen for WCAG AA (>= 4.5:1) on their own backgrounds (tests/live checks them)
STYLE = """
.k3{color:#1a1a1a;background:#fff}
.k3 a{color:#0b4f9c}
.k3 .k3-ship{border:1px solid #8a8a8a;padding:.5em 1em;margin:.5em 0 1em;max-width:70em}
.k3 .k3-ship h2{margin:.2em 0}
.k3 .k3-ship h3{font-size:1em;margin:.6em 0 .2em}
.k3 .k3-ship ul{margin:.2em 0 .4em}
.k3 .k3-verdict{font-size:1.3em;font-weight:bold;padding:2px 10px;border:2px solid #1a1a1a}
.k3 .k3-go{background:#1e6b2e;color:#fff}
.k3 .k3-stop{background:#a4161a;color:#fff}
.k3 .k3-look{background:#fff3cd;color:#1a1a1a}
"""


def esc(value: Any) -> str:
    """HTML-escape a value (non-strings as compact JSON), bounded in length."""
    text = value if isinstance(value, str) else json.dumps(value, default=str,
                                                           ensure_ascii=False)
    if len(text) > _MAX:
        text = text[:_MAX] + f"... ({len(text)} chars)"
    return html.escape(text, quote=True)


def _ul(ident: str, items: Iterable[Any]) -> str:
    lis = "".join(f"<li>{esc(str(i))}</li>" for i in items)
    return f'<ul id="{ident}">{lis}</ul>' if lis else ""


def unsaid_notes(record: Mapping[str, Any]) -> list[str]:
    """The record's notes that no reason of the verdict says already (said once)."""
    reasons = [str(r) for r in (record.get("verdict") or {}).get("reasons") or []]
    return [str(n) for n in record.get("notes") or []
            if not any(str(n).split(": ", 1)[-1] in r for r in reasons)]


def render(record: Mapping[str, Any], comparison_html: str | None = None) -> str:
    """The first screen's HTML (``comparison_html``: the comparison's own, already safe)."""
    verdict = record.get("verdict") or {}
    name = str(verdict.get("name") or "undecided")
    tone = TONE.get(name, "look")
    parts = ['<section class="k3-ship" id="k3-ship">',
             f'<h2>Can we ship? <span class="k3-verdict k3-{tone}" id="k3-verdict">'
             f"{esc(name)}</span></h2>"]
    if verdict.get("headline"):
        parts.append(f'<p id="k3-headline">{esc(verdict["headline"])}</p>')
    if (record.get("session") or {}).get("interrupted"):
        parts.append("<p><b>The run was interrupted</b>: results are partial.</p>")
    reasons = [str(r) for r in verdict.get("reasons") or []]
    if reasons:
        parts.append("<h3>Because</h3>" + _ul("k3-reasons", reasons))
    if verdict.get("advice"):
        parts.append("<h3>Advice</h3>" + _ul("k3-advice", verdict["advice"]))
    limits = {k: v for k, v in (verdict.get("limits") or {}).items() if v is not None}
    if limits:
        parts.append('<p id="k3-limits"><b>Limits that held:</b> '
                     + esc(", ".join(f"{k} {v}" for k, v in limits.items())) + "</p>")
    if verdict.get("not_checked"):
        ids = [f"{c.get('id')} {c.get('slug', '')}".strip() if isinstance(c, Mapping)
               else str(c) for c in verdict["not_checked"]]
        parts.append('<p id="k3-not-checked"><b>Not checked:</b> ' + esc(", ".join(ids))
                     + "</p>")
    notes = unsaid_notes(record)
    if notes:
        parts.append("<h3>Notes</h3>" + _ul("k3-notes", notes))
    if comparison_html:
        parts.append('<h3>Compared with the baseline</h3><div id="k3-comparison">'
                     + comparison_html + "</div>")
    parts.append("</section>")
    return "".join(parts)
