"""benchmarks/instructions.py: the two runs' sizes, callgrind's count read back (a stand-in
``valgrind`` on PATH that prints what callgrind prints), the table and the verdict. The real
count takes minutes under valgrind; docs/benchmarks.md has its figures."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import instructions  # noqa: E402


def test_two_runs_differ_by_a_bounded_number_of_requests() -> None:
    assert instructions.requests_for(8192, 1) == (4, 4 + 320)  # the cap
    assert instructions.requests_for(1048576, 1) == (4, 4 + 8)  # the floor
    n1, n2 = instructions.requests_for(131072, 64)
    assert n1 == 128 and n2 - n1 == 128  # two rounds of the streams


def _fake_valgrind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    exe = tmp_path / "valgrind"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_the_count_is_read_from_callgrinds_summary(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    row = json.dumps({"ok": 12, "errors": 0})
    _fake_valgrind(tmp_path, monkeypatch,
                   f"echo '{row}'\necho '==7== Collected : 1234567' >&2\n")
    assert instructions.count("raw", "http://x", n=12, warm=8, tokens=8192, conc=1,
                              chunks=16) == (1234567, "")
    # a run that did not answer every request is no count, and says why
    got, why = instructions.count("raw", "http://x", n=13, warm=8, tokens=8192, conc=1,
                                  chunks=16)
    assert got is None and "12 of 13 answered" in why


def test_a_failed_run_is_no_count_with_its_last_line(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_valgrind(tmp_path, monkeypatch, "echo 'ConnectionRefusedError: boom' >&2\nexit 3\n")
    got, why = instructions.count("runner", "http://x", n=4, warm=8, tokens=8192, conc=1,
                                  chunks=16)
    assert got is None and why == "exit 3: ConnectionRefusedError: boom"


def _row(raw: float | None, runner: float | None, why: str = "") -> dict[str, Any]:
    return {"tokens": 8192, "conc": 1, "requests": (4, 324), "raw": raw, "runner": runner,
            "raw_why": "", "runner_why": why}


def test_table_and_verdict() -> None:
    good = [_row(1_750_000, 1_580_000), _row(2_250_000, 1_575_000)]
    text = instructions.table(good)
    assert "1,750,000" in text and "0.90" in text and "0.70" in text
    assert instructions.verdict(good).startswith(
        "runner <= raw aiohttp's instructions per request: met: 2 of 2 cells (highest 0.90")
    worse = good + [_row(1_000_000, 1_100_000)]
    assert ": NOT met: 2 of 3 cells (highest 1.10" in instructions.verdict(worse)
    missing = good + [_row(1_000_000, None, "exit 1: boom")]
    assert ": unknown: 2 of 3 cells" in instructions.verdict(missing)
    assert "runner: exit 1: boom" in instructions.table(missing)


def test_without_valgrind_it_says_so(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(instructions.shutil, "which", lambda name: None)
    assert instructions.main(["--contexts", "8K"]) == 2
    assert "valgrind is not installed" in capsys.readouterr().err
