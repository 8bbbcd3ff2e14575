"""Artifacts on a disk that refuses them: a read-only ``--k3-artifacts`` directory, a read-only
``--k3-record`` path, and a full disk (small tmpfs mounts the test makes as root; a file in
the way of the directory where mounting is refused). Each gives one message naming the path
and what could not be written, while the session's result, the terminal summary and every
other artifact still come out; a record that fails half-way never replaces a good one.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from pytest_k3accept import testbed

pytestmark = [pytest.mark.live]

REAL_CACHE = testbed.cache_dir()  # read before pytester moves HOME
SUITE = '''
def test_endpoint_answers(k3_endpoint):
    assert k3_endpoint.model == "k3-testbed"
'''
GOOD = {"schema_version": "good", "note": "the record of an earlier run"}


@pytest.fixture
def mounts(tmp_path: Path) -> Iterator[Any]:
    """``mounts(name, ro=False, full=False)``: a 64 KiB tmpfs (read-only, or filled up), or a
    path under a plain file (writes fail with ENOTDIR) where this machine refuses mounts."""
    made: list[Path] = []

    def mount(name: str, ro: bool = False, full: bool = False,
              keep: dict[str, Any] | None = None) -> Path:
        where = tmp_path / name
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:  # no mount here: a directory whose writes fail
            where.rmdir()
            where.write_text("a file where a directory should be")
            return where / "sub"
        made.append(where)
        if keep is not None:
            (where / "record.json").write_text(json.dumps(keep))
        if full:
            with open(where / "filler", "wb") as fh:
                try:
                    fh.write(b"\0" * (1 << 20))
                except OSError:
                    pass
        if ro:
            subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        return where

    yield mount
    for where in reversed(made):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_read_only_artifacts_dir_and_a_full_disk_for_the_record(
        pytester: pytest.Pytester, mounts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K3ACCEPT_CACHE", str(REAL_CACHE))
    pytester.makepyfile(test_suite=SUITE)
    arts = mounts("arts", ro=True)
    full = mounts("full", full=True, keep=GOOD)
    result = pytester.runpytest_subprocess(
        "--k3-launch", "testbed", "--k3-artifacts", str(arts), "--k3-record",
        str(full / "record.json"), "--html", "out/report.html", "--self-contained-html",
        "-p", "no:cacheprovider", timeout=600)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "k3accept" in out and "verdict" in out.lower()  # the terminal summary came out
    arts_lines = [ln for ln in out.splitlines() if ln.startswith("artifacts: cannot write")]
    assert len(arts_lines) == 1, out
    assert f"the server log to {arts}/ (" in arts_lines[0] and "instead" in arts_lines[0]
    fallback = Path(arts_lines[0].rsplit(" it is written to ", 1)[1].split(" instead")[0])
    assert fallback.is_file() and "Application startup complete" in fallback.read_text()
    result.stdout.fnmatch_lines([f"record: NOT written to {full}/record.json: *(a record "
                                 "already there is left as it was)"])
    if full.is_dir():
        assert json.loads((full / "record.json").read_text()) == GOOD  # never replaced
        assert sorted(p.name for p in full.iterdir()) == ["filler", "record.json"]  # no temp
    assert (pytester.path / "out" / "report.html").stat().st_size > 1000
    assert "Traceback" not in out


def test_a_read_only_record_path_is_named_and_the_rest_comes_out(
        pytester: pytest.Pytester, mounts: Any, testbed: Any) -> None:
    pytester.makepyfile(test_suite=SUITE)
    ro = mounts("ro", ro=True)
    result = pytester.runpytest_subprocess(
        "--k3-endpoint", testbed.base_url, "--k3-record", str(ro / "record.json"),
        "--html", "out/report.html", "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=1)
    lines = [ln for ln in result.stdout.lines if ln.startswith("record: NOT written")]
    assert len(lines) == 1 and f"{ro}/record.json" in lines[0]
    assert ("Read-only file system" in lines[0] or "Not a directory" in lines[0]), lines
    assert (pytester.path / "out" / "report.html").is_file()
    assert "Traceback" not in result.stdout.str()
