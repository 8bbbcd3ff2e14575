"""benchmarks/context.py (``run.py --contexts``): option parsing, prompt size, the byte
budget, row building and the two targets' verdict; the stub's ``/stats`` byte count; the
peers' rusage and memory guard. No live server beyond the stub."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import context  # noqa: E402
import peers  # noqa: E402
import stub_server  # noqa: E402


def test_contexts_parse_counts_and_suffixes() -> None:
    assert context.parse_contexts("8192,32K, 128k,512K,1M") == [
        8192, 32768, 131072, 524288, 1048576]
    assert context.parse_contexts("1M,8K,8192") == [8192, 1048576]  # sorted, once each


@pytest.mark.parametrize("bad", ["", "8K,abc", "0", "1.5M", "-4"])
def test_contexts_refuse_what_is_not_a_token_count(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--contexts"):
        context.parse_contexts(bad)


@pytest.mark.parametrize("tokens", [1, 8192, 1048576])
def test_the_prompt_is_exactly_that_many_stub_tokens(tokens: int) -> None:
    text = context.prompt_text(tokens)
    assert len(text.encode()) == 4 * tokens
    body = {"messages": [{"role": "user", "content": text}]}
    assert stub_server._prompt_tokens(body, chat=True) == tokens


def test_request_counts_shrink_with_length_within_bounds() -> None:
    counts = [context.requests_for(t, 1) for t in context.DEFAULT]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    assert counts[0] == 3000  # 8K: the upper bound
    assert context.requests_for(1048576, 1) == 64  # 256 MiB / 4 MiB
    assert context.requests_for(1048576, 64) == 128  # two per stream
    assert context.requests_for(1048576, 1, 1 << 20) == 16  # the floor


def _row(tool: str, ctx: int, rps: float | None, cpu: float | None, sent: float,
         note: str = "") -> dict[str, Any]:
    return {"tool": tool, "context": ctx, "mode": "c=1", "ok": 10 if rps else 0, "errors": 0,
            "rps": rps, "conc": None, "ttft_p50_ms": None, "ttft_p99_ms": None,
            "cpu_us": cpu, "mem_mib": 50.0, "req_bytes": sent, "note": note}


def test_usage_row_divides_cpu_and_bytes_per_request() -> None:
    row = context.usage_row({"ok": 8, "errors": 2, "cpu_us": None}, 0.5, 2048, (20, 40960))
    assert row["cpu_us"] == pytest.approx(50000)  # 0.5 s over 10 requests
    assert row["mem_mib"] == 2.0 and row["req_bytes"] == 2048  # 20 requests (warm-up too)
    failed = context.usage_row({"ok": 0, "errors": 0, "cpu_us": None}, 1.0, None, (0, 0))
    assert failed["cpu_us"] is None and failed["req_bytes"] is None


def test_the_table_keeps_a_failed_peer_as_a_row_with_its_reason() -> None:
    rows = [_row("raw aiohttp", 8192, 100.0, 1000, 32768),
            _row("k3accept runner", 8192, 95.0, 1100, 32768),
            _row("GuideLLM 0.8.1", 8192, None, None, 0,
                 "failed at 8192 tokens: time cap of 90 s reached")]
    text = context.table(rows)
    assert "0.95" in text.splitlines()[3]
    assert "failed at 8192 tokens: time cap of 90 s reached" in text


def test_verdict_reads_both_targets() -> None:
    rows = [_row("raw aiohttp", 8192, 100.0, 1000, 32768),
            _row("k3accept runner", 8192, 95.0, 1000, 32768),
            _row("raw aiohttp", 1048576, 10.0, 5000, 4194304),
            _row("k3accept runner", 1048576, 8.0, 6000, 4194304)]
    met_rps, met_cpu = context.verdict(rows)
    assert met_rps.startswith("runner >= 0.9x raw aiohttp (best of each): NOT met: 1 of 2 "
                              "cells at >= 0.9x")
    assert "lowest 0.80 at 1048576" in met_rps
    assert "c=1): met" in met_cpu  # 6x the CPU for 128x the bytes
    steep = rows[:2] + [_row("k3accept runner", 32768, 95.0, 8000, 131072),
                        _row("raw aiohttp", 32768, 100.0, 1000, 131072)]
    assert "NOT met" in context.verdict(steep)[1]  # 8x the CPU for 4x the bytes
    assert context.growth(steep, "k3accept runner", "c=1")[0][1] == pytest.approx(1.5)


def test_the_verdict_reads_the_paired_ratios_too_where_a_cell_has_them() -> None:
    # raw aiohttp's best repeat came at a quiet moment the runner's repeats did not get: the
    # ratio of the bests says 0.80, the repeats side by side say the runner kept up
    raw = [{"rps": r} for r in (100.0, 80.0, 60.0)]
    runner = [{"rps": r} for r in (97.0, 79.0, 62.0)]
    pairs = context.paired(raw, runner)
    assert pairs == pytest.approx([0.97, 0.9875, 62 / 60])
    assert context.paired(raw, [{"rps": None}] * 3) == []
    rows = [_row("raw aiohttp", 131072, 100.0, 600, 524288),
            _row("k3accept runner", 131072, 80.0, 650, 524288) | {"paired": 0.9875}]
    best, pair = context.verdict(rows)[:2]
    assert best.startswith("runner >= 0.9x raw aiohttp (best of each): NOT met")
    assert pair.startswith("runner >= 0.9x raw aiohttp (paired median): met: 1 of 1 cells")
    rows[1]["paired"] = 0.85
    assert "NOT met" in context.verdict(rows)[1]


def _post(port: int, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
                  b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    return raw


def test_the_stub_counts_body_bytes_and_reports_its_max_model_len() -> None:
    body = json.dumps({"model": "stub-model", "max_tokens": 2, "messages": [
        {"role": "user", "content": context.prompt_text(300000)}]}).encode()
    with stub_server.spawn(chunks=2, max_model_len=2 << 20) as srv:
        assert srv.stats() == {"requests": 0, "body_bytes": 0, "prompt_tokens": 0}
        answer = _post(srv.port, body)
        assert b"\"prompt_tokens\":300000" in answer  # a prompt past 131072 is answered
        assert srv.stats() == {"requests": 1, "body_bytes": len(body),
                               "prompt_tokens": 300000}
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            assert b"\"max_model_len\": 2097152" in s.recv(65536)


def test_a_peer_run_records_its_cpu_and_memory(tmp_path: Path) -> None:
    why, _ = peers._run([sys.executable, "-c", "x = bytearray(64 << 20); sum(range(10**6))"],
                        30, str(tmp_path))
    assert why is None
    assert peers.LAST_USAGE["cpu_s"] and peers.LAST_USAGE["cpu_s"] > 0
    assert peers.LAST_USAGE["maxrss_kib"] and peers.LAST_USAGE["maxrss_kib"] > 64 << 10


def test_a_peer_past_the_memory_guard_is_killed_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "RSS_LIMIT_KIB", 32 << 10)
    why, wall = peers._run([sys.executable, "-c", "import time; x = bytearray(96 << 20); "
                            "x[::4096] = b'1' * len(x[::4096]); time.sleep(20)"],
                           30, str(tmp_path))
    assert why is not None and why.startswith("killed: its processes' RSS passed")
    assert wall < 15


def test_a_peer_past_its_cap_is_a_reason(tmp_path: Path) -> None:
    why, wall = peers._run([sys.executable, "-c", "import time; time.sleep(30)"], 1,
                           str(tmp_path))
    assert why == "time cap of 1 s reached (start-up included)" and wall < 10


def test_the_axis_runs_every_tool_per_cell_and_names_a_peer_that_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the real stub: the in-process tools in child processes (memory, bytes as
    received), a stand-in peer that sends one request per run and fails past 1024 tokens:
    its failure is a row with the reason, and it is not run at the longer length."""
    import drivers

    calls: list[int] = []

    def fake(venv: Path, base_url: str, *, conc: int | None, rate: float | None, n: int,
             chunks: int, prompt_tokens: int, cap: float, tok: str) -> dict[str, Any]:
        calls.append(prompt_tokens)
        peers.LAST_USAGE.clear()
        if prompt_tokens > 1024:
            return drivers.skipped("fake peer", "", "exit 1: tokenizer too slow")
        body = json.dumps({"model": "stub-model", "max_tokens": 2, "messages": [
            {"role": "user", "content": "x" * (2 * prompt_tokens)}]}).encode()
        _post(int(base_url.rsplit(":", 1)[1]), body)
        peers.LAST_USAGE.update(cpu_s=0.25, maxrss_kib=4096, tree_rss_kib=8192)
        return drivers.row("fake peer", "", 1, 0, 0.5, 1.0, None)

    monkeypatch.setattr(peers, "PEERS", {"fake": fake})
    monkeypatch.setattr(peers, "LABELS", {"fake": "fake peer"})
    a = argparse.Namespace(chunks=2, contexts=[1024, 2048, 4096], concurrency=[1],
                           budget=1 << 16, high=3000, peer_requests=4, repeats=1, cap=20.0,
                           peer_cap=10.0)
    rows = context.run_axis(a, {"fake": (Path("/nowhere"), "")}, "tok", "", lambda s: None)
    assert [(r["tool"], r["context"]) for r in rows] == [
        (t, c) for c in (1024, 2048, 4096) for t in ("raw aiohttp", "k3accept runner",
                                                     "fake peer")]
    assert calls == [1024, 2048]  # not tried again at 4096
    for r in rows[:2]:
        assert r["ok"] == 16 and r["mem_mib"] > 10  # the child's peak RSS
        assert 4096 < r["req_bytes"] < 4096 + 300  # 4 x 1024 bytes of prompt + the JSON
    peer = rows[2]
    assert peer["req_bytes"] == len(json.dumps({"model": "stub-model", "max_tokens": 2,
                                                "messages": [{"role": "user",
                                                              "content": "x" * 2048}]}))
    assert peer["cpu_us"] == pytest.approx(250000) and peer["mem_mib"] == 8.0
    assert rows[5]["note"] == "failed at 2048 tokens: exit 1: tokenizer too slow"
    assert rows[8]["note"].startswith("not run: failed at 2048 tokens: exit 1")
    assert "fake peer" in context.table(rows)


def test_the_plot_draws_every_measured_line_and_the_reference() -> None:
    import plot

    rows = [_row("raw aiohttp", 8192, 100.0, 1000, 32768),
            _row("k3accept runner", 8192, 95.0, 1200, 32768),
            _row("raw aiohttp", 1048576, 10.0, 5000, 4194304),
            _row("k3accept runner", 1048576, 9.0, 5200, 4194304),
            _row("GuideLLM 0.8.1", 8192, None, None, 0, "failed")]
    out = plot.svg(rows, "t")
    assert out.startswith("<svg") and out.rstrip().endswith("</svg>")
    assert out.count("<polyline") == 2  # the failed peer has no line
    assert "proportional to bytes" in out and 'stroke-dasharray="6 4"' in out
    assert plot.series(rows)[("k3accept runner", "c=1")] == [(32768, 1200), (4194304, 5200)]
    with pytest.raises(ValueError):
        plot.svg(rows[-1:], "t")
