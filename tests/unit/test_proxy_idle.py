"""A proxy's idle timeout cutting a stream (issue 17): a stream through a proxy that is lost
after a silence of a second or more is worded as the proxy's cut, naming it; a stream lost
at once (the server behind it died) keeps the lost-connection message. The real nginx case
is tests/live/test_proxy_live.py::test_the_proxys_idle_timeout_cutting_a_stream_is_the_proxys."""

from __future__ import annotations

from pytest_k3accept.observe.endpoint.client import RequestResult
from pytest_k3accept.observe.endpoint.faults import PROXY_IDLE_S, describe_exception

URL = "http://127.0.0.1:8080/v1/chat/completions"


def _lost() -> Exception:
    exc = ConnectionError("Not enough data to satisfy transfer length header.")
    return exc


def test_a_stream_cut_after_a_silence_through_a_proxy_is_the_proxys_cut() -> None:
    res = RequestResult(ok=False, status=200, chunks=74, stream=True, proxy="nginx/1.22.1")
    msg = describe_exception(_lost(), "connection", res, URL, 60.0, silence=3.04)
    assert msg.startswith(f"the proxy nginx/1.22.1 in front of {URL} cut the stream after "
                          "HTTP 200 and 74 stream chunks (partial output kept), 3.0 s after "
                          "its last token (ConnectionError: "), msg
    assert "not vLLM" in msg and "proxy_read_timeout" in msg


def test_a_stream_lost_at_once_or_without_a_proxy_keeps_the_lost_connection_message() -> None:
    through = RequestResult(ok=False, status=200, chunks=5, stream=True, proxy="nginx/1.22.1")
    direct = RequestResult(ok=False, status=200, chunks=5, stream=True)
    for res, silence in ((through, PROXY_IDLE_S / 100), (direct, 30.0), (through, None)):
        msg = describe_exception(_lost(), "connection", res, URL, 60.0, silence=silence)
        assert msg.startswith(f"the connection to {URL} was lost after HTTP 200"), msg
        assert ("through the proxy nginx/1.22.1" in msg) == (res.proxy is not None)
