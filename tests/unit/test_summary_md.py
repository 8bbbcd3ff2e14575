"""Where pipelines look: the Markdown summary and the report's first screen, from a record
(a stand-in comparison object plays the baseline comparison of ``compare/``)."""

from __future__ import annotations

import re
from typing import Any

from pytest_k3accept.config.settings import Settings
from pytest_k3accept.evidence.store import RunState
from pytest_k3accept.fixtures.summary import run_url
from pytest_k3accept.output import first_screen, record, report, summary_md
from pytest_k3accept.output.redact import Redactor

HOSTILE = "<script>alert(1)</script> | pipe"


class Comparison:
    """What ``compare/`` hands over on ``RunState.comparison``."""

    regressions = ["ttft p99 +25% (0.80 s -> 1.00 s, threshold +10%)"]

    def to_markdown(self) -> str:
        return "| figure | baseline | now |\n|---|---|---|\n| ttft p99 | 0.80 s | 1.00 s |"

    def to_html(self) -> str:
        return '<table id="cmp"><tr><td>ttft p99</td><td>0.80 s</td><td>1.00 s</td></tr></table>'

    def to_data(self) -> dict[str, Any]:
        return {"regressions": self.regressions}


def _record(**verdict: Any) -> dict[str, Any]:
    state = RunState()
    state.checklist.add(["C6"], "t.py::test_set", "pass", "")
    state.checklist.add(["C4"], "t.py::test_driver", "fail", "driver 575")
    data = {"name": "accept-limits", "headline": "stable only at reduced limits",
            "reasons": ["target concurrency 8 did not hold [load, t.py::test_x]",
                        "held at reduced concurrency 2 [load, t.py::test_x]"],
            "evidence": [{"kind": "load", "nodeid": "t.py::test_x",
                          "summary": "target concurrency 8 did not hold"}],
            "advice": ["Take concurrency 2 as the service contract"],
            "limits": {"concurrency": 2, "context_tokens": None},
            "not_checked": [{"id": "C1", "slug": "oom-phase"}], **verdict}
    state.add("verdict", "verdict", data)
    return record.finish(record.build(state, Settings(), environ={}), Redactor())


def test_summary_has_the_verdict_reasons_once_the_checklist_and_the_artifacts() -> None:
    md = summary_md.render(_record(), artifacts=[("record", "out/record.json"),
                                                 ("report", "out/report.html")],
                           run_url="https://github.com/o/r/actions/runs/7")
    assert md.startswith("## K3 acceptance verdict: **accept-limits**")
    assert md.count("target concurrency 8 did not hold") == 1  # reasons once, no evidence list
    assert "**Advice**" in md and "**Limits that held:** concurrency 2" in md
    assert "context_tokens" not in md  # an unknown limit is not shown as held
    assert "**Not checked:** C1 oom-phase" in md
    assert "| C4 driver-r580 | ❌ FAIL | `t.py::test_driver` (fail) |" in md
    assert "| C6 request-set | ✅ pass |" in md
    assert "- record: `out/record.json`" in md
    assert "[https://github.com/o/r/actions/runs/7](https://github.com/o/r/actions/runs/7)" in md
    assert "Compared with the baseline" not in md


def test_summary_shows_the_comparison_when_there_is_a_baseline() -> None:
    md = summary_md.render(_record(), comparison=Comparison())
    assert "### Compared with the baseline" in md
    assert "**1 regression(s) beyond the thresholds**" in md
    assert "| ttft p99 | 0.80 s | 1.00 s |" in md
    assert md.index("Compared with the baseline") < md.index("### Checklist")


def test_a_broken_comparison_does_not_cost_the_summary() -> None:
    class Broken(Comparison):
        def to_markdown(self) -> str:
            raise KeyError("figure")

    md = summary_md.render(_record(), comparison=Broken())
    assert "the comparison could not be shown: KeyError" in md and "### Checklist" in md


