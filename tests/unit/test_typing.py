"""The package and the benchmarks type-check (``[tool.mypy]`` in pyproject.toml): the same
``python -m mypy pytest_k3accept benchmarks`` a developer runs, so a typing error fails CI
instead of waiting for the next person who runs it by hand (four had gathered in benchmarks/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_errors(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           "pytest_k3accept", "benchmarks"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout
