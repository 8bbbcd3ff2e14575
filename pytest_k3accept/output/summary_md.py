"""The session's Markdown summary, for where pipelines look (GitHub Actions' step summary,
a GitLab / Jenkins job page): built from the redacted record. Pure: no pytest, no I/O.

:func:`render` gives the verdict, its reasons once, the advice, the limits that held, the
items not checked, the notes (a usage error that stopped the run), the comparison with a
baseline when there is one, the checklist table and the artifacts (paths, and a link to the
run's page where the pipeline has one).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from .first_screen import unsaid_notes

#: checklist status -> what the table shows
MARK = {"pass": "✅ pass", "fail": "❌ FAIL", "skip": "⚠️ skip", "not-checked": "— not checked"}
_MAX = 300


def text(value: Any, limit: int = _MAX) -> str:
    """One Markdown-safe line: no HTML, no table breaks, no newlines, bounded length."""
    out = " ".join(str(value).split())
    if len(out) > limit:
        out = out[:limit] + f"... ({len(out)} chars)"
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|")):
        out = out.replace(a, b)
    return out


def _bullets(items: Iterable[Any]) -> list[str]:
    return [f"- {text(i)}" for i in items]


def _item_ids(not_checked: Sequence[Any]) -> list[str]:
    return [f"{c.get('id')} {c.get('slug', '')}".strip() if isinstance(c, Mapping) else str(c)
            for c in not_checked]


def verdict_block(record: Mapping[str, Any]) -> list[str]:
    """Verdict, headline, reasons (once), advice, limits that held, not checked, notes."""
    verdict = record.get("verdict") or {}
    name = str(verdict.get("name") or "undecided")
    out = [f"## K3 acceptance verdict: **{text(name)}**", ""]
    if verdict.get("headline"):
        out += [f"> {text(verdict['headline'])}", ""]
    if (record.get("session") or {}).get("interrupted"):
        out += ["**The run was interrupted**: results are partial.", ""]
    if verdict.get("reasons"):
        out += ["**Because**", "", *_bullets(verdict["reasons"]), ""]
    if verdict.get("advice"):
        out += ["**Advice**", "", *_bullets(verdict["advice"]), ""]
    limits = {k: v for k, v in (verdict.get("limits") or {}).items() if v is not None}
    if limits:
        out += ["**Limits that held:** " + text(", ".join(f"{k} {v}" for k, v in limits.items())),
                ""]
    if verdict.get("not_checked"):
        out += ["**Not checked:** " + text(", ".join(_item_ids(verdict["not_checked"]))), ""]
    notes = unsaid_notes(record)
    if notes:
        out += ["**Notes**", "", *_bullets(notes), ""]
    return out


def checklist_table(checklist: Sequence[Mapping[str, Any]]) -> list[str]:
    """The checklist as a Markdown table: item, status, the tests that decided it."""
    rows = ["| item | status | decided by |", "|---|---|---|"]
    for item in checklist:
        status = str(item.get("status"))
        tests = "; ".join(f"`{text(t.get('nodeid'), 120)}` ({text(t.get('outcome'))})"
                          for t in item.get("tests") or []) or "no test decided it"
        rows.append(f"| {text(item.get('id'))} {text(item.get('slug', ''))} | "
                    f"{MARK.get(status, text(status))} | {tests} |")
    return rows


def render(record: Mapping[str, Any], *, comparison: Any = None,
           artifacts: Sequence[tuple[str, str]] = (), run_url: str | None = None) -> str:
    """The summary as Markdown.

    ``comparison`` is the session's comparison with a baseline (an object with
    ``to_markdown()`` and ``regressions``), or None; ``artifacts`` are (what, where) pairs
    (``("record", "artifacts/record.json")``); ``run_url`` is the pipeline run's page (where
    its artifacts are downloaded).
    """
    out = verdict_block(record)
    if comparison is not None:
        out += ["### Compared with the baseline", ""]
        regressions = list(getattr(comparison, "regressions", None) or [])
        if regressions:
            out += [f"**{len(regressions)} regression(s) beyond the thresholds**", "",
                    *_bullets(regressions), ""]
        try:
            out += [str(comparison.to_markdown()).strip(), ""]
        except Exception as exc:  # the summary must survive a comparison bug
            out += [f"(the comparison could not be shown: {text(type(exc).__name__)}: "
                    f"{text(exc)})", ""]
    out += ["### Checklist", "", *checklist_table(record.get("checklist") or []), ""]
    if artifacts or run_url:
        out += ["### Artifacts", ""]
        out += [f"- {text(what)}: `{text(where, 500)}`" for what, where in artifacts]
        if run_url:
            out.append(f"- downloads: [{text(run_url, 500)}]({run_url})")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
