"""``k3accept compare OLD NEW [--markdown|--json]`` and the comparison's renderings (text,
Markdown, HTML fragment, plain data), on the real records in tests/data/records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept.cli import main
from pytest_k3accept.compare import Comparisons, Unavailable, compare
from pytest_k3accept.compare.read import from_data
from pytest_k3accept.output.record import schema

RECORDS = Path(__file__).resolve().parents[1] / "data" / "records"
LOAD = RECORDS / "record-1.1-load.json"


def slower(tmp_path: Path, factor: float = 1.5, **changes: Any) -> Path:
    data = json.loads(LOAD.read_text())
    load = next(e for e in data["evidence"] if e["kind"] == "load")["data"]
    load["summary"]["ttft"]["p99"] *= factor
    for key, value in changes.items():
        data["reproduction"][key]["value"] = value
    data["verdict"]["name"] = "scale"
    out = tmp_path / "new.json"
    out.write_text(json.dumps(data))
    return out


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["compare", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_same_record_exits_0_and_says_nothing_changed(capsys: Any) -> None:
    rc, out, err = run([str(LOAD), str(LOAD)], capsys)
    assert rc == 0 and err == ""
    assert "verdict: keep in both sessions" in out
    assert "conditions: 0 variables changed" in out
    assert "regressions beyond the thresholds: none" in out


def test_a_regression_exits_1_with_measured_vs_baseline(tmp_path: Path, capsys: Any) -> None:
    rc, out, _ = run([str(LOAD), str(slower(tmp_path, vllm_version="0.33.0"))], capsys)
    assert rc == 1
    assert "verdict: was keep, now scale" in out
    assert "changed: vLLM version: 0.32.0 -> 0.33.0" in out
    assert "C7: pass - C7 across sessions: one variable changed" in out
    assert ("REGRESSION TTFT p99 of load 'default' in test_load.py::test_target_load: 245.7 ms "
            "now vs 163.8 ms in the baseline (+50.0 %, allowed +10 %)") in out


def test_markdown_and_json(tmp_path: Path, capsys: Any) -> None:
    new = str(slower(tmp_path))
    rc, out, _ = run([str(LOAD), new, "--markdown"], capsys)
    assert rc == 1 and out.startswith("### Comparison with the baseline\n")
    assert "| load 'default' in test_load.py::test_target_load | TTFT p99 | 163.8 ms | " \
           "245.7 ms | +50.0 % | **REGRESSION** | +10 % |" in out
    rc, out, _ = run([str(LOAD), new, "--json"], capsys)
    data = json.loads(out)
    assert rc == 1 and data["verdicts"] == "was keep, now scale"
    assert data["request_set"]["status"] == "same"
    assert [r["key"] for r in data["figures"] if r["regression"]] == ["ttft_p99"]


def test_thresholds_from_a_profile(tmp_path: Path, capsys: Any) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text("[baseline]\nttft_p99 = 0.6\n")
    rc, out, _ = run([str(LOAD), str(slower(tmp_path)), "--profile", str(profile)], capsys)
    assert rc == 0 and "(allowed +60 %)" in out
    profile.write_text("[baseline]\nttft_p99 = 'lots'\n")
    rc, out, err = run([str(LOAD), str(LOAD), "--profile", str(profile)], capsys)
    assert rc == 2 and "p.toml: [baseline]: ttft_p99: expected a number" in err and out == ""


@pytest.mark.parametrize("content, words", [
    (None, "no such file"), ("", "empty file"), ("{\"evidence\": [", "truncated"),
    ("[]", "not a record"),
])
def test_unreadable_input_exits_2_with_a_message(tmp_path: Path, capsys: Any,
                                                 content: str | None, words: str) -> None:
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    rc, out, err = run([str(bad), str(LOAD)], capsys)
    assert rc == 2 and out == "" and err.startswith(f"k3accept compare: {bad}: ")
    assert words in err and "Traceback" not in err


def test_another_model_exits_2(tmp_path: Path, capsys: Any) -> None:
    rc, _, err = run([str(LOAD), str(slower(tmp_path, model="kimi-k3"))], capsys)
    assert rc == 2 and "records of other models are not a before/after" in err


def test_the_console_script(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("k3accept")
    done = subprocess.run([str(exe), "compare", str(LOAD), str(slower(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "REGRESSION TTFT p99" in done.stdout


def test_html_fragment_is_inline_styled_dark_on_light_and_escaped(tmp_path: Path) -> None:
    data = json.loads(slower(tmp_path, vllm_version="<script>x</script>").read_text())
    c = compare(from_data(json.loads(LOAD.read_text()), "a.json"), from_data(data, "b.json"))
    frag = c.to_html()
    assert frag.startswith('<section class="k3-comparison" style="color:#1a1a1a;'
                           'background:#ffffff')
    assert "<script>" not in frag and "&lt;script&gt;" in frag
    assert "<style" not in frag and "REGRESSION" in frag
    assert "&lt;script&gt;" in c.to_markdown() and "<script>" not in c.to_markdown()


def test_unavailable_and_several_baselines() -> None:
    none = Unavailable("x.json", "x.json: truncated: the JSON stops early")
    assert none.to_markdown().startswith("**no comparison**: x.json: truncated")
    assert none.lines() == ["no comparison: x.json: truncated: the JSON stops early"]
    assert "no comparison" in none.to_html() and none.regressions == []
    rec = from_data(json.loads(LOAD.read_text()), "a.json")
    both = Comparisons([compare(rec, rec, label="baseline 1"),
                        Unavailable("y.json", "y.json: no such file", "baseline 2")])
    assert both.available and both.regressions == []
    data = both.to_data()
    assert [b["available"] for b in data["baselines"]] == [True, False]
    assert "#### baseline 1" in both.to_markdown()
    assert "#### baseline 2\n\n**no comparison**: y.json: no such file" in both.to_markdown()
    json.dumps(data)


def test_the_record_schema_accepts_a_comparison() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    rec = from_data(json.loads(LOAD.read_text()), "a.json")
    record = json.loads(LOAD.read_text())
    record["schema_version"] = "1.2"
    record["comparison"] = Comparisons([compare(rec, rec), Unavailable("b", "why")]).to_data()
    sub = {"$defs": schema()["$defs"], **schema()["properties"]["comparison"]}
    jsonschema.validate(record["comparison"], sub)
