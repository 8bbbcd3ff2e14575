"""Startup timeline and log reader: real vLLM 0.32 log excerpts, older wordings, odd files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vllm_logs
from pytest_k3accept.observe.server.logread import (LogFollower, LogLine, LogReader, redact,
                                                    split_lines)
from pytest_k3accept.observe.server.observe import ServerWatch
from pytest_k3accept.observe.server.timeline import EVENTS, Timeline, line_time

ALL_BUT_FIRST = [k for k, _ in EVENTS if k != "first_response"]


# ---------------------------------------------------------------- timeline from real logs
def test_healthy_start_has_every_event_in_order_with_figures() -> None:
    tl = Timeline.from_lines(vllm_logs.HEALTHY)
    assert tl.missing() == []
    lines = [tl.events[k].lineno or 0 for k, _ in EVENTS]
    assert lines == sorted(lines), "events must appear in log order"
    kv = tl.events["kv_cache_sized"].data
    assert kv == {"tokens": 1_048_576, "max_model_len": 2048, "max_concurrency": 512.0}
    assert tl.events["engine_init_done"].data["seconds"] == 4.72
    assert tl.events["weights_loaded"].data["seconds"] == 0.01
    assert tl.events["api_listening"].data["address"] == "http://127.0.0.1:43461"
    assert tl.kv_memory_gib == 1.0 and tl.vllm_version == "0.32.0"
    # first response from the access log: the first 200 on a generation route, not /v1/models
    assert "POST /v1/chat/completions" in (tl.events["first_response"].line or "")
    assert tl.events["first_response"].source.startswith("server access log")


def test_log_timestamps_are_used_for_a_backlog_and_uvicorn_lines_have_none() -> None:
    tl = Timeline.from_lines(vllm_logs.HEALTHY)
    load, init = tl.events["load_start"], tl.events["engine_init_done"]
    assert load.source == init.source == "log timestamp"
    assert init.at is not None and load.at is not None and init.at - load.at == 6.0
    assert time.localtime(init.at)[1:6] == (11, 29, 23, 49, 54)
    assert tl.events["app_startup_complete"].at is None
    assert tl.init_seconds() == 25.0  # 23:49:29 (first API server line) -> 23:49:54


def test_failed_starts_list_what_is_missing_explicitly() -> None:
    tl = Timeline.from_lines(vllm_logs.WEIGHTS_DO_NOT_FIT)
    assert tl.has("load_start") and not tl.has("weights_loaded")
    assert tl.missing() == ALL_BUT_FIRST[2:] + ["first_response"]
    tl = Timeline.from_lines(vllm_logs.KV_TOO_SMALL_FOR_MAX_LEN)
    assert tl.has("weights_loaded") and tl.missing()[0] == "kv_cache_sized"
    assert tl.kv_memory_gib == 0.0
    assert tl.as_dict()["init_before_first_response"] is None


def test_head16_init_completed_before_it_died() -> None:
    tl = Timeline.from_lines(vllm_logs.HEAD16_DIES_AT_FIRST_REQUEST)
    assert tl.has("engine_init_done") and tl.missing() == ["first_response"]


def test_older_vllm_wordings() -> None:
    v010 = """\
INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version 0.10.1
INFO 05-01 10:00:01 [gpu_model_runner.py:1843] Starting to load model Qwen/Qwen3-8B...
INFO 05-01 10:00:20 [gpu_model_runner.py:1875] Model loading took 15.27 GiB and 18.4 seconds
INFO 05-01 10:00:25 [kv_cache_utils.py:833] GPU KV cache size: 45,664 tokens
INFO 05-01 10:00:25 [kv_cache_utils.py:837] Maximum concurrency for 32,768 tokens per request: 1.39x
INFO 05-01 10:00:40 [core.py:193] init engine (profile, create kv cache, warmup model) took 19.80 seconds
INFO 05-01 10:00:41 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000
INFO:     Application startup complete.
"""
    tl = Timeline.from_lines(v010)
    assert tl.vllm_version == "0.10.1"
    assert tl.events["weights_loaded"].data == {"gib": 15.27, "seconds": 18.4}
    assert tl.events["kv_cache_sized"].data == {"tokens": 45_664, "max_model_len": 32_768,
                                                "max_concurrency": 1.39}
    assert tl.events["engine_init_done"].data["seconds"] == 19.8
    assert tl.events["api_listening"].data["address"] == "http://0.0.0.0:8000"
    v0 = """\
