"""What the HTML report (pytest-html 4) and the terminal show, built from the redacted record.

Pure functions, no pytest import: :func:`summary_html` (the block at the top of the report:
verdict and its evidence, the checklist table linked to the tests that decided each item, the
reproduction fields, the startup timeline and the record itself), :func:`extras_for`
(per-test extras in pytest-html's extras format: evidence table, load summary, charts),
:func:`environment_rows` (pytest-metadata rows) and :func:`terminal_lines`.

Everything that can come from the server or the model (outputs, error bodies, log lines,
model names) passes through :func:`esc` before it becomes HTML.
"""

from __future__ import annotations

import html
import json
from typing import Any, Mapping, Sequence
from urllib.parse import quote

from . import charts, first_screen

STYLE = """<style>
.k3 table{border-collapse:collapse;margin:.4em 0 1em}
.k3 th,.k3 td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
.k3 .k3-pass{background:#dff5df}.k3 .k3-fail{background:#f9dcdc}
.k3 .k3-skip{background:#fbf1d0}.k3 .k3-not-checked{background:#eee;color:#555}
.k3 pre{white-space:pre-wrap;max-height:30em;overflow:auto;background:#f7f7f7}
.k3 .k3-unknown{color:#595959;font-style:italic}
body,a,#results-table,.filters button,.collapse button,span.retried{color:#3d3d3d}
span.passed,.passed .col-result{color:#1b6e20}
span.skipped,span.xfailed,span.rerun,.skipped .col-result,.xfailed .col-result,
.rerun .col-result{color:#8a4b00}
span.error,span.failed,span.xpassed,.error .col-result,.failed .col-result,
.xpassed .col-result{color:#b00000}
body{display:flex;flex-direction:column;align-items:flex-start}
body>.summary{order:1}body>#environment-header,body>#environment{order:2}
body>#results-table,body>#data-container{order:3}
""" + first_screen.STYLE + "</style>"

LOAD_METRICS = ("ttft", "itl", "tpot", "e2e")
_MAX_CELL = 400


def esc(value: Any) -> str:
    """HTML-escape anything (quotes included); non-strings are shown as compact JSON."""
    if not isinstance(value, str):
        value = json.dumps(value, default=str, ensure_ascii=False)
    return html.escape(value, quote=True)


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str,
                                                           ensure_ascii=False)
    if len(text) > _MAX_CELL:
        text = text[:_MAX_CELL] + f"... ({len(text)} chars)"
    return esc(text)


def anchor_of(nodeid: str) -> str:
    """``href`` of a test's row in the pytest-html results table (its ``<tbody id>``)."""
    return "#" + quote(nodeid, safe="/:[]-_.,=@+")


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{b64}" style="max-width:100%"/>'


