"""Capture real ``/metrics`` pages of a testbed release: idle, under a small load, after it.

Run from the repository root with the project's python (the release must be installed:
``k3accept testbed install --version X``)::

    .tox/tests/bin/python scripts/capture-metrics.py --release 0.28.0

Starts the tiny testbed model with ``--kv-cache-memory-bytes 3000000`` (a small cache, so the
load shows in KV usage), sends 4 concurrent ``/v1/completions`` sharing a 3-block prefix
(``max_tokens=160, ignore_eos=true``; the under-load page is the one with the fullest KV
cache seen while they run, polled every 0.5 s), then 4 more after them, and writes
``tests/data/metrics/vllm-<major.minor>-{idle,under-load,after-load}.txt`` plus the after-load
page as OpenMetrics (``.openmetrics.txt``), and ``vllm-<major.minor>-capture.json`` with what
was sent (the counters the pages must show).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_k3accept import testbed  # noqa: E402
from pytest_k3accept.observe.server.launch import LaunchError, ServerProcess, free_port  # noqa: E402

OUT = ROOT / "tests" / "data" / "metrics"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PREFIX = "The operations team keeps a careful log of every deployment and its load. " * 30
MAX_TOKENS, CONCURRENCY = 160, 4


def _get(url: str, accept: str | None = None) -> tuple[str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.read().decode(), res.headers.get("Content-Type", "")


def _kv_usage(page: str) -> float:
    found = re.search(r"^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$", page, re.M)
    return float(found.group(1)) if found else -1.0


def _complete(base: str, i: int, out: list[dict[str, Any]]) -> None:
    body = {"model": "k3-testbed", "prompt": PREFIX + f" Question {i}: what changed?",
            "max_tokens": MAX_TOKENS, "ignore_eos": True}
    req = urllib.request.Request(f"{base}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as res:
        out.append(json.loads(res.read())["usage"])


def _wave(base: str, start: int, usages: list[dict[str, Any]]) -> list[threading.Thread]:
    threads = [threading.Thread(target=_complete, args=(base, start + i, usages)) for i in range(CONCURRENCY)]
    for t in threads:
        t.start()
    return threads


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", default=testbed.SECOND_RELEASE)
    args = ap.parse_args(argv)
    rel = testbed.testbed_version(args.release)
    if (reason := testbed.unavailable_reason(rel)) is not None:
        print(reason, file=sys.stderr)
        return 2
    stem = "vllm-" + ".".join(rel.split(".")[:2])
    port = free_port()
    cmd = testbed.server_command(testbed.build_model("tiny", rel), port=port, kv_cache_bytes=3_000_000,
                                 version=rel)
    log = OUT / f".{stem}-server.log"
    proc = ServerProcess()
    proc.start(cmd, env=testbed.server_env(), log_path=log)
    base = f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready(base, 300)
        pages = {"idle": _get(f"{base}/metrics")[0]}
        usages: list[dict[str, Any]] = []
        first = _wave(base, 0, usages)
        best = -1.0
        while any(t.is_alive() for t in first):  # keep the page of the fullest KV cache seen
            page = _get(f"{base}/metrics")[0]
            if (kv := _kv_usage(page)) > best:
                best, pages["under-load"] = kv, page
            time.sleep(0.5)
        for t in _wave(base, CONCURRENCY, usages):
            t.join()
        pages["after-load"] = _get(f"{base}/metrics")[0]
        om, om_type = _get(f"{base}/metrics/", OPENMETRICS)
    except LaunchError as exc:
        print(f"server did not start: {exc}", file=sys.stderr)
        return 1
    finally:
        proc.stop()
    for name, text in pages.items():
        (OUT / f"{stem}-{name}.txt").write_text(text)
    (OUT / f"{stem}-after-load.openmetrics.txt").write_text(om)
    kv_line = next((ln for ln in log.read_text(errors="replace").splitlines() if "KV cache size" in ln), "")
    info = {"vllm_version": rel, "command": " ".join(cmd[1:]), "kv_cache_log_line": kv_line.strip(),
            "requests": len(usages), "prompt_tokens": sum(u["prompt_tokens"] for u in usages),
            "generation_tokens": sum(u["completion_tokens"] for u in usages),
            "openmetrics_content_type": om_type,
            "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (OUT / f"{stem}-capture.json").write_text(json.dumps(info, indent=2) + "\n")
    log.unlink(missing_ok=True)
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
