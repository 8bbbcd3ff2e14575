"""Install the benchmark's peer load generators: pinned, each in its own virtualenv.

Each peer (:data:`PEERS`) lives in ``cache_dir()/peers/<name>-<version>`` (the testbed cache,
env ``K3ACCEPT_CACHE``), created on first use under a lock (``testbed.file_lock``, the one
the vLLM testbed installs under) and reused later: a virtualenv counts as installed when its
executable and the marker written after a successful ``pip install`` are there. An install
that fails (registry unreachable, no wheel for this Python, no suitable interpreter) is
returned as a reason, never raised; ``run.py`` turns it into a table row with the pip error's
last line. The interpreter: env ``K3_PEER_PYTHON``, else the first working ``pythonX.Y`` (on
PATH or under ``~/.pyenv/versions``) at or above the peer's minimum, preferring that minimum.

    python benchmarks/install.py            # install every peer now (prints where)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_k3accept.testbed.install import cache_dir, file_lock

MARKER = ".k3accept-peer"
#: Python minor versions tried for a peer's virtualenv, from its minimum upwards
_MINORS = (11, 12, 13)


@dataclass(frozen=True)
class Peer:
    """One pinned peer: its distribution, version, console script and minimum Python."""

    name: str
    version: str
    exe: str
    label: str
    min_python: tuple[int, int] = (3, 11)
    #: env var naming an existing virtualenv that replaces the cache's (never installed into)
    env: str | None = None

    @property
    def requirement(self) -> str:
        """The pip requirement (``name==version``)."""
        return f"{self.name}=={self.version}"

    def venv(self) -> Path:
        """The virtualenv: ``$<env>`` when set, else ``cache_dir()/peers/<name>-<version>``."""
        if self.env and os.environ.get(self.env):
            return Path(os.environ[self.env]).expanduser()
        return cache_dir() / "peers" / f"{self.name}-{self.version}"


PEERS = {
    "guidellm": Peer("guidellm", "0.8.1", "guidellm", "GuideLLM 0.8.1", env="K3_GUIDELLM_VENV"),
    "aiperf": Peer("aiperf", "0.13.0", "aiperf", "AIPerf 0.13.0"),
    # inference-perf 0.1.1-0.7.0 all declare Requires-Python >=3.12
    "inference-perf": Peer("inference-perf", "0.7.0", "inference-perf", "inference-perf 0.7.0",
                           min_python=(3, 12)),
}


def _works(python: str, minimum: tuple[int, int]) -> bool:
    """``python`` runs (a pyenv shim of a version not selected does not) and is >= minimum."""
    try:
        res = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    parts = res.stdout.split()
    return res.returncode == 0 and len(parts) == 2 and (int(parts[0]), int(parts[1])) >= minimum


def find_python(minimum: tuple[int, int]) -> str | None:
    """An interpreter for a peer's virtualenv (see the module docstring), or None."""
    if os.environ.get("K3_PEER_PYTHON"):
        return os.environ["K3_PEER_PYTHON"]
    candidates: list[str] = []
    for minor in (m for m in _MINORS if (3, m) >= minimum):
        name = f"python3.{minor}"
        found = shutil.which(name)
        candidates += [found] if found else []
        candidates += sorted(str(p) for p in Path("~/.pyenv/versions").expanduser()
                             .glob(f"3.{minor}.*/bin/{name}"))
    candidates.append(sys.executable)
    return next((c for c in candidates if _works(c, minimum)), None)


def last_error_line(output: str) -> str:
    """The line that says why pip failed: its last ``ERROR:`` line, else the last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return (errors or lines or ["(no output)"])[-1]


def installed(peer: Peer) -> bool:
    """The peer's executable is there and so is the marker (or the venv is an override)."""
    venv = peer.venv()
    override = bool(peer.env and os.environ.get(peer.env))
    return (venv / "bin" / peer.exe).exists() and (override or (venv / MARKER).exists())


def _step(argv: list[str], log_file: Path, timeout: float) -> str | None:
    """Run one install step, appending its output to ``log_file``; None or the reason it failed."""
    with open(log_file, "a") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    except subprocess.TimeoutExpired:
        return f"{Path(argv[0]).name} {argv[2] if len(argv) > 2 else ''} ran past {timeout:g} s"
    except OSError as exc:
        return f"{argv[0]}: {exc}"
    out = (proc.stdout or "") + (proc.stderr or "")
    with open(log_file, "a") as fh:
        fh.write(out)
    return None if proc.returncode == 0 else f"exit {proc.returncode}: {last_error_line(out)}"


def ensure(peer: Peer, *, install: bool = True, log: Callable[[str], object] = print,
           timeout: float = 1800.0) -> tuple[Path | None, str]:
    """(the peer's virtualenv, "") when usable, installing it first if needed; else (None, why)."""
    venv = peer.venv()
    if installed(peer):
        return venv, ""
    if peer.env and os.environ.get(peer.env):
        return None, f"${peer.env}={venv} has no bin/{peer.exe}"
    if not install:
        return None, f"not installed ({venv} missing; --no-install)"
    with file_lock(venv.parent / f".{venv.name}.lock", log):
        if installed(peer):  # another process installed it while this one waited
            return venv, ""
        base = find_python(peer.min_python)
        if base is None:
            want = ".".join(map(str, peer.min_python))
            return None, f"install failed: no Python >= {want} found (set K3_PEER_PYTHON)"
        if venv.exists():
            shutil.rmtree(venv)
        log_file = venv.parent / f"{venv.name}.log"
        log_file.write_text(f"# {peer.requirement} {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        log(f"# installing {peer.requirement} into {venv} (log {log_file})")
        t0 = time.monotonic()
        py = str(venv / "bin" / "python")
        why = (_step([base, "-m", "venv", str(venv)], log_file, timeout)
               or _step([py, "-m", "pip", "install", peer.requirement], log_file, timeout))
        if why is None and not (venv / "bin" / peer.exe).exists():
            why = f"pip installed {peer.requirement} but no bin/{peer.exe}"
        if why is not None:
            shutil.rmtree(venv, ignore_errors=True)
            return None, f"install failed: {why}"
        (venv / MARKER).write_text(json.dumps({
            "requirement": peer.requirement, "python": base,
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n")
        log(f"# installed {peer.requirement} in {time.monotonic() - t0:.0f} s")
        return venv, ""


if __name__ == "__main__":  # pragma: no cover - manual: install every peer now
    for p in PEERS.values():
        where, reason = ensure(p)
        print(f"{p.label}: {where or reason}")
