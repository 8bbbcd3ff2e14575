"""Discovery faults against a NOT-vLLM stub: keys, models, odd answers, bounded waiting."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fault_stub import StubServer, models
from pytest_k3accept.observe.endpoint.discover import EndpointError, _models, discover
from pytest_k3accept.observe.server.launch import free_port


def test_non_vllm_server_is_discovered_as_not_vllm() -> None:
    with StubServer() as stub:
        ep = discover(stub.base_url)
    assert ep.model == "stub-model" and ep.version is None and not ep.is_vllm
    assert ep.max_model_len is None and ep.root is None


@pytest.mark.parametrize("key,word", [(None, "is missing"), ("wrong", "was rejected")])
def test_401_names_the_variable_to_set(key: str | None, word: str) -> None:
    with StubServer() as stub:
        stub.route("GET", "/v1/models", lambda r: r.send(401, b'{"error":"Unauthorized"}'))
        with pytest.raises(EndpointError) as err:
            discover(stub.base_url, api_key=key, api_key_env="MY_KEY")
    assert err.value.kind == "auth"
    assert f"HTTP 401: the API key {word}" in str(err.value) and "MY_KEY" in str(err.value)
    assert "wrong" not in str(err.value)  # the key itself never appears


def test_wrong_model_lists_what_is_served_but_not_endlessly() -> None:
    many = {"data": [{"id": f"m{i}"} for i in range(100)]}
    with StubServer() as stub:
        stub.route("GET", "/v1/models", lambda r: r.send(200, json.dumps(many).encode()))
        with pytest.raises(EndpointError) as err:
            discover(stub.base_url, model="kimi-k3")
    msg = str(err.value)
    assert err.value.kind == "model" and "'kimi-k3' is not served" in msg
    assert "'m0'" in msg and "... 80 more" in msg and "Fix --k3-model" in msg


@pytest.mark.parametrize("status,body,kind,words", [
    (200, b"<html><body>Welcome to nginx</body></html>", "protocol", "not return an OpenAI"),
    (404, b"not found", "protocol", "without /v1"),
    (503, b"starting", "unready", "up but not ready"),
    (200, b'{"data": []}', "model", "serves no model"),
])
def test_odd_model_lists(status: int, body: bytes, kind: str, words: str) -> None:
    with StubServer() as stub:
        stub.route("GET", "/v1/models", lambda r: r.send(status, body))
        with pytest.raises(EndpointError) as err:
            discover(stub.base_url)
    assert err.value.kind == kind and words in str(err.value)


def test_version_without_a_version_is_none() -> None:
    with StubServer() as stub:
        stub.route("GET", "/version", lambda r: r.send(200, b"{}"))
        assert discover(stub.base_url).version is None


def test_huge_discovery_answer_is_not_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_k3accept.observe.endpoint.discover as endpoint

    monkeypatch.setattr(endpoint, "MAX_DISCOVERY_BODY", 100_000)
    with StubServer() as stub:
        stub.route("GET", "/v1/models", lambda r: r.send(200, b"[" * 1_000_000))
        with pytest.raises(EndpointError, match="more than 0 MiB"):
            discover(stub.base_url)


def test_unreachable_without_wait_fails_at_once() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(EndpointError) as err:
        discover(url)
    assert time.monotonic() - t0 < 3
    assert err.value.kind == "unreachable" and "connection refused" in str(err.value)


def test_wait_is_bounded_and_says_how_long() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(EndpointError) as err:
        discover(url, wait=1.5)
    assert 1.4 < time.monotonic() - t0 < 30  # bounded (a loaded 2-core machine took > 5 s)
    assert "was not ready after waiting 1." in str(err.value) and "(limit 1.5 s)" in str(err.value)


def test_wait_succeeds_when_the_server_comes_up_late() -> None:
    calls: list[float] = []

    def late(req: Any) -> None:
        calls.append(time.monotonic())
        if len(calls) < 3:
            req.send(503, b"starting")
        else:
            models(req)

    with StubServer() as stub:
        stub.route("GET", "/v1/models", late)
        ep = discover(stub.base_url, wait=10)
    assert ep.model == "stub-model" and len(calls) == 3


def test_wait_does_not_retry_a_rejected_key() -> None:
    with StubServer() as stub:
        stub.route("GET", "/v1/models", lambda r: r.send(403, b"forbidden"))
        t0 = time.monotonic()
        with pytest.raises(EndpointError, match="HTTP 403"):
            discover(stub.base_url, wait=30)
    assert time.monotonic() - t0 < 3


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                       lambda k: st.lists(k, max_size=3) | st.dictionaries(st.text(max_size=5),
                                                                           k, max_size=3),
                       max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(st.integers(100, 599), st.one_of(st.binary(max_size=64), JSONISH.map(
    lambda v: json.dumps(v).encode()), st.fixed_dictionaries(
        {"data": st.lists(st.fixed_dictionaries({}, optional={"id": JSONISH}), max_size=3)}
    ).map(lambda v: json.dumps(v).encode())))
def test_any_model_list_answer_gives_entries_or_a_clear_error(status: int, raw: bytes) -> None:
    try:
        data = _models("http://h:1", status, raw, None, "K")
    except EndpointError as exc:
        assert exc.kind in ("auth", "unready", "protocol", "model") and str(exc)
    else:
        assert data and all(isinstance(m["id"], str) for m in data)


def test_stub_started_on_the_second_try_port_is_reached() -> None:
    """``wait`` survives refused connections until a server binds the port."""
    port = free_port()
    done = threading.Event()
    result: dict[str, Any] = {}

    def ask() -> None:
        try:
            result["ep"] = discover(f"http://127.0.0.1:{port}", wait=15)
        except EndpointError as exc:
            result["err"] = exc
        done.set()

    threading.Thread(target=ask, daemon=True).start()
    time.sleep(1.5)
    with StubServer(port=port):
        assert done.wait(15)
    assert "ep" in result, result.get("err")
