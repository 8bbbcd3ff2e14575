"""Other clients of the server: a run's own work against the server's counters over it.

The server figures come from REAL pages of the data-parallel testbed
(``tests/data/metrics/``: 8 requests, 2 x 2472 prompt and 2 x 1600 generated tokens between
the idle and the after-load page); the run summaries are what the runner would have sent.
The live proof with a second client is ``tests/live/test_shared_live.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept.checks import headroom
from pytest_k3accept.evidence.kinds import LoadRun
from pytest_k3accept.observe.load import shared
from pytest_k3accept.observe.load.profile import LoadProfile
from pytest_k3accept.observe.load.result import LoadResult
from pytest_k3accept.observe.load.stats import summarize
from pytest_k3accept.observe.metrics import Snapshot

DATA = Path(__file__).parent.parent / "data" / "metrics"


def server_view() -> dict[str, Any]:
    before = Snapshot.parse((DATA / "vllm-0.32-dp2-idle.txt").read_text(), at=0.0)
    after = Snapshot.parse((DATA / "vllm-0.32-dp2-after-load.txt").read_text(), at=10.0)
    return (after - before).as_dict()


def summary(requests: int, prompt: int, completion: int, errors: int = 0) -> dict[str, Any]:
    return {"requests": requests, "ok": requests - errors, "errors": errors,
            "prompt_tokens": prompt, "completion_tokens": completion}


def test_a_run_alone_is_not_shared() -> None:
    got = shared.compare(summary(8, 4944, 3200), server_view())
    assert got["shared"] is False and got["other_requests"] == 0
    assert got["extra_prompt_tokens"] == 0 and got["extra_generation_tokens"] == 0
    assert got["note"] == ""


def test_more_finished_requests_than_sent_is_shared_and_counted() -> None:
    # the run sent 6 of the 8 requests the server finished: 2 were another client's
    got = shared.compare(summary(6, 3708, 2400), server_view())
    assert got["shared"] is True and got["other_requests"] == 2
    assert got["extra_prompt_tokens"] == 4944 - 3708
    assert got["note"] == ("the server served 2 other requests during this run: latency and "
                           "KV figures include them")


def test_tokens_of_a_request_still_running_mark_the_run_shared() -> None:
    # the server finished exactly what the run sent, yet generated 400 tokens more: another
    # client's request was still streaming when the run ended
    got = shared.compare(summary(8, 4944, 2800), server_view())
    assert got["shared"] is True and got["other_requests"] == 0
    assert got["extra_generation_tokens"] == 400
    assert "did more work during this run than this run sent" in got["note"]


def test_small_token_differences_and_failed_requests_are_not_other_clients() -> None:
    # within the slack (5 %, at least 32 tokens): not material
    assert shared.compare(summary(8, 4944, 3180), server_view())["shared"] is False
    # a failed request's tokens are in no usage: the token check is not made, only requests
    got = shared.compare(summary(8, 4944, 2800, errors=1), server_view())
    assert got["shared"] is False and got["other_requests"] == 0


def test_unknown_without_counters_never_alone() -> None:
    assert shared.compare(summary(8, 1, 1), None)["shared"] is None
    empty = Snapshot.from_samples([], at=0.0)
    got = shared.compare(summary(8, 1, 1), (empty - empty).as_dict())
    assert got["shared"] is None and got["other_requests"] is None
    assert "exports no request or token counters" in got["note"]


def result_with(srv: dict[str, Any], requests: int = 6) -> LoadResult:
    srv = {**srv, "peak_kv_usage": 0.5, "peak_kv_from": "samples", "gauge_samples": 3,
           "sustained_waiting": 0.0, "per_engine": {}}
    sent = summary(requests, 618 * requests, 400 * requests)  # each request: 618 + 400
    srv["other_clients"] = shared.compare(sent, srv)
    return LoadResult(LoadProfile(name="agents"), [], 1.0, 0.0, "requests", 0,
                      {**summarize([], 1.0), **sent},
                      {"mean": 0.0, "max": 0.0}, "http://x", "closed", {}, server=srv)


def test_result_record_and_judgements_say_the_run_was_shared() -> None:
    result = result_with(server_view())
    assert result.shared is True
    note = "the server served 2 other requests during this run"
    assert f"; SHARED: {note}" in result.line()
    run = result.evidence("run-1", "default")
    assert run.shared is True and run.other_requests == 2
    assert LoadRun.from_data(run.to_data()) == run  # the record keeps it
    verdict = headroom.decide(result, max_waiting=None, max_preemptions=10)
    assert verdict.ok is True and verdict.shared is True
    assert f"[shared server: {note}" in verdict.line()
    assert any(note in n for n in verdict.notes)
    assert verdict.as_dict()["shared"] is True


def test_a_run_alone_says_nothing_and_an_older_record_reads_unknown() -> None:
    result = result_with(server_view(), requests=8)
    assert result.shared is False and "SHARED" not in result.line()
    assert "shared server" not in headroom.decide(result, max_waiting=None,
                                                  max_preemptions=10).line()
    old = result.evidence("run-1", "default").to_data()
    del old["shared"], old["other_requests"]
    assert LoadRun.from_data(old).shared is None


@pytest.mark.parametrize("bad", ["yes", 1])
def test_shared_field_is_typed(bad: Any) -> None:
    run = result_with(server_view()).evidence("run-1", "default").to_data()
    with pytest.raises(TypeError, match="LoadRun.shared"):
        LoadRun.from_data({**run, "shared": bad})


def test_headroom_line_lists_each_engines_free_kv() -> None:
    srv = {**server_view(), "peak_kv_usage": 0.952, "peak_kv_from": "samples",
           "gauge_samples": 4, "sustained_waiting": 0.0,
           "per_engine": {"0": {"peak_kv_usage": 0.952}, "1": {"peak_kv_usage": 0.857}}}
    result = result_with(srv, requests=8)
    result.server = srv
    verdict = headroom.decide(result, max_waiting=None, max_preemptions=10)
    assert verdict.engine_kv == {"0": 0.952, "1": 0.857}
    assert ("free KV at peak 4.8% (fullest engine; engine 0 4.8% free, engine 1 14.3% free)"
            in verdict.line())
