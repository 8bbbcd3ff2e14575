"""observe/endpoint/bodies.py: a body's bytes are exactly the JSON encoding, long prompts
encoded once (the same bytes object for the same body), the cache bounded."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from pytest_k3accept.observe.endpoint import bodies


def reference(body: Any) -> bytes:
    """What the client sent before the cache (and must still send)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    bodies.clear()
    yield
    bodies.clear()


LONG_TEXT = "héllo \"wörld\"\n\t\u2028 " * (bodies.LONG // 8)


@pytest.mark.parametrize("body", [
    {"model": "m", "messages": [{"role": "user", "content": "short"}], "max_tokens": 4},
    {"model": "m", "messages": [{"role": "user", "content": LONG_TEXT}], "stream": True,
     "stream_options": {"include_usage": True}, "temperature": 0.5, "stop": None},
    {"model": "m", "messages": [{"role": "system", "content": LONG_TEXT},
                                {"role": "user", "content": [
                                    {"type": "text", "text": LONG_TEXT + "x"}]}],
     "tools": ({"type": "function", "function": {"name": "f", "parameters": {}}},)},
    {"model": "m", "prompt": LONG_TEXT, "n": 1, "flag": True},
])
def test_bytes_equal_the_json_encoding(body: dict[str, Any]) -> None:
    assert bodies.encode_body(body) == reference(body)
    assert bodies.encode_body(dict(body)) == reference(body)  # from the cache


def test_a_long_prompt_is_encoded_once_and_shared() -> None:
    msgs = [{"role": "user", "content": LONG_TEXT}]
    first = bodies.encode_body({"model": "m", "messages": msgs, "stream": True})
    again = bodies.encode_body({"model": "m", "messages": msgs, "stream": True})
    assert again is first  # no encode, no copy: in-flight requests share one buffer


def test_a_changed_field_or_another_string_is_not_served_stale() -> None:
    msgs = [{"role": "user", "content": LONG_TEXT}]
    a = bodies.encode_body({"model": "m", "messages": msgs, "max_tokens": 1})
    b = bodies.encode_body({"model": "m", "messages": msgs, "max_tokens": 2})
    other = "".join(reversed(LONG_TEXT))
    c = bodies.encode_body({"model": "m", "messages": [{"role": "user", "content": other}],
                            "max_tokens": 1})
    assert b"\"max_tokens\":1" in a and b"\"max_tokens\":2" in b
    assert c == reference({"model": "m", "messages": [{"role": "user", "content": other}],
                           "max_tokens": 1})


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bodies, "CACHE_BYTES", 3 * len(LONG_TEXT.encode()))
    for i in range(10):
        body = {"i": i, "content": LONG_TEXT + str(i)}
        assert bodies.encode_body(body) == reference(body)
    assert 0 < bodies._cached_bytes <= bodies.CACHE_BYTES
    assert len(bodies._cache) < 10


def test_the_placeholder_in_a_short_string_falls_back_to_a_plain_encode() -> None:
    body = {"a": bodies._TAG, "content": LONG_TEXT}
    assert bodies.encode_body(body) == reference(body)


def test_nan_is_still_refused() -> None:
    with pytest.raises(ValueError):
        bodies.encode_body({"content": LONG_TEXT, "x": float("nan")})
