"""The CI-sized side-by-side benchmark runs to the end and prints every row.

Figures are printed, never asserted (the machine is shared; timings would be flaky): this
only keeps ``benchmarks/run.py --quick`` from rotting. It starts no vLLM (``--quick`` leaves
the accuracy phase out), so it is not ``live``. Peers whose virtualenv is missing still get
their row, with the reason.

It runs with ``--no-install``: on a fresh CI machine installing GuideLLM, AIPerf and
inference-perf into their own virtualenvs took most of the test's 531 s (inference-perf alone
229 s on 2 cores), a sixth of the suite. ``vllm bench serve`` runs from the testbed's
virtualenv, which the test command installs anyway; the other peers run where a benchmark run
installed them before (``tox -e bench``), else their rows say "not installed". Installing is
covered by ``tests/unit/test_bench_peers_install.py`` and by ``tox -e bench`` itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("raw aiohttp", "k3accept runner", "GuideLLM 0.8.1", "vllm bench serve")
MODES = ("c=1", "c=64", "c=512", "rate=100/s")


def test_quick_benchmark_prints_the_whole_table(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--no-install",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    table = text.split("## throughput", 1)[1].split("##", 1)[0]
    for tool in TOOLS:
        for mode in MODES:
            assert re.search(rf"^{re.escape(tool)}\s+{re.escape(mode)}\s", table, re.M), (
                f"no row for {tool} {mode}:\n{table}")
    for tool in ("raw aiohttp", "k3accept runner"):  # the in-process tools always run
        for line in table.splitlines():
            if line.startswith(tool):
                cells = line.split()
                assert "failed:" not in line, line
                assert int(cells[len(tool.split()) + 1]) > 0, line  # ok count
    assert "plugin overhead" in text and "added" in text
    assert out.exists() and '"rows"' in out.read_text()
