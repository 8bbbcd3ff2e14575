"""The malformed requests of the robustness check, as Hypothesis strategies.

A :class:`Probe` starts from a small VALID request (``max_tokens`` 4, so accepted ones are
cheap) and applies one to three changes: a field set to a wrong type or an edge value
(negative, zero, 2**63, 1e308, NaN, lone surrogate, HTML), a field dropped, unknown fields,
broken ``messages`` (empty, invalid role, content of the wrong type, not a list ...), broken
``prompt`` (empty, token ids out of range, nested lists), a prompt twice the model's context,
or a body that is not JSON at all. Shrinking reduces both the number of changes and their
values, so a failure is reported with the smallest request that still fails.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Sequence

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
#: names accepted by ``k3_robustness(paths=...)``
PATHS = {"chat": CHAT, "completions": COMPLETIONS}

#: sampling / request fields that get wrong types and edge values
FIELDS = ("model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
          "n", "stream", "stream_options", "stop", "seed", "presence_penalty",
          "frequency_penalty", "repetition_penalty", "logit_bias", "logprobs", "top_logprobs",
          "min_tokens", "user", "response_format", "tools", "tool_choice", "echo",
          "skip_special_tokens", "truncate_prompt_tokens", "structured_outputs",
          "prompt_logprobs", "allowed_token_ids", "stop_token_ids", "bad_words", "min_p",
          "chat_template_kwargs", "priority")
#: numeric fields that also get out-of-range numbers on their own (more often than FIELDS)
NUMERIC = ("max_tokens", "max_completion_tokens", "n", "temperature", "top_p", "top_k", "seed",
           "min_tokens", "top_logprobs", "presence_penalty", "frequency_penalty", "priority")
#: out-of-range numbers: negative, huge, beyond 64 bits, beyond float range
EXTREMES = (-1, -(2**31), 2**31, 2**63, 10**30, 1e308, -1e308)


@dataclass(frozen=True)
class Probe:
    """One generated request: path, JSON body (or raw bytes) and the changes made."""

    path: str
    body: Any
    changes: tuple[str, ...] = ()

    @property
    def raw(self) -> bytes:
        """The bytes sent (JSON with NaN/Infinity allowed, ASCII-escaped)."""
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body, allow_nan=True).encode()

    def shown(self) -> str:
        """The body for a human: long strings and lists abbreviated, bytes as a repr."""
        if isinstance(self.body, bytes):
            return f"(not JSON) {self.body[:300]!r}"
        return json.dumps(_abbrev(self.body), allow_nan=True)

    def curl(self, base_url: str, api_key_env: str | None = None) -> str:
        """A shell line that sends this probe again. The key is never in it: with
        ``api_key_env`` a note names the variable that holds the bearer token."""
        auth = (f"   (plus the bearer token in the environment variable {api_key_env})"
                if api_key_env else "")
        data = self.raw
        if len(data) > 2000 or not _printable(data):
            return (f"curl -s -X POST {base_url}{self.path} -H 'Content-Type: application/"
                    f"json' --data-binary @probe.json   (probe.json: the body above, "
                    f"{len(data)} bytes){auth}")
        return (f"curl -s -X POST {base_url}{self.path} -H 'Content-Type: application/json'"
                f" --data-binary {shlex.quote(data.decode('ascii'))}{auth}")


def _printable(data: bytes) -> bool:
    return all(32 <= b < 127 for b in data)


def _abbrev(value: Any) -> Any:
    if isinstance(value, str) and len(value) > 120:
        return f"{value[:60]}... [{len(value)} characters]"
    if isinstance(value, list):
        head = [_abbrev(v) for v in value[:10]]
        return head + ([f"... [{len(value)} items]"] if len(value) > 10 else [])
    if isinstance(value, dict):
        return {k: _abbrev(v) for k, v in value.items()}
    return value


def _strategies() -> Any:
    from hypothesis import strategies as st

    return st


def edge_values() -> Any:
    """JSON values of every type, weighted to edge cases."""
    st = _strategies()
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-10, 10),
        st.sampled_from([-1, 0, 2**31, -(2**31), 2**63, 10**30, -(10**30)]),
        st.sampled_from([0.0, -0.5, 1e308, -1e308, 5e-324, float("nan"), float("inf")]),
        st.text(max_size=16),
        st.sampled_from(["", "\ud800", "\x00", "<script>alert(1)</script>", "null", "-1"]))
    return st.recursive(scalars, lambda kids: st.lists(kids, max_size=3)
                        | st.dictionaries(st.text(max_size=8), kids, max_size=3),
                        max_leaves=6)


Change = tuple[str, Callable[[dict[str, Any]], Any]]


def _set(key: str, value: Any) -> Change:
    def apply(body: dict[str, Any]) -> Any:
        body[key] = value
        return body
    return f"{key}={_short(value)}", apply


def _drop(key: str) -> Change:
    def apply(body: dict[str, Any]) -> Any:
        body.pop(key, None)
        return body
    return f"no {key}", apply


def _short(value: Any) -> str:
    text = json.dumps(_abbrev(value), allow_nan=True)
    return text if len(text) <= 60 else text[:57] + "..."


def changes(path: str, max_model_len: int | None) -> Any:
    """One change to a valid request for ``path``."""
    st = _strategies()
    edge = edge_values()
    long_prompt = "word " * (2 * (max_model_len or 8192) + 16)
    wrong_type = st.one_of(st.text(max_size=8), st.booleans(), st.lists(st.integers(), max_size=2),
                           st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
    common = [
        st.builds(_set, st.sampled_from(NUMERIC), st.sampled_from(EXTREMES)),
        st.builds(_set, st.sampled_from(NUMERIC), wrong_type),
        st.builds(_set, st.sampled_from(FIELDS), edge),
        st.builds(_drop, st.sampled_from(["model", "messages" if path == CHAT else "prompt"])),
        st.builds(_set, st.text(min_size=1, max_size=12).filter(
            lambda k: k not in FIELDS and k not in ("messages", "prompt")), edge),
    ]
    if path == CHAT:
        role = st.one_of(st.sampled_from(["", "bogus", "USER", "function", "tool",
                                          "developer"]), edge)
        message = st.one_of(
            st.fixed_dictionaries({"role": role, "content": st.just("hi")}),
            st.fixed_dictionaries({"role": st.just("user"), "content": edge}),
            st.fixed_dictionaries({"role": st.just("user")}),
            st.fixed_dictionaries({"content": st.just("hi")}),
            st.fixed_dictionaries({"role": st.just("user"), "content": st.just("hi"),
                                   "name": edge, "tool_calls": edge}),
            edge)
        specific = [
            st.builds(_set, st.just("messages"), st.lists(message, max_size=3)),
            st.builds(_set, st.just("messages"), edge),
            st.just(_set("messages", [{"role": "user", "content": long_prompt}])),
        ]
    else:
        token = st.one_of(st.integers(0, 50), st.sampled_from([-1, 2**31, 10**9, 2**63]))
        specific = [
            st.builds(_set, st.just("prompt"), st.one_of(
                st.lists(token, max_size=4), st.lists(st.lists(token, max_size=3), max_size=2),
                st.lists(edge, max_size=3), edge)),
            st.just(_set("prompt", long_prompt)),
        ]
    return st.one_of(*common, *specific)


def probes(model: str, paths: Sequence[str], max_model_len: int | None = None) -> Any:
    """Strategy of :class:`Probe` for ``paths`` (some paths of :data:`PATHS`)."""
    st = _strategies()
    raw = st.one_of(st.sampled_from([b"", b"{", b"null", b"[]", b'"x"', b"1", b"{}",
                                     b'{"model": ', b"\xff\xfe", b"<html>"]),
                    st.binary(max_size=32))

    lists = {p: st.lists(changes(p, max_model_len), min_size=1, max_size=3) for p in paths}

    @st.composite  # type: ignore[untyped-decorator]
    def build(draw: Any) -> Probe:
        path = draw(st.sampled_from(list(paths)))
        if draw(st.integers(0, 9)) == 0:
            return Probe(path, draw(raw), ("body is not a JSON object",))
        body: Any = ({"model": model, "messages": [{"role": "user", "content": "hi"}],
                      "max_tokens": 4} if path == CHAT else
                     {"model": model, "prompt": "hi", "max_tokens": 4})
        names = []
        for name, apply in draw(lists[path]):
            body = apply(body)
            names.append(name)
        return Probe(path, body, tuple(names))

    return build()


def edge_probes(model: str, paths: Sequence[str], max_model_len: int | None = None,
                ) -> list[Probe]:
    """The deterministic sweep run before the random search: each a valid request with ONE
    change (every numeric field x every extreme, empty/invalid messages and prompts, an
    over-long prompt, non-JSON bodies), so a failing one is already minimal."""
    long_prompt = "word " * (2 * (max_model_len or 8192) + 16)
    out: list[Probe] = []
    for path in paths:
        base: dict[str, Any] = ({"model": model, "messages": [{"role": "user", "content": "hi"}],
                                 "max_tokens": 4} if path == CHAT else
                                {"model": model, "prompt": "hi", "max_tokens": 4})
        one: list[Change] = [_set(f, v) for f in NUMERIC for v in EXTREMES]
        if path == CHAT:
            one += [_set("messages", []), _set("messages", "hi"), _drop("messages"),
                    _set("messages", [{"role": "bogus", "content": "hi"}]),
                    _set("messages", [{"role": "user", "content": 5}]),
                    _set("messages", [{"role": "user", "content": "\ud800"}]),
                    _set("messages", [{"role": "user", "content": long_prompt}])]
        else:
            one += [_set("prompt", ""), _set("prompt", []), _set("prompt", [-1]),
                    _set("prompt", [2**63]), _set("prompt", [[]]), _drop("prompt"),
                    _set("prompt", long_prompt)]
        one += [_set("model", ""), _set("stream", "yes"), _set("unknown_field", {"x": 1})]
        for name, apply in one:
            out.append(Probe(path, apply(json.loads(json.dumps(base))), (name,)))
        out += [Probe(path, raw, ("body is not a JSON object",))
                for raw in (b"", b"{", b"null", b"[]", b"\xff\xfe")]
    return out
