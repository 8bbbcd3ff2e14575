"""Request set files: JSONL and agent sets, error messages (file, line, field), round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_k3accept.observe.load.requestset import (ChatRequest, RequestSet, RequestSetError,
                                                     load, loads_jsonl)

DATA = Path(__file__).resolve().parents[2] / "pytest_k3accept" / "data"
SYS = {"role": "system", "content": "You are an agent."}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def line(**kw: Any) -> str:
    return json.dumps(kw)


def test_jsonl_fields_params_and_conversation_order(tmp_path: Path) -> None:
    text = "\n".join([
        line(id="b2", conversation="b", turn=2, messages=[SYS, {"role": "user", "content": "2"}]),
        line(messages=[{"role": "user", "content": "solo"}], tools=[TOOL], max_tokens=7,
             temperature=0, model="ignored", stream=True),
        "",
        line(id="b1", conversation="b", turn=1, messages=[SYS, {"role": "user", "content": "1"}]),
    ])
    f = tmp_path / "set.jsonl"
    f.write_text(text)
    rs = load(f)
    assert len(rs) == 3 and rs.name == "set"
    solo = rs.requests[1]
    assert solo.tools == [TOOL] and solo.max_tokens == 7
    assert solo.params == {"temperature": 0}  # model/stream belong to the runner
    units = rs.units()
    assert [[r.id for r in u] for u in units] == [["b1", "b2"], [None]]


@pytest.mark.parametrize("text, where, what", [
    ('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": ', ":2:", "invalid JSON"),
    ('{"mesages": []}', ":1:", "messages: missing"),
    ('{"messages": []}', ":1:", "messages: expected a non-empty list"),
    ('{"messages": [{"role": "usr", "content": "x"}]}', ":1:", "messages[0].role: expected one of"),
    ('{"messages": [{"role": "user"}]}', ":1:", "messages[0].content: missing"),
    ('{"messages": [{"role": "user", "content": 5}]}', ":1:", "messages[0].content: expected"),
    ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', ":1:",
     "max_tokens: expected an integer >= 1"),
    ('{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}', ":1:",
     "tools[0]: expected"),
    ('{"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": 3}}]}',
     ":1:", "tools[0].function.name"),
    ('{"messages": [{"role": "user", "content": "x"}], "n": 2}', ":1:", "n: only n = 1"),
    ('[1]', ":1:", "expected a JSON object"),
    ('{"conversation": "c", "turn": 1, "messages": [{"role": "user", "content": "a"}]}\n'
     '{"conversation": "c", "turn": 1, "messages": [{"role": "user", "content": "b"}]}',
     ":2:", "already has turn 1 (line 1)"),
    ("\n\n", "", "no requests"),
])
def test_bad_jsonl_names_file_line_and_field(tmp_path: Path, text: str, where: str,
                                             what: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(text)
    with pytest.raises(RequestSetError) as err:
        load(f)
    msg = str(err.value)
    assert msg.startswith(f"{f}{where}"), msg
    assert what in msg


def test_unknown_suffix_and_unreadable(tmp_path: Path) -> None:
    with pytest.raises(RequestSetError, match="unknown request set format '.yaml'"):
        (tmp_path / "x.yaml").write_text("a: 1")
        load(tmp_path / "x.yaml")
    with pytest.raises(RequestSetError, match="cannot read the request set"):
        load(tmp_path / "missing.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe{}")
    with pytest.raises(RequestSetError, match="not UTF-8"):
        load(tmp_path / "bin.jsonl")


def test_save_load_round_trip(tmp_path: Path) -> None:
    rs = RequestSet([
        ChatRequest(messages=[SYS, {"role": "user", "content": "héllo ✓"}], tools=[TOOL],
                    max_tokens=5, id="1", conversation="c", turn=1, params={"top_p": 0.5}),
        ChatRequest(messages=[{"role": "user", "content": "x"}]),
        ChatRequest(messages=[{"role": "assistant", "content": None,
                               "tool_calls": [{"id": "t", "type": "function",
                                               "function": {"name": "lookup",
                                                            "arguments": "{}"}}]},
                              {"role": "tool", "content": "42", "tool_call_id": "t"}]),
    ])
    back = load(rs.save(tmp_path / "rt.jsonl"))
    assert back.requests == rs.requests
    assert back.fingerprint() == rs.fingerprint()


text = st.text(min_size=1, max_size=30)
message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                                 "content": text})
request = st.builds(
    ChatRequest, messages=st.lists(message, min_size=1, max_size=4),
    tools=st.none() | st.just([TOOL]), max_tokens=st.none() | st.integers(1, 4096),
    id=st.none() | text, conversation=st.none(), turn=st.none(),
    params=st.dictionaries(st.sampled_from(["temperature", "top_p", "seed"]),
                           st.integers(0, 5), max_size=2))


@given(st.lists(request, min_size=1, max_size=8))
def test_round_trip_any_set(reqs: list[ChatRequest]) -> None:
    rs = RequestSet(reqs)
    back = loads_jsonl(rs.dumps(), "mem.jsonl")
    assert back.requests == rs.requests
    assert back.dumps() == rs.dumps()


AGENT_TOML = '''
name = "ops"
system = "You run the ops desk."
max_tokens = 32
inputs = ["one question"]

[params]
temperature = 0

[[tools]]
name = "lookup"
parameters = {type = "object"}

[[conversations]]
id = "c1"
turns = ["first", {user = "second", assistant = "reply two"}, "third"]
'''


def test_agent_set_expands_system_tools_and_turns(tmp_path: Path) -> None:
    f = tmp_path / "ops.toml"
    f.write_text(AGENT_TOML)
    rs = load(f)
    assert rs.name == "ops" and len(rs) == 4
    first = rs.requests[0]
    assert first.messages == [{"role": "system", "content": "You run the ops desk."},
                              {"role": "user", "content": "one question"}]
    assert first.tools == [{"type": "function", "function": {"name": "lookup",
                                                            "parameters": {"type": "object"}}}]
    assert first.max_tokens == 32 and first.params == {"temperature": 0}
    third = rs.requests[3]
    assert (third.conversation, third.turn) == ("c1", 3)
    assert [m["content"] for m in third.messages] == [
        "You run the ops desk.", "first", "OK.", "second", "reply two", "third"]


@pytest.mark.parametrize("body, what", [
    ('sytem = "x"', "sytem: unknown key"),
    ("inputs = [1]", "inputs[0]: expected a non-empty string"),
    ("[[conversations]]\nid = 'a'\nturns = []", "conversations[0].turns: expected a non-empty"),
    ("[[conversations]]\nturns = [{assistant = 'x'}]", "conversations[0].turns[0]: expected"),
    ("[[tools]]\ndescription = 'no name'", "tools[0]: expected"),
    ('system = "only a prompt"', "no requests"),
    ("inputs = [", "invalid TOML"),
])
def test_bad_agent_sets_name_the_field(tmp_path: Path, body: str, what: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(RequestSetError) as err:
        load(f)
    assert str(f) in str(err.value) and what in str(err.value)


def test_shipped_agent_set_and_jsonl_are_the_same_requests() -> None:
    from_toml = load(DATA / "agent_set.toml")
    from_jsonl = load(DATA / "agent_requests.jsonl")
    assert from_toml.requests == from_jsonl.requests
    assert len(from_jsonl) == 10 and len(from_jsonl.units()) == 6
    assert all(r.tools and r.messages[0]["role"] == "system" for r in from_jsonl)
    assert from_jsonl.describe()["fingerprint"] == from_toml.fingerprint()
