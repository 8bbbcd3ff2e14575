"""The HTML report of a real testbed run, opened in headless Chromium.

The screenshots (the whole page, and the first screen at 1400x900), the report and the
record go to ``artifacts/ci/`` (repository root), the folder CI keeps. The text contrast is
read from the rendered DOM: ``contrast.js`` (beside this file) computes, for every visible
element with text, its computed colour against the background it is drawn on and the WCAG
contrast ratio. Without Debian's ``chromium`` the test is skipped with the reason (CI
installs it: ``apt-get install -y chromium``).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

try:  # pytester's in-process runs drop the modules they import; numpy cannot be re-imported
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
except ImportError:  # charts are optional
    pass

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "ci"
PWN = 'document.body.setAttribute("data-pwned", "1")'
HOSTILE = f'<script>{PWN}</script><img src=x onerror=\'{PWN}\'>'

SUITE = '''
import pytest
from pytest_k3accept.fixtures import state_of

HOSTILE = %r

@pytest.mark.k3_check("C6", "C9")
@pytest.mark.asyncio
async def test_model_output_and_latency(request, k3_client):
    echoed = await k3_client.completion(HOSTILE, max_tokens=2, echo=True)
    assert echoed.ok and HOSTILE in echoed.text
    runs = [await k3_client.chat([{"role": "user", "content": f"question {i}"}], stream=True,
                                 max_tokens=8, ignore_eos=True) for i in range(8)]
    assert all(r.ok for r in runs)
    records = [{"ok": r.ok, "ttft": r.ttft, "e2e": r.e2e} for r in runs]
    state_of(request.config).add("load", "8 sequential streamed chats; output: " + echoed.text,
                                 {"records": records, "concurrency": 1, "output_tokens": 8,
                                  "lines": [echoed.text]}, nodeid=request.node.nodeid)

@pytest.mark.k3_check("C4")
def test_a_failing_item():
    assert "575.57" >= "580", "driver too old"

@pytest.mark.k3_check("C5")
def test_a_skipped_item():
    pytest.skip("no topology facts")
''' % HOSTILE
PROBE = (Path(__file__).with_name("contrast.js")).read_text()
#: WCAG 2.x AA for normal text
AA = 4.5


def chromium() -> str | None:
    """Path of the Chromium binary, if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with a fresh profile and no network chatter."""
    argv = [binary, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--no-first-run", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def chromium_and_report(pytester: pytest.Pytester, testbed: Any) -> tuple[str, Path]:
    """Chromium (or a skip saying how to get it) and the report of the suite's real run."""
    binary = chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium); CI installs it")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_browser=SUITE)
    result = pytester.runpytest("--k3-endpoint", testbed.base_url, "--html", "report.html",
                                "--self-contained-html", "--k3-record", "record.json",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    return binary, pytester.path / "report.html"


@pytest.mark.live
def test_report_renders_in_headless_chromium(pytester: pytest.Pytester, testbed: Any,
                                             tmp_path: Path) -> None:
    binary, report = chromium_and_report(pytester, testbed)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    done = run_chromium(binary, tmp_path / "profile-shot", f"--screenshot={shot}",
                        "--window-size=1400,2000", report.as_uri())
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", done.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    shutil.copy(report, ARTIFACTS / "report.html")
    shutil.copy(pytester.path / "record.json", ARTIFACTS / "record.json")

    dom = run_chromium(binary, tmp_path / "profile-dom", "--dump-dom", report.as_uri())
    page = dom.stdout
    assert 'id="k3-checklist"' in page, dom.stderr[-2000:]
    table = page[page.index('id="k3-checklist"'):]
    table = table[:table.index("</table>")]
    items = re.findall(r'data-item="(C\d+)"', table)
    assert items == [f"C{i}" for i in range(1, 13)]
    assert re.search(r'class="k3-pass" data-item="C6"', table)
    # the results table is drawn by pytest-html's JavaScript: it ran
    assert 'id="test_browser.py::test_model_output_and_latency"' in page
    # the model's <script> and onerror stayed text: nothing ran, no element was made
    assert "data-pwned" not in page.split("<body", 1)[1].split(">", 1)[0]
    assert "&lt;script&gt;" in page and "<script>document.body" not in page
    assert not re.search(r"<img[^>]*onerror", page)


def contrast_of(binary: str, profile: Path, report: Path) -> dict[str, Any]:
    """The report rendered at 1400x900 with the contrast probe run after load: every visible
    element with text (tag, text, computed colour, background, ratio) and where the first
    screen ends."""
    probe = report.with_name("contrast-probe.html")
    script = ('<script>window.addEventListener("load", function () { setTimeout(function () {'
              + PROBE + '}, 300); });</script></body>')
    probe.write_text(report.read_text().replace("</body>", script))
    done = run_chromium(binary, profile, "--virtual-time-budget=5000", "--window-size=1400,900",
                        "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="k3-contrast">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))  # type: ignore[no-any-return]


@pytest.mark.live
def test_first_screen_answers_can_we_ship_with_readable_text(
        pytester: pytest.Pytester, testbed: Any, tmp_path: Path) -> None:
    binary, report = chromium_and_report(pytester, testbed)
    page = report.read_text()
    first = page[page.index('id="k3-ship"'):page.index("</section>", page.index('id="k3-ship"'))]
    reasons = re.findall(r"<li>(.*?)</li>", first[first.index('id="k3-reasons"'):].split(
        "</ul>", 1)[0])
    assert reasons and len(reasons) == len(set(reasons))
    assert "Evidence it rests on" not in page and 'id="k3-advice"' in first
    assert 'id="k3-not-checked"' in first
    assert page.index('id="k3-ship"') < page.index('id="k3-checklist"')

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-first-screen.png"
    shot.unlink(missing_ok=True)
    run_chromium(binary, tmp_path / "profile-first", f"--screenshot={shot}",
                 "--window-size=1400,900", report.as_uri())
    assert shot.is_file() and shot.stat().st_size > 20_000

    seen = contrast_of(binary, tmp_path / "profile-probe", report)
    elements = seen["elements"]
    ours = [e for e in elements if e["inK3"]]
    assert len(ours) > 50  # the summary, the checklist and the reproduction table were read
    assert {e["id"] for e in ours} >= {"k3-verdict", "k3-headline"}
    low = [e for e in elements if e["ratio"] < AA]
    assert not low, "text below WCAG AA 4.5:1:\n" + "\n".join(
        f"{e['tag']}.{e['cls']} {e['text']!r}: {e['color']} on {e['background']} = "
        f"{e['ratio']}" for e in low[:20])
    assert seen["ship_bottom"] <= seen["viewport"], seen["ship_bottom"]  # no scrolling
    (ARTIFACTS / "contrast.json").write_text(json.dumps(seen, indent=1))
