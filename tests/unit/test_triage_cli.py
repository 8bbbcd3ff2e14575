"""``k3accept triage``: the answer, JSON, stdin, unreadable and odd inputs, streaming with
bounded memory, and the wrappers real deployments put around vLLM's lines."""

from __future__ import annotations

import io
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Iterator

import pytest

import vllm_logs
from pytest_k3accept.cli import main
from pytest_k3accept.observe.server.classify import classify
from pytest_k3accept.observe.server.logread import LogLine, split_lines
from pytest_k3accept.observe.server.triage.command import triage_stream
from pytest_k3accept.observe.server.triage.patterns import RULES, may_match, unwrap
from pytest_k3accept.observe.server.triage.scan import MAX_HITS, Scanner

CORPUS = Path(__file__).resolve().parents[1] / "data" / "triage" / "cases.jsonl"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
SERVING = ('(APIServer pid=1) INFO 11-29 23:50:01 [loggers.py:123] Engine 000: Avg prompt '
           'throughput: 10.0 tokens/s, Avg generation throughput: 75.4 tokens/s, Running: 4 reqs')


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["triage", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_text_answer_names_category_phase_cause_consequences_and_advice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text(vllm_logs.HEAD16_DIES_AT_FIRST_REQUEST)
    rc, out, err = _run(capsys, str(log), "--exit-code", "1")
    assert rc == 0 and not err
    assert "category:   serving" in out and "after init, before any successful response" in out
    assert "root cause:" in out and "Unsupported CPU attention configuration" in out
    assert "advice:" in out


def test_json_has_category_phase_evidence_with_line_numbers_and_advice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text(vllm_logs.KV_TOO_SMALL_FOR_MAX_LEN)
    rc, out, _ = _run(capsys, str(log), "--json", "--exit-code", "1")
    data = json.loads(out)
    assert rc == 0 and data["category"] == "kv-capacity-at-init"
    assert data["stage"] == "kv-sizing" and data["phase"].startswith("KV-cache sizing")
    assert data["evidence"][0]["lineno"] > 1 and "max seq len" in data["evidence"][0]["text"]
    assert data["advice"] and data["exit_code"] == 1 and data["lines_read"] > 5


def test_stdin_and_exit_code_137_without_oom_evidence_is_killed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = vllm_logs.HEALTHY + SERVING + "\nKilled\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    rc, out, _ = _run(capsys, "-", "--json", "--exit-code", "137")
    data = json.loads(out)
    assert rc == 0 and data["category"] == "killed" and data["log"] == "stdin"
    assert "dmesg" in data["advice"] and "network" in data["advice"]


@pytest.mark.parametrize("make", ["missing", "directory"])
def test_unreadable_input_is_exit_2_with_a_message_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str) -> None:
    path = tmp_path / "nope.log"
    if make == "directory":
        path.mkdir()
    rc, out, err = _run(capsys, str(path))
    assert rc == 2 and not out
    assert err.startswith("k3accept triage: cannot read") and "Traceback" not in err


@pytest.mark.parametrize("content, note", [
    (b"", "the log is empty"),
    (bytes(range(256)) * 40, "not readable text"),
    (b"hello\nworld\n", "no line of this log looks like a vLLM server's"),
], ids=["empty", "binary", "not-vllm"])
def test_bad_input_gets_a_clear_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       content: bytes, note: str) -> None:
    log = tmp_path / "odd.log"
    log.write_bytes(content)
    rc, out, err = _run(capsys, str(log), "--json")
    data = json.loads(out)
    assert rc == 0 and not err and data["category"] in ("none", "unknown")
    assert any(note in n for n in data["notes"])


