"""Report building blocks: escaping, checklist links, extras, charts, terminal lines."""

from __future__ import annotations

import base64
import sys
from html.parser import HTMLParser

import pytest

from pytest_k3accept.output import charts, record, report
from pytest_k3accept.output.redact import Redactor
from pytest_k3accept.config.settings import Settings
from pytest_k3accept.evidence.store import RunState

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror=alert(1)>'


class Tags(HTMLParser):
    """Collects start tags and their attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(html)
    return parser.tags


def _record() -> dict:
    state = RunState()
    state.add("timeline", HOSTILE, {"events": [{"name": "process start", "t": 100.0},
                                               {"name": "engine init done", "t": 125.5},
                                               {"name": "first response", "t": 130.0}]})
    state.add("load", f"load with output {HOSTILE}", {"lines": [HOSTILE]}, nodeid="t.py::test_x")
    state.checklist.add(["C2"], "t.py::test_x[<b>]", "fail", f"model said {HOSTILE}")
    return record.finish(record.build(state, Settings(), environ={}), Redactor())


def test_summary_escapes_everything_from_the_server() -> None:
    html = report.summary_html(_record(), record_href="record.json", record_path="out/r.json")
    tags = _tags(html)
    assert not [a for t, a in tags if t == "script"]
    imgs = [a for t, a in tags if t == "img"]
    assert imgs and all(str(a["src"]).startswith("data:image/png;base64,") for a in imgs)
    assert "&lt;script&gt;" in html and HOSTILE not in html
    assert ("a", {"id": "k3-record-link", "href": "record.json"}) in tags


def test_checklist_table_links_each_item_to_its_tests() -> None:
    html = report.checklist_table(_record()["checklist"])
    rows = [a for t, a in _tags(html) if t == "tr" and "data-item" in a]
    assert [r["data-item"] for r in rows] == [f"C{i}" for i in range(1, 13)]
    assert {"class": "k3-fail", "data-item": "C2"} in rows
    links = [a["href"] for t, a in _tags(html) if t == "a"]
    assert links == ["#t.py::test_x[%3Cb%3E]"]


def test_extras_for_a_test(monkeypatch: pytest.MonkeyPatch) -> None:
    evidence = [{"kind": "load", "summary": HOSTILE, "nodeid": "t::x", "data": {
        "summary": {"requests": 3, "ok": 3, "ttft": {"p50": 0.1, "p90": 0.2, "p99": 0.3}},
        "records": [{"ok": True, "ttft": 0.1 * i, "e2e": 0.2 * i} for i in range(1, 9)]}},
        {"kind": "load", "summary": "kv", "nodeid": "t::x", "data": {"server": {
            "gauge_series": {"t": [0, 1, 2], "kv_usage": [0.1, 0.5, 0.9]}}}},
        {"kind": "gpu-telemetry", "summary": "gpu", "nodeid": "t::x",
         "data": {"kind": "gpu-memory", "series": {"n/gpu0": [[0, 1 << 30], [1, 2 << 30]]}}}]
    extras = report.extras_for(evidence)
    kinds = [(e["format_type"], e["name"]) for e in extras]
    assert kinds == [("html", None), ("image", "latency distribution"),
                     ("image", "KV-cache usage over time"), ("image", "GPU memory over time"),
                     ("json", "k3accept evidence")]
    assert HOSTILE not in extras[0]["content"] and "k3-load" in extras[0]["content"]
    assert all(base64.b64decode(e["content"]).startswith(b"\x89PNG") for e in extras[1:4])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    plain = report.extras_for(evidence)
    assert [e["format_type"] for e in plain] == ["html", "json"]
    assert "charts need matplotlib" in plain[0]["content"]


def test_no_evidence_no_extras() -> None:
    assert report.extras_for([]) == []


def test_chart_shapes() -> None:
    assert charts.events_from({"events": {"start": 1.0, "ready": {"t": 3.0}, "lost": None}}) == [
        ("start", 1.0), ("ready", 3.0)]
    assert charts.series_from({"series": [{"t": 1, "value": 2}, [2, 3], "junk"]},
                              ("series",)) == {"series": [(1.0, 2.0), (2.0, 3.0)]}
    png = charts.timeline_chart([("a", 0.0), ("b", 2.5)])
    assert png and base64.b64decode(png).startswith(b"\x89PNG")
    assert charts.timeline_chart([]) is None and charts.latency_chart({}, {}) is None
    gauges = {"server": {"gauge_series": {"t": [0, 1, 2], "kv_usage": [0.1, None, 0.9]}}}
    assert charts.columns_from(gauges, "gauge_series", ("kv_usage",)) == {
        "kv_usage": [(0.0, 0.1), (2.0, 0.9)]}


def test_environment_rows_and_terminal_lines() -> None:
    rec = _record()
    rows = report.environment_rows(rec)
    assert rows["K3 vLLM version"] == "unknown" and rows["K3 verdict"]
    lines = report.terminal_lines(rec, "out/record.json")
    assert lines[0].startswith("verdict: ")
    assert lines[1].split() == ["checklist"] + [f"C{i}" for i in range(1, 13)]
    assert lines[2].split()[1] == "FAIL" and lines[-1] == "record: out/record.json"
    assert any("C2 failed by: t.py::test_x[<b>]" in line for line in lines)
    assert len(lines) <= 6