INFO 03-27 23:19:00 api_server.py:258] vLLM API server version 0.4.0
INFO 03-27 23:19:10 model_runner.py:104] Loading model weights took 14.9595 GB
INFO 03-27 23:19:12 gpu_executor.py:94] # GPU blocks: 2000, # CPU blocks: 512
INFO 03-27 23:19:15 api_server.py:958] Starting vLLM API server on http://0.0.0.0:8000
"""
    tl = Timeline.from_lines(v0)
    assert tl.events["weights_loaded"].data == {"gib": 14.9595}
    assert tl.events["kv_cache_sized"].data == {"gpu_blocks": 2000}
    assert tl.missing() == ["load_start", "engine_init_done", "app_startup_complete",
                            "first_response"]


def test_multi_worker_lines_keep_the_last_weights_loaded_and_a_restart_resets() -> None:
    text = vllm_logs.HEALTHY.replace(
        "Loading weights took 0.01 seconds", "Loading weights took 0.01 seconds\n"
        "(Worker_TP1 pid=2) INFO 11-29 23:49:49 [default_loader.py:501] Loading weights took 0.02 "
        "seconds")
    tl = Timeline.from_lines(text)
    assert tl.events["weights_loaded"].data == {"seconds": 0.02, "count": 2}
    twice = Timeline.from_lines(vllm_logs.WEIGHTS_DO_NOT_FIT + vllm_logs.HEALTHY)
    assert twice.earlier_starts == 1 and twice.missing() == []
    assert twice.start_lineno > len(vllm_logs.WEIGHTS_DO_NOT_FIT.splitlines())


def test_plugin_events_and_ordering() -> None:
    tl = Timeline.from_lines(vllm_logs.HEAD16_DIES_AT_FIRST_REQUEST)
    init_at = tl.events["engine_init_done"].at
    assert init_at is not None
    tl.set_process_start(init_at - 30.5)
    assert tl.events["process_start"].source.startswith("plugin")
    assert tl.init_seconds() == 30.5
    assert tl.record_first_response(init_at + 5, detail="POST /v1/completions HTTP 200")
    assert not tl.record_first_response(init_at + 9), "a later success is not the first"
    assert tl.init_before_first_response() is True
    assert tl.record_first_response(init_at - 1)
    assert tl.init_before_first_response() is False


def test_line_time_formats() -> None:
    ref = time.mktime((2026, 1, 1, 0, 0, 5, 0, 0, -1))
    # a stamp from the last seconds of the previous year is placed in that year
    t = line_time("(EngineCore pid=1) INFO 12-31 23:59:58 [core.py:1] x", ref)
    assert t is not None and ref - t == 7.0
    assert line_time("2026-11-29T23:43:18.5Z INFO x", ref) == 1795995798.5
    assert line_time("2026-11-29T23:43:18+01:00 x", ref) == 1795995798 - 3600
    assert line_time("INFO:     Application startup complete.", ref) is None


# ---------------------------------------------------------------- reader
def test_reader_incremental_partial_lines_and_live_flag(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    reader = LogReader(path)
    assert reader.poll() == [] and "does not exist" in reader.notes[0]
    path.write_bytes(b"one\ntw")
    assert [ln.text for ln in reader.poll()] == ["one"]
    with open(path, "ab") as fh:
        fh.write(b"o\n\x1b[32mINFO\x1b[0m three\rthree and a half\n")
    lines = reader.poll()
    assert [(ln.lineno, ln.text) for ln in lines] == [(2, "two"), (3, "INFO three"),
                                                      (3, "three and a half")]
    assert all(ln.live for ln in lines)
    with open(path, "ab") as fh:
        fh.write(b"no newline yet")
    assert reader.poll() == []
    assert [ln.text for ln in reader.poll(final=True)] == ["no newline yet"]


def test_reader_backlog_is_not_live(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text("old\n")
    reader = LogReader(path)
    assert [ln.live for ln in reader.poll()] == [False]


def test_reader_truncation_rotation_and_bad_bytes(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(b"a\nb\nc\n")
    reader = LogReader(path)
    assert len(reader.poll()) == 3
    path.write_bytes(b"x\n")  # truncated and rewritten (copytruncate)
    assert [ln.text for ln in reader.poll()] == ["x"]
    assert "shrank" in reader.notes[-1] and str(path) in reader.notes[-1]
    with open(path, "ab") as fh:
        fh.write(b"last of old\n")
    os.rename(path, tmp_path / "server.log.1")
    path.write_bytes(b"caf\xe9 \xff\n")
    lines = reader.poll()
    assert [ln.text for ln in lines] == ["last of old", "caf\ufffd \ufffd"]
    assert lines[0].lineno < lines[1].lineno
    assert any("rotated" in n for n in reader.notes)
    assert any("not UTF-8" in n for n in reader.notes)
    reader.close()


def test_reader_on_a_directory_and_unreadable_file_notes_not_raises(tmp_path: Path) -> None:
    reader = LogReader(tmp_path)
    assert reader.poll() == [] and "not a regular file" in reader.notes[0]


def test_follower_keeps_head_and_tail_and_survives_bad_callbacks(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text("".join(f"line {i}\n" for i in range(1, 101)))
    seen: list[int] = []

    def broken(line: LogLine) -> None:
        seen.append(line.lineno)
        raise ValueError("consumer bug")

    follower = LogFollower(LogReader(path), head=10, tail=20, callbacks=[broken])
    follower.stop()
    kept = [ln.lineno for ln in follower.lines()]
    assert kept == list(range(1, 11)) + list(range(81, 101)) and follower.dropped == 70
    assert len(seen) == 100 and follower.errors and "consumer bug" in follower.errors[0]


def test_secrets_never_reach_lines() -> None:
    line = ("(APIServer pid=1) INFO 11-29 23:49:29 [api_utils.py:286] non-default args: "
            "{'api_key': ['sk-live-1234567890abcdefgh'], 'max_num_batched_tokens': 8192}")
    text = split_lines(line)[0].text
    assert "1234567890" not in text and "'max_num_batched_tokens': 8192" in text
    assert redact("env HF_TOKEN=hf_abcdefghijklmnopqrstuv vllm serve --api-key s3cret") == \
        "env HF_TOKEN=*** vllm serve --api-key ***"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks=st.lists(st.one_of(st.binary(max_size=300),
                                 st.sampled_from([vllm_logs.HEALTHY.encode()[:900],
                                                  b"\r", b"\n", b"\xff\xfe", b"\x1b[31m"])),
                       max_size=12),
       cut=st.integers(min_value=0, max_value=5000))
def test_reader_never_crashes_on_arbitrary_growth_and_truncation(
        tmp_path_factory: pytest.TempPathFactory, chunks: list[bytes], cut: int) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "server.log"
    reader = LogReader(path)
    tl = Timeline()
    numbers: list[int] = []
    for i, chunk in enumerate(chunks):
        mode = "wb" if i and i % 5 == 0 else "ab"  # now and then the file starts over
        with open(path, mode) as fh:
            fh.write(chunk[: cut or None] if i % 3 == 2 else chunk)
        for line in reader.poll():
            tl.feed(line)
            numbers.append(line.lineno)
            assert "\n" not in line.text and "\x1b" not in line.text
    for line in reader.poll(final=True):
        tl.feed(line)
        numbers.append(line.lineno)
    assert numbers == sorted(numbers)
    assert set(tl.missing()) <= {k for k, _ in EVENTS}


def test_watch_renders_every_event_and_marks_missing_ones(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(vllm_logs.KV_TOO_SMALL_FOR_MAX_LEN)
    watch = ServerWatch(path).start()
    cls = watch.stop()
    text = "\n".join(watch.render())
    assert cls.category == "kv-capacity-at-init"
    assert "KV cache sized                 MISSING (not observed)" in text
    assert "model load start" in text and "classification: kv-capacity-at-init" in text
    assert "To serve at least one request with the model's max seq len (4096)" in text
    assert "advice: " in text and "max-model-len" in text


ENGINE_DEAD_AT_SHUTDOWN = (
    "(APIServer pid=11266) ERROR 11-30 04:49:01 [async_llm.py:906] vllm.v1.engine.exceptions."
    "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
    "cause.\n")


class _Process:
    """Stands in for a launched ServerProcess: ``stop()`` writes what vLLM writes when the
    engine core gets SIGTERM before the API server does."""

    def __init__(self, log: Path, returncode: int | None) -> None:
        self.log, self.returncode, self.stopped = log, returncode, False

    def stop(self) -> int | None:
        self.stopped = True
        with self.log.open("a") as fh:
            fh.write(ENGINE_DEAD_AT_SHUTDOWN)
        return -15


def _healthy_log(tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    healthy = vllm_logs.HEALTHY.split("(Worker pid=12316) ERROR")[0]  # up to the first answer
    assert "EngineDead" not in healthy and "Application startup complete" in healthy
    path.write_text(healthy)
    return path


def test_lines_written_while_the_plugin_stops_its_server_are_not_evidence(
        tmp_path: Path) -> None:
    path = _healthy_log(tmp_path)
    process = _Process(path, returncode=None)
    watch = ServerWatch(path, mode="launch", process=process).start()
    cls = watch.stop()
    assert process.stopped and "EngineDeadError" in path.read_text()
    assert cls.category == "none", cls.summary()
    assert any("1 log line(s) written while the plugin stopped the server" in n
               for n in cls.notes), cls.notes


def test_a_server_that_died_on_its_own_keeps_its_last_lines_as_evidence(
        tmp_path: Path) -> None:
    path = _healthy_log(tmp_path)
    with path.open("a") as fh:
        fh.write(ENGINE_DEAD_AT_SHUTDOWN)
    watch = ServerWatch(path, mode="launch", process=_Process(path, returncode=1)).start()
    cls = watch.stop()
    assert cls.category == "serving" and cls.rule == "engine-dead", cls.summary()
    assert watch.shutdown_after is None and not any("stopped the server" in n
                                                     for n in cls.notes)


# ---------------------------------------------------------------- the plugin, without a server
USES_SERVER = '''
import pytest

def test_uses_server(k3_server):
    pass

@pytest.mark.k3_startup(max_init_s=600)
def test_startup():
    pass
'''


def test_without_launch_or_log_lifecycle_checks_skip_with_the_reason(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_it=USES_SERVER)
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*no server observed: pass --k3-launch 'COMMAND'*"
                                 "--k3-server-log PATH*"])
    assert "k3accept server timeline" not in result.stdout.str()
    result = pytester.runpytest("--k3-require", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(["*no server observed*--k3-require makes this an error*"])


def test_server_log_of_a_failed_start_is_classified_and_shown(pytester: pytest.Pytester,
                                                               tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(vllm_logs.KV_TOO_SMALL_FOR_MAX_LEN)
    pytester.makepyfile(test_it='''
def test_classified(k3_server):
    cls = k3_server.classify()
    assert cls.category == "kv-capacity-at-init"
    assert k3_server.timeline.has("weights_loaded")
    assert not k3_server.timeline.has("engine_init_done")
''')
    result = pytester.runpytest("--k3-server-log", str(log), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*k3accept server timeline*",
        "mode: observed log; log: *vllm.log",
        "  model load start *log timestamp*",
        "  engine init done * MISSING (not observed)",
        "classification: kv-capacity-at-init (KV-cache sizing*",
        "  evidence line *: ValueError: To serve at least one request*"])


def test_server_log_startup_check_orders_backlog_lines_by_position(pytester: pytest.Pytester,
                                                                   tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(vllm_logs.HEALTHY)
    pytester.makepyfile(test_it='''
import pytest

@pytest.mark.k3_startup
def test_startup():
    pass

@pytest.mark.k3_startup(max_init_s=5)
def test_startup_too_slow():
    pass
''')
    result = pytester.runpytest("--k3-server-log", str(log), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*k3_startup: engine init completed 25.0 s after process "
                                 "start, more than max_init_s=5*"])