def test_two_starts_judge_the_last_and_say_so(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "two.log"
    log.write_text(vllm_logs.WEIGHTS_DO_NOT_FIT + vllm_logs.KV_TOO_SMALL_FOR_MAX_LEN)
    rc, out, _ = _run(capsys, str(log))
    assert rc == 0 and "category:   kv-capacity-at-init" in out
    assert "earlier start(s)" in out and "the last start (from line" in out


def test_utf16_log_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "u16.log"
    log.write_text(vllm_logs.KV_NO_BLOCKS, encoding="utf-16")
    rc, out, _ = _run(capsys, str(log), "--json")
    assert json.loads(out)["category"] == "kv-capacity-at-init"


class _Generated(io.RawIOBase):
    """A long log produced as it is read (never held whole): serving, then an OOM."""

    def __init__(self, lines: int) -> None:
        self._left, self._tail = lines, (vllm_logs.HEALTHY.encode(), f"{OOM}\n".encode())
        self._buf = self._tail[0]

    def readable(self) -> bool:
        return True

    def readinto(self, buf: "bytearray | memoryview") -> int:  # type: ignore[override]
        while len(self._buf) < len(buf) and self._left > 0:
            self._left -= 1
            self._buf += (SERVING + "\n").encode()
        if self._left == 0 and self._tail[1]:
            self._buf, self._tail = self._buf + self._tail[1], (b"", b"")
        n = min(len(buf), len(self._buf))
        buf[:n], self._buf = self._buf[:n], self._buf[n:]
        return n


def test_a_long_log_is_streamed_with_bounded_memory() -> None:
    stream = io.BufferedReader(_Generated(20_000))  # ~3 MB of log
    tracemalloc.start()
    try:
        cls, scan = triage_stream(stream)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cls.category == "serving-oom" and scan.total_lines > 20_000
    assert peak < 1_000_000, f"peak {peak} bytes: the log was held in memory"


def test_classify_consumes_an_iterator_once_and_keeps_bounded_state() -> None:
    def lines() -> Iterator[LogLine]:
        yield from split_lines(vllm_logs.HEALTHY)
        for i in range(3 * MAX_HITS):  # many failure-looking lines
            yield LogLine(1000 + i, f"(Worker pid=8) ERROR 11-29 23:51:37 [x.py:1] {OOM}", 0.0)

    scan = Scanner()
    for line in lines():
        scan.feed(line)
    assert len(scan.all_hits()) <= MAX_HITS + MAX_HITS // 2  # the first ones and the latest
    assert len(scan.tail) <= (scan.tail.maxlen or 0)
    assert classify(lines()).category == "serving-oom"


WRAPPERS = [
    "vllm-1  | (Worker pid=8) ERROR 11-29 23:51:37 [x.py:1] ",  # docker compose
    # kubectl logs --timestamps
    "2025-06-01T10:00:00.123456789Z (EngineCore_DP0 pid=7) ERROR 11-29 23:51:37 [x.py:1] ",
    "Dec 01 11:12:12 gpu-node vllm[4242]: ",  # journald
    "(RayWorkerWrapper pid=9, ip=10.0.0.2) (VllmWorker rank=1 pid=10) ",  # Ray, nested
    "\x1b[1;36m(VllmWorker TP0 pid=8)\x1b[0m ",  # ANSI escapes
    " [36m(RayWorkerVllm pid=4773) [0m ",  # ANSI remnants without the escape byte
]


@pytest.mark.parametrize("wrapper", WRAPPERS, ids=["docker", "kubectl", "journald", "ray",
                                                    "ansi", "ansi-remnant"])
def test_wrappers_do_not_change_the_answer(wrapper: str) -> None:
    cls = classify(vllm_logs.HEALTHY + SERVING + "\n" + wrapper + OOM + "\n", exit_code=1)
    assert cls.category == "serving-oom"
    assert cls.evidence[0].text == OOM
    assert unwrap(wrapper + "x").endswith("x")


def test_a_line_wrapped_by_the_terminal_is_joined() -> None:
    log = ("(EngineCore pid=1) ERROR 08-12 03:12:29 [core.py:1] RuntimeError: The NVIDIA driver "
           "on your sys\ntem is too old (found version 12080).\n")
    assert classify(log, exit_code=1).category == "environment"


def test_every_rule_match_in_the_corpus_passes_the_cheap_trigger_test() -> None:
    for line in CORPUS.read_text("utf-8").splitlines():
        for piece in split_lines(json.loads(line)["log"]):
            text = unwrap(piece.text)
            if any(pat.search(text) for _, _, _, pat in RULES):
                assert may_match(text), text


def test_init_seen_and_no_response_yet_is_after_init_even_with_serving_frames() -> None:
    frames = ("(EngineCore pid=7) ERROR 11-29 23:49:17 [core.py:1512]   File \"/x/vllm/v1/engine/"
              "core.py\", line 9, in run_busy_loop\n")
    fatal = "EngineCore encountered a fatal error.\n"
    log = vllm_logs.HEAD16_DIES_AT_FIRST_REQUEST.replace(fatal, fatal + frames, 1)
    cls = classify(log, exit_code=0)
    assert (cls.category, cls.stage) == ("serving", "serving")
    assert cls.phase == "after init, before any successful response"


def test_the_engine_core_line_is_quoted_not_the_workers_own_report() -> None:
    # vLLM 0.32 live: each worker logs "WorkerProc hit an exception." before the engine core's
    # "EngineCore encountered a fatal error." (tests/live/test_lifecycle.py quotes the latter)
    worker = ("(Worker pid=12316) ERROR 11-29 23:49:17 [multiproc_executor.py:1063] WorkerProc "
              "hit an exception.\n")
    fatal = "(EngineCore pid=11944) ERROR 11-29 23:49:17 [core.py:1512] EngineCore encountered"
    log = vllm_logs.HEAD16_DIES_AT_FIRST_REQUEST.replace(fatal, worker + fatal, 1)
    assert worker in log
    cls = classify(log, exit_code=0)
    assert cls.evidence[0].text == "EngineCore encountered a fatal error."
