"""A proxy between the client and the server: burst detection, the proxy's own answers, and
how an unmeasurable TTFT reaches the summary, the typed run, the SLO check and the headroom
notes (pure logic; the real nginx is in tests/live/test_proxy_live.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_k3accept.checks.slo import SLO, check, unknown
from pytest_k3accept.evidence.kinds import LoadRun, SloJudgement
from pytest_k3accept.observe.endpoint.faults import describe_proxy_answer, proxy_of
from pytest_k3accept.observe.load import buffering, stats


@dataclass
class Rec:
    ok: bool = True
    ttft: float | None = 2.0
    itl: list[float] = field(default_factory=lambda: [0.0, 0.0001, 0.0])
    e2e: float | None = 2.001
    proxy: str | None = "nginx/1.22.1"
    stream: bool = True
    error_kind: str | None = None
    prompt_tokens: int | None = 10
    completion_tokens: int | None = 4
    cached_tokens: int | None = 0

    @property
    def tpot(self) -> float | None:
        return None if self.e2e is None or self.ttft is None else (self.e2e - self.ttft) / 3


def test_a_burst_needs_a_proxy_a_long_silence_and_enough_chunks() -> None:
    assert buffering.is_burst(Rec()) is True
    assert buffering.is_burst(Rec(proxy=None)) is None  # straight from the server: real TTFT
    assert buffering.is_burst(Rec(itl=[0.0])) is None  # two chunks say nothing
    assert buffering.is_burst(Rec(itl=[0.01, 0.02, 0.01])) is False  # streamed
    assert buffering.is_burst(Rec(ttft=0.001)) is False  # no silence before it
    assert buffering.is_burst(Rec(ok=False)) is None
    assert buffering.is_burst(Rec(stream=False)) is None


def test_half_the_streams_in_bursts_make_the_run_unreliable() -> None:
    streamed = Rec(itl=[0.01, 0.02, 0.01])
    assert buffering.judge([Rec(), streamed])["unreliable"].startswith(buffering.BUFFERED)
    assert buffering.judge([Rec(), streamed, streamed])["unreliable"] is None
    assert buffering.judge([])["unreliable"] is None


def test_a_buffered_run_reports_no_ttft_itl_tpot_and_the_slo_is_unknown() -> None:
    s = stats.summarize([Rec(), Rec()], 4.0)
    assert s["ttft"] is None and s["itl"] is None and s["tpot"] is None
    assert s["e2e"] is not None and s["buffered_streams"] == {"streams": 2, "bursts": 2}
    breaches = check(s, SLO.from_mapping({"ttft_p99": 5.0, "e2e_p99": 60.0}))
    assert unknown(breaches) and "buffers the stream" in str(breaches[0])
    good = check(s, SLO.from_mapping({"goodput": 0.1, "goodput_ttft": 5.0}), [Rec(), Rec()])
    assert unknown(good)
    real = check(s, SLO.from_mapping({"ttft_p99": 5.0, "e2e_p99": 0.5}))
    assert not unknown(real)  # an e2e breach is measured: a breach, not unknown
    plain = stats.summarize([Rec(proxy=None)], 2.0)
    assert plain["latency_unreliable"] is None and plain["ttft"] is not None


def test_typed_evidence_keeps_unknown() -> None:
    run = LoadRun("r1", "p", 1, 10, 2, 2, 0, latency_unreliable=buffering.BUFFERED)
    assert LoadRun.from_data(run.to_data()).latency_unreliable == buffering.BUFFERED
    assert LoadRun.from_data({k: v for k, v in run.to_data().items()
                              if k != "latency_unreliable"}).latency_unreliable is None
    judged = SloJudgement("r1", None, {"ttft_p99": 5.0}, ())
    assert SloJudgement.from_data(judged.to_data()).ok is None
    assert SloJudgement.from_data({"run_id": "r1", "breaches": []}).ok is True


def test_who_answered() -> None:
    page = "<html><head><title>502 Bad Gateway</title></head><center>nginx/1.22.1</center>"
    assert proxy_of({"server": "nginx/1.22.1"}) == "nginx/1.22.1"
    assert proxy_of({"server": "uvicorn"}) is None
    assert proxy_of({"server": "uvicorn", "via": "1.1 google"}) == "via 1.1 google"
    assert proxy_of({}, page) == "nginx/1.22.1"
    assert proxy_of({}, "upstream connect error or disconnect/reset before headers. "
                        "reset reason: connection failure, envoy") == "envoy"
    assert proxy_of({}, '{"error": {"message": "EngineCore encountered an issue"}}') is None
    assert proxy_of({}, "Bad Gateway") == "a proxy (unnamed)"
    assert proxy_of({"server": "\x1b[31mevil" + "x" * 500}) is not None  # cleaned, cut
    assert len(proxy_of({"server": "x" * 500}) or "") <= 120


def test_the_proxy_answers_are_worded_apart_from_vllm() -> None:
    for status, words in ((502, "could not get an answer"), (504, "read timeout"),
                          (503, "no healthy server"), (500, "proxy's log")):
        msg = describe_proxy_answer(status, "nginx/1.22.1", "http://h:1")
        assert msg.startswith(f"HTTP {status} from the proxy nginx/1.22.1 in front of "
                              "http://h:1, not from vLLM: ") and words in msg


def test_a_client_on_a_proxy_page_says_proxy(tmp_path: Any) -> None:
    from pytest_k3accept.observe.endpoint.client import K3Client, RequestResult

    client = K3Client.__new__(K3Client)
    client.base_url = "http://h:1"
    res = RequestResult(ok=False, status=502)
    client._fail_http(res, b"<html><center>nginx/1.22.1</center></html>", None)
    assert res.proxy == "nginx/1.22.1" and res.error.startswith("HTTP 502 from the proxy")
    res = RequestResult(ok=False, status=500, proxy="nginx/1.22.1")
    client._fail_http(res, b'{"error": {"message": "EngineCore encountered an issue."}}', None)
    assert res.error == "EngineCore encountered an issue."  # vLLM's own error, through nginx
