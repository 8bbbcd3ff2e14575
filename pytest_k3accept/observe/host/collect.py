"""``k3accept collect``: this node's host facts as a facts file (JSON).

Run it on each GPU node, or inside the serving container, and hand the files to the test run
with ``--k3-host-facts node.json`` (repeatable). It records what NVML says (driver, CUDA
driver version, each GPU's model, UUID, memory and NVLink links), the CUDA runtime the
container carries (``$CUDA_VERSION``, ``/usr/local/cuda/version.json``, or the torch build,
in that order), the image reference when known, RDMA devices (``/sys/class/infiniband``) and
``nvidia-smi topo -m`` when present. Without a GPU the file says so and is still valid.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from . import factsfile, nvml
from .facts import NodeFacts
from .versions import VersionError, parse_cuda

CUDA_JSON = Path("/usr/local/cuda/version.json")
INFINIBAND = Path("/sys/class/infiniband")
IMAGE_ENV = ("K3ACCEPT_IMAGE", "IMAGE_REF", "CONTAINER_IMAGE")


def cuda_runtime(environ: Mapping[str, str] | None = None, version_json: Path = CUDA_JSON,
                 torch_info: tuple[str | None, str | None] | None = None,
                 ) -> tuple[str | None, str | None]:
    """(CUDA runtime version, where it was read) of this container, or (None, None)."""
    env = os.environ if environ is None else environ
    raw = env.get("CUDA_VERSION")
    if raw:
        try:
            return parse_cuda(raw).text, "CUDA_VERSION environment variable"
        except VersionError:
            pass
    try:
        data = json.loads(version_json.read_text())
        version = data["cuda"]["version"]
        return parse_cuda(version).text, str(version_json)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    torch_version, torch_cuda = torch_build() if torch_info is None else torch_info
    if torch_cuda:
        try:
            return parse_cuda(torch_cuda).text, f"torch {torch_version} build"
        except VersionError:
            pass
    return None, None


def torch_build() -> tuple[str | None, str | None]:
    """(torch version, CUDA it was built for) when torch is importable, else (None, None)."""
    if importlib.util.find_spec("torch") is None:
        return None, None
    try:
        import torch
    except Exception:
        return None, None
    return str(torch.__version__), getattr(torch.version, "cuda", None)


def topology(timeout: float = 20.0) -> str | None:
    """Output of ``nvidia-smi topo -m``, or None when nvidia-smi is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        done = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def rdma_devices(root: Path = INFINIBAND) -> tuple[str, ...] | None:
    """RDMA device names (``mlx5_0`` ...); None when the sysfs class cannot be read."""
    try:
        return tuple(sorted(p.name for p in root.iterdir()))
    except FileNotFoundError:
        return ()
    except OSError:
        return None


def collect(image: str | None = None, module: Any = None,
            environ: Mapping[str, str] | None = None) -> NodeFacts:
    """This node's facts: NVML, container CUDA runtime, torch build, image, topology."""
    env = os.environ if environ is None else environ
    facts = nvml.read_local(module)
    tv, tc = torch_build()
    runtime, where = cuda_runtime(env, torch_info=(tv, tc))
    image = image or next((env[k] for k in IMAGE_ENV if env.get(k)), None)
    return replace(facts, source="k3accept collect", image=image, cuda_runtime=runtime,
                   cuda_runtime_source=where, torch_version=tv, torch_cuda=tc,
                   rdma_devices=rdma_devices(), topology=topology())


def main(args: argparse.Namespace) -> int:
    """``k3accept collect [--out FILE] [--image REF]``: write the facts file; 0 on success."""
    facts = collect(image=getattr(args, "image", None))
    text = factsfile.dumps(facts)
    factsfile.loads(text, "<collected>")  # what we write must read back
    out = getattr(args, "out", "-") or "-"
    if out == "-":
        sys.stdout.write(text)
    else:
        Path(out).write_text(text, encoding="utf-8")
    if facts.gpu_available:
        line = (f"{facts.node}: {facts.gpu_count} GPU(s), driver {facts.driver_version} "
                f"(CUDA {facts.cuda_driver_version}), container CUDA "
                f"{facts.cuda_runtime or 'unknown'}")
    else:
        line = f"{facts.node}: no GPU facts: {facts.gpu_error}"
    print(f"k3accept collect: {line}" + ("" if out == "-" else f" -> {out}"), file=sys.stderr)
    return 0
