"""Two sessions with ``--k3-launch testbed`` at the same time (issue 17 item 4): each gets
its own port (claimed with a lock file, not only picked), its own server log in the shared
artifacts directory, its own record and report; the session that found the directory
already claimed says so in a note. Two real testbed starts, one request each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept import testbed

pytestmark = [pytest.mark.live]

REAL_CACHE = testbed.cache_dir()  # read before pytester moves HOME
INNER = '''
import pytest

@pytest.mark.asyncio
async def test_one_answer(k3_client):
    res = await k3_client.chat([{"role": "user", "content": "hello"}], max_tokens=4)
    assert res.ok, res.error
'''


def test_two_launched_sessions_at_once_do_not_collide(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    reason = testbed.unavailable_reason()
    if reason:
        from conftest import _unavailable

        _unavailable(f"the vLLM testbed: {reason}")
    monkeypatch.setenv("K3ACCEPT_CACHE", str(REAL_CACHE))
    shared = pytester.path / "artifacts"
    procs: dict[str, Any] = {}
    for name in ("a", "b"):
        where = pytester.mkdir(name)
        (where / "test_inner.py").write_text(INNER)
        procs[name] = pytester.popen(
            [sys.executable, "-m", "pytest", "test_inner.py", "--k3-launch", "testbed",
             "--k3-launch-timeout", "900", "--k3-artifacts", str(shared),
             "--k3-record", "record.json", "--html", "report.html", "--self-contained-html",
             "-p", "no:cacheprovider", "-q"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=where)
    out = {}
    for name, proc in procs.items():
        try:
            text, _ = proc.communicate(timeout=1200)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
        out[name] = text.decode(errors="replace")
        assert proc.returncode == 0, f"session {name}:\n{out[name][-3000:]}"
    recs = {n: json.loads((pytester.path / n / "record.json").read_text()) for n in procs}
    launches = {n: next(e["data"] for e in r["evidence"] if e["kind"] == "launch")
                for n, r in recs.items()}
    assert launches["a"]["base_url"] != launches["b"]["base_url"]  # two ports
    logs = {n: Path(d["output"]) for n, d in launches.items()}
    assert logs["a"] != logs["b"] and all(p.parent == shared and p.stat().st_size > 0
                                          for p in logs.values())
    assert sorted(p.name for p in shared.glob("server-*.log")) == sorted(
        p.name for p in logs.values())
    # one session found the directory claimed by the other while both ran, and says so
    noted = [n for n, r in recs.items()
             if any("another k3accept session" in note for note in r["notes"])]
    assert len(noted) == 1, {n: r["notes"] for n, r in recs.items()}
    reports = {n: (pytester.path / n / "report.html").read_text() for n in procs}
    assert reports["a"] != reports["b"]
    for n in procs:
        assert launches[n]["base_url"] in reports[n]
        assert "Traceback" not in out[n]


XDIST_INNER = '''
import asyncio, json, os, pathlib, time
import pytest

OUT = pathlib.Path(os.environ["K3_OVERLAP_DIR"])

async def _run(k3_load, name, other):
    # a barrier: both workers start their load together, so the two runs overlap in time
    (OUT / f"ready-{name}").touch()
    deadline = time.monotonic() + 60
    while not (OUT / f"ready-{other}").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    result = await k3_load.run(concurrency=2, requests=4, context_tokens=64,
                               output_tokens=600, max_seconds=240)
    assert result.summary["ok"] == 4, result.line()
    (OUT / f"run-{name}.json").write_text(json.dumps({
        "start": result.started_at, "end": result.started_at + result.elapsed,
        "shared": result.shared, "line": result.line(), "worker": os.environ.get(
            "PYTEST_XDIST_WORKER")}))

@pytest.mark.asyncio
async def test_load_a(k3_load):
    await _run(k3_load, "a", "b")

@pytest.mark.asyncio
async def test_load_b(k3_load):
    await _run(k3_load, "b", "a")
'''


def test_two_xdist_workers_on_one_endpoint_mark_their_overlapping_runs_shared(
        pytester: pytest.Pytester, testbed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pytest -n 2`` against the session's testbed: two load tests on two workers."""
    monkeypatch.setenv("K3_OVERLAP_DIR", str(pytester.path))
    pytester.makepyfile(test_inner=XDIST_INNER)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "load", "--k3-endpoint", testbed.base_url,
        "--k3-record", "record.json", "-p", "no:cacheprovider", timeout=900)
    result.assert_outcomes(passed=2)
    runs = {n: json.loads((pytester.path / f"run-{n}.json").read_text()) for n in "ab"}
    assert runs["a"]["worker"] != runs["b"]["worker"], runs  # two workers, one each
    overlap = min(runs["a"]["end"], runs["b"]["end"]) - max(runs["a"]["start"],
                                                            runs["b"]["start"])
    loads = [e["data"] for e in json.loads((pytester.path / "record.json").read_text())
             ["evidence"] if e["kind"] == "load"]
    assert len(loads) == 2, [sorted(d) for d in loads]
    others = [d["server"]["other_clients"] for d in loads]
    if overlap > 1.0:  # the barrier makes this the case: each run lasts seconds
        for n, run in runs.items():
            assert run["shared"] is True, (n, run, overlap, others)
            assert "SHARED: the server " in run["line"], run["line"]
        for data in loads:  # the session's record says so too, for the controller's verdict
            assert data["server"]["other_clients"]["shared"] is True, (overlap, others)
    else:
        # runs that barely met (one worker's prompt generation late): each run's server
        # figures span its scrapes, a little wider than its requests, so either answer can
        # be right; the record must still agree with what each run said
        assert sorted(r["shared"] for r in runs.values()) == sorted(
            o["shared"] for o in others), (runs, overlap, others)
