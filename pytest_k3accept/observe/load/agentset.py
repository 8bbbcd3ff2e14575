"""Agent sets: a system prompt, tool definitions and user turns that expand into requests.

An agent set file (TOML or JSON) is the short way to write a fixed agent request set::

    name = "support-agents"
    system = "You are the on-call assistant of ..."
    max_tokens = 256
    inputs = ["single-turn question", "another one"]

    [[tools]]
    name = "search_runbooks"
    description = "Search the runbooks"
    parameters = {type = "object", properties = {query = {type = "string"}}}

    [[conversations]]
    id = "incident-1"
    turns = ["first user turn", {user = "second", assistant = "reply kept as history"}]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .chat import ChatRequest, RequestSet, RequestSetError, _tools


def expand_agent_set(data: Mapping[str, Any], source: str = "<agent set>") -> RequestSet:
    """Expand an agent set (system prompt, tools, user turns) into requests.

    Keys: ``name``, ``system``, ``tools`` (list), ``max_tokens``, ``params`` (table of further
    request parameters), ``inputs`` (single-turn user messages) and ``conversations``
    (list of ``{id, turns}``; a turn is a user string or ``{user, assistant}`` where
    ``assistant`` is the reply kept as history for the following turns, default "OK.").
    """
    known = ("name", "system", "tools", "max_tokens", "params", "inputs", "conversations")
    for key in data:
        if key not in known:
            raise RequestSetError(f"{source}: {key}: unknown key; known: {', '.join(known)}")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise RequestSetError(f"{source}: system: expected a string (the system prompt)")
    params = data.get("params") or {}
    if not isinstance(params, Mapping):
        raise RequestSetError(f"{source}: params: expected a table of request parameters")
    _tools(data.get("tools"), source)  # checked up front, named once
    head = [{"role": "system", "content": system}] if system else []
    common = {"tools": data.get("tools"), "max_tokens": data.get("max_tokens"), **params}
    lines: list[tuple[str, dict[str, Any]]] = []
    inputs = data.get("inputs") or []
    if not isinstance(inputs, list):
        raise RequestSetError(f"{source}: inputs: expected a list of user messages")
    for i, text in enumerate(inputs):
        if not isinstance(text, str) or not text:
            raise RequestSetError(f"{source}: inputs[{i}]: expected a non-empty string")
        lines.append((f"inputs[{i}]", {**common, "id": f"input-{i + 1}",
                                       "messages": [*head, {"role": "user", "content": text}]}))
    convs = data.get("conversations") or []
    if not isinstance(convs, list):
        raise RequestSetError(f"{source}: conversations: expected a list of tables")
    for c, conv in enumerate(convs):
        at = f"{source}: conversations[{c}]"
        if not isinstance(conv, Mapping) or not isinstance(conv.get("turns"), list) or not (
                conv["turns"]):
            raise RequestSetError(f"{at}.turns: expected a non-empty list of user turns")
        cid = str(conv.get("id", f"conversation-{c + 1}"))
        history = list(head)
        for t, turn in enumerate(conv["turns"]):
            user, reply = (turn, "OK.") if isinstance(turn, str) else (
                (turn.get("user"), turn.get("assistant", "OK."))
                if isinstance(turn, Mapping) else (None, None))
            if not isinstance(user, str) or not user or not isinstance(reply, str):
                raise RequestSetError(f"{at}.turns[{t}]: expected a user string or a table "
                                      "{user = \"...\", assistant = \"...\"}")
            msgs = [*history, {"role": "user", "content": user}]
            lines.append((f"conversations[{c}].turns[{t}]",
                          {**common, "id": f"{cid}-{t + 1}", "conversation": cid,
                           "turn": t + 1, "messages": msgs}))
            history = [*msgs, {"role": "assistant", "content": reply}]
    if not lines:
        raise RequestSetError(f"{source}: no requests: give inputs = [...] or "
                              "[[conversations]] with turns")
    reqs = [ChatRequest.from_json({k: v for k, v in body.items() if v is not None},
                                  f"{source}: {where}") for where, body in lines]
    return RequestSet(reqs, name=str(data.get("name") or Path(source).stem), source=source)