def test_text_from_the_server_cannot_break_the_markdown() -> None:
    md = summary_md.render(_record(reasons=[HOSTILE + "\nsecond line"]))
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "\\| pipe second line" in md


def test_a_usage_error_is_said_once() -> None:
    state = RunState()
    state.add("usage-error", "usage error: --k3-profile: p.toml: concurrency: bad",
              {"message": "--k3-profile: p.toml: concurrency: bad"})
    state.notes.append("usage error (the run stopped with exit code 4): --k3-profile: "
                       "p.toml: concurrency: bad")
    state.add("verdict", "v", {"name": "undecided", "reasons": [
        "the run stopped on a usage error: --k3-profile: p.toml: concurrency: bad"]})
    rec = record.finish(record.build(state, Settings(), environ={}), Redactor())
    assert rec["notes"]  # the record keeps the note
    md = summary_md.render(rec)
    assert md.count("concurrency: bad") == 1
    assert first_screen.unsaid_notes(rec) == []
    rec["notes"].append("a pytest_k3accept_record hook failed: boom")
    assert "a pytest_k3accept_record hook failed: boom" in summary_md.render(rec)


def test_run_url_of_github_and_gitlab() -> None:
    assert run_url({"GITHUB_RUN_ID": "7", "GITHUB_REPOSITORY": "o/r",
                    "GITHUB_SERVER_URL": "https://ghe.example"}) == (
        "https://ghe.example/o/r/actions/runs/7")
    assert run_url({"CI_JOB_URL": "https://gitlab.example/j/1"}) == "https://gitlab.example/j/1"
    assert run_url({}) is None


def test_first_screen_says_it_once_and_before_the_checklist() -> None:
    page = report.summary_html(_record(), comparison_html=Comparison().to_html())
    ship = page[page.index('id="k3-ship"'):page.index("</section>")]
    assert "Evidence it rests on" not in page
    shown = page[:page.index('id="k3-record"')]  # before the record's JSON
    assert shown.count("target concurrency 8 did not hold") == 1
    assert ship.count("target concurrency 8 did not hold") == 1
    for part in ('id="k3-verdict"', 'id="k3-reasons"', 'id="k3-advice"', 'id="k3-limits"',
                 'id="k3-not-checked"', 'id="k3-comparison"', '<table id="cmp">'):
        assert part in ship, part
    assert re.search(r'class="k3-verdict k3-look"', ship)
    assert page.index('id="k3-ship"') < page.index('id="k3-checklist"')


def test_verdict_box_tones() -> None:
    for name, tone in (("keep", "go"), ("scale", "stop"), ("move-environment", "stop"),
                       ("undecided", "look")):
        assert f"k3-verdict k3-{tone}" in first_screen.render({"verdict": {"name": name}})


def _luminance(hex_colour: str) -> float:
    def chan(v: int) -> float:
        c = v / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * chan(r) + 0.7152 * chan(g) + 0.0722 * chan(b)


def test_the_stylesheet_s_own_colour_pairs_meet_wcag_aa() -> None:
    """The pairs the CSS sets together (text, background); the browser test reads them all."""
    pairs = [("#1a1a1a", "#ffffff"), ("#ffffff", "#1e6b2e"), ("#ffffff", "#a4161a"),
             ("#1a1a1a", "#fff3cd"), ("#555", "#eeeeee"), ("#595959", "#ffffff"),
             ("#0b4f9c", "#ffffff"), ("#3d3d3d", "#f6f6f6"), ("#1b6e20", "#ffffff"),
             ("#8a4b00", "#ffffff"), ("#b00000", "#e6e6e6"), ("#1a1a1a", "#f9dcdc"),
             ("#1a1a1a", "#fbf1d0"), ("#0b4f9c", "#dff5df")]
    css = report.STYLE.lower()
    for fg, bg in pairs:
        assert fg in css or fg == "#ffffff", fg
        fg = "#555555" if fg == "#555" else fg
        hi, lo = sorted((_luminance(fg), _luminance(bg)), reverse=True)
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, (fg, bg)