def checklist_table(checklist: Sequence[Mapping[str, Any]]) -> str:
    """The C1-C12 (+ team items) table: status, the tests that decided it, what it asks."""
    rows = []
    for item in checklist:
        tests = item.get("tests") or []
        links = "<br/>".join(
            f'<a href="{esc(anchor_of(t["nodeid"]))}">{esc(t["nodeid"])}</a> '
            f'({esc(t["outcome"])}){": " + _cell(t["message"]) if t.get("message") else ""}'
            for t in tests) or '<span class="k3-unknown">no test decided it</span>'
        if item.get("note"):
            links += f'<br/><em class="k3-note">{esc(item["note"])}</em>'
        status = str(item.get("status"))
        rows.append(f'<tr class="k3-{esc(status)}" data-item="{esc(item["id"])}">'
                    f'<td>{esc(item["id"])} <small>{esc(item.get("slug", ""))}</small></td>'
                    f'<td class="k3-status">{esc(status)}</td><td>{links}</td>'
                    f'<td>{esc(item.get("text", ""))}</td></tr>')
    return ('<table id="k3-checklist" class="k3-checklist"><thead><tr><th>Item</th>'
            '<th>Status</th><th>Decided by</th><th>What it asks</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def reproduction_table(fields: Mapping[str, Mapping[str, Any]]) -> str:
    """The reproduction fields: value and source, or 'unknown' and the reason."""
    rows = []
    for name, fact in fields.items():
        if fact.get("value") is None:
            rows.append(f'<tr><th>{esc(name)}</th><td class="k3-unknown">unknown</td>'
                        f'<td class="k3-unknown">{_cell(fact.get("reason", ""))}</td></tr>')
        else:
            rows.append(f'<tr><th>{esc(name)}</th><td>{_cell(fact["value"])}</td>'
                        f'<td>{_cell(fact.get("source", ""))}</td></tr>')
    return ('<table id="k3-reproduction"><thead><tr><th>Field</th><th>Value</th>'
            '<th>Source / why unknown</th></tr></thead><tbody>' + "".join(rows)
            + "</tbody></table>")


def summary_html(record: Mapping[str, Any], *, record_href: str | None = None,
                 record_path: str | None = None, comparison_html: str | None = None) -> str:
    """The block at the top of the report (pytest-html's summary prefix): the first screen
    (:mod:`.first_screen`: can we ship?), then the checklist and the rest."""
    parts = [STYLE, '<div class="k3" id="k3-summary">',
             first_screen.render(record, comparison_html)]
    parts += ["<h3>Checklist</h3>", checklist_table(record.get("checklist") or [])]
    session_ev = [e for e in record.get("evidence") or [] if not e.get("nodeid")]
    if session_ev:
        parts.append("<h3>Session evidence</h3>" + evidence_table(session_ev))
    for ev in record.get("evidence") or []:
        if ev.get("kind") == "timeline":
            png = charts.timeline_chart(charts.events_from(ev.get("data") or {}))
            if png:
                parts.append(_img(png, "startup timeline"))
                break
    parts += ["<h3>Reproduction record</h3>",
              reproduction_table(record.get("reproduction") or {})]
    if record_href:
        parts.append(f'<p>Record file: <a id="k3-record-link" href="{esc(record_href)}">'
                     f"{esc(record_path or record_href)}</a></p>")
    parts.append('<details id="k3-record"><summary>Reproduction record (JSON)</summary><pre>'
                 + esc(json.dumps(record, indent=2, default=str)) + "</pre></details></div>")
    return "".join(parts)


def evidence_table(evidence: Sequence[Mapping[str, Any]]) -> str:
    """Kind and summary of each piece of evidence, quoted log lines shown as text."""
    rows = []
    for ev in evidence:
        data = ev.get("data") or {}
        lines = (data.get("evidence_lines") or data.get("lines")) if isinstance(
            data, Mapping) else None
        quoted = ""
        if isinstance(lines, (list, tuple)) and lines:
            quoted = "<pre>" + esc("\n".join(str(x) for x in lines[:20])) + "</pre>"
        rows.append(f'<tr><td>{esc(ev.get("kind", ""))}</td>'
                    f'<td>{_cell(ev.get("summary", ""))}{quoted}</td></tr>')
    return ('<table class="k3-evidence"><thead><tr><th>Kind</th><th>Observation</th></tr>'
            "</thead><tbody>" + "".join(rows) + "</tbody></table>")


def load_table(data: Mapping[str, Any]) -> str | None:
    """A load run's summary: counts, error rate and TTFT/ITL/TPOT/e2e percentiles (ms)."""
    summary = data.get("summary")
    src: Mapping[str, Any] = summary if isinstance(summary, Mapping) else data
    if not any(isinstance(src.get(m), Mapping) for m in LOAD_METRICS):
        return None
    counts = " · ".join(f"{k} {_cell(src[k])}" for k in (
        "requests", "ok", "errors", "error_rate", "request_throughput", "output_throughput")
        if k in src)
    rows = []
    for m in LOAD_METRICS:
        dist = src.get(m)
        if isinstance(dist, Mapping):
            cells = "".join(f"<td>{esc(f'{float(dist[q]) * 1000:.1f}')}</td>"
                            if isinstance(dist.get(q), (int, float)) else "<td>-</td>"
                            for q in ("p50", "p90", "p99", "mean", "max"))
            rows.append(f"<tr><th>{esc(m)}</th>{cells}</tr>")
    return (f'<p class="k3-load-counts">{counts}</p><table class="k3-load"><thead><tr>'
            "<th>ms</th><th>p50</th><th>p90</th><th>p99</th><th>mean</th><th>max</th></tr>"
            "</thead><tbody>" + "".join(rows) + "</tbody></table>")


def _extra(content: Any, fmt: str, name: str | None = None, mime: str | None = None,
           ext: str | None = None) -> dict[str, Any]:
    """One extra in pytest-html's format (what ``pytest_html.extras.*`` returns)."""
    return {"name": name, "format_type": fmt, "content": content, "mime_type": mime,
            "extension": ext}


def extras_for(evidence: Sequence[Mapping[str, Any]], *, with_charts: bool = True,
                ) -> list[dict[str, Any]]:
    """pytest-html extras for one test's (redacted) evidence: an HTML block with the
    evidence table and load summaries, PNG charts, and the evidence as JSON."""
    if not evidence:
        return []
    block = ['<div class="k3">', STYLE, "<b>k3accept evidence</b>", evidence_table(evidence)]
    pngs: list[tuple[str, str]] = []
    for ev in evidence:
        data = ev.get("data") or {}
        table = load_table(data) if ev.get("kind") in ("load", "headroom", "procedure",
                                                      "prefix-cache-ab") else None
        if table:
            block.append(f"<p><b>{esc(ev.get('kind'))}</b>: {_cell(ev.get('summary'))}</p>"
                         + table)
        if not with_charts:
            continue
        samples, dists = charts.latencies_from(data)
        for png, title in (
                (charts.latency_chart(samples, dists) if (samples or dists) else None,
                 "latency distribution"),
                (charts.series_chart(charts.series_from(data, ("series", "gpu_series")),
                                     "GPU memory used", "GiB", 1 / 2**30)
                 if ev.get("kind") == "gpu-telemetry" and data.get("kind") != "kv-cache-usage"
                 else None, "GPU memory over time"),
                (charts.series_chart(
                    charts.columns_from(data, "gauge_series", ("kv_usage",)) or
                    charts.series_from(data, ("series",) if data.get("kind") == "kv-cache-usage"
                                       else ("kv_series",)),
                    "KV-cache usage (1.0 = full)", "fraction"), "KV-cache usage over time"),
                (charts.timeline_chart(charts.events_from(data))
                 if ev.get("kind") == "timeline" else None, "startup timeline")):
            if png:
                pngs.append((png, title))
    if with_charts and charts.missing_reason() and any(
            ev.get("kind") in ("load", "headroom", "gpu-telemetry", "timeline")
            for ev in evidence):
        block.append(f"<p class='k3-unknown'>{esc(charts.missing_reason())}</p>")
    block.append("</div>")
    out = [_extra("".join(block), "html")]
    out += [_extra(png, "image", title, "image/png", "png") for png, title in pngs]
    out.append(_extra(json.loads(json.dumps(list(evidence), default=str)), "json",
                      "k3accept evidence", "application/json", "json"))
    return out


def environment_rows(record: Mapping[str, Any]) -> dict[str, str]:
    """pytest-metadata rows (already escaped: pytest-html renders them as HTML; they sit in
    element text, never in an attribute, so quotes stay readable)."""
    rep = record.get("reproduction") or {}
    names = {"endpoint": "K3 endpoint", "model": "K3 model", "vllm_version": "K3 vLLM version",
             "image": "K3 image", "host_driver": "K3 host driver",
             "cuda_runtime": "K3 CUDA runtime", "gpu_model": "K3 GPU model",
             "gpu_count": "K3 GPU count", "node_count": "K3 node count"}
    rows = {}
    for key, label in names.items():
        value = (rep.get(key) or {}).get("value")
        rows[label] = "unknown" if value is None else html.escape(
            value if isinstance(value, str) else json.dumps(value), quote=False)
    rows["K3 verdict"] = html.escape(str((record.get("verdict") or {}).get("name", "undecided")),
                                     quote=False)
    return rows


def terminal_lines(record: Mapping[str, Any], record_note: str) -> list[str]:
    """A few lines for CI logs: verdict, checklist table and where the record is."""
    verdict = record.get("verdict") or {}
    reasons = [str(r) for r in verdict.get("reasons") or []]
    first = str(verdict.get("headline") or (reasons[0] if reasons else ""))
    lines = [f"verdict: {verdict.get('name', 'undecided')}" + (f" - {first}" if first else "")]
    items = record.get("checklist") or []
    short = {"pass": "pass", "fail": "FAIL", "skip": "skip", "not-checked": "-"}
    widths = [max(len(str(i["id"])), len(short.get(i["status"], i["status"]))) for i in items]
    lines.append("checklist " + " ".join(str(i["id"]).ljust(w) for i, w in zip(items, widths)))
    lines.append("          " + " ".join(short.get(i["status"], i["status"]).ljust(w)
                                         for i, w in zip(items, widths)))
    for item in items:
        if item["status"] == "fail":
            bad = [t["nodeid"] for t in item.get("tests") or [] if t["outcome"] == "fail"]
            lines.append(f"  {item['id']} failed by: {', '.join(bad[:3])}"
                         + (f" (+{len(bad) - 3})" if len(bad) > 3 else ""))
    lines.append(f"record: {record_note}")
    return lines
