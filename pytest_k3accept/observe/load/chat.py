"""The request model of a request set: :class:`ChatRequest`, :class:`RequestSet` and their
validation (pure). Files are read by :mod:`.requestset` (JSONL) and :mod:`.agentset` (agent
sets), which both build these types.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

ROLES = ("system", "developer", "user", "assistant", "tool")
_RUNNER_KEYS = ("model", "stream", "stream_options")
_FIELDS = ("messages", "tools", "max_tokens", "id", "conversation", "turn")


class RequestSetError(ValueError):
    """A request set file or value is invalid; the message says where and what."""


@dataclass
class ChatRequest:
    """One chat request of a set; ``params`` are further OpenAI body parameters."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    id: str | None = None
    conversation: str | None = None
    turn: int | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSONL line as a mapping (unset fields left out, ``params`` flattened)."""
        out: dict[str, Any] = {}
        for key in ("id", "conversation", "turn"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["messages"] = self.messages
        if self.tools is not None:
            out["tools"] = self.tools
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        out.update(self.params)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> "ChatRequest":
        """Validate one request mapping; ``where`` prefixes every error message."""
        if not isinstance(data, Mapping):
            raise RequestSetError(f"{where}: expected a JSON object (one request), got "
                                  f"{type(data).__name__}")
        if "messages" not in data:
            raise RequestSetError(f"{where}: messages: missing; every request needs a "
                                  "non-empty list of chat messages")
        params = {k: v for k, v in data.items()
                  if k not in _FIELDS and k not in _RUNNER_KEYS}
        if params.get("n", 1) != 1:
            raise RequestSetError(f"{where}: n: only n = 1 is supported (one choice per "
                                  f"request is measured), got {params['n']!r}")
        return cls(messages=_messages(data["messages"], where),
                   tools=_tools(data.get("tools"), where),
                   max_tokens=_int(data.get("max_tokens"), f"{where}: max_tokens", 1),
                   id=_name(data.get("id"), f"{where}: id"),
                   conversation=_name(data.get("conversation"), f"{where}: conversation"),
                   turn=_int(data.get("turn"), f"{where}: turn", 0),
                   params=params)


def _messages(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise RequestSetError(f"{where}: messages: expected a non-empty list of messages, got "
                              f"{value!r:.80}")
    for i, msg in enumerate(value):
        at = f"{where}: messages[{i}]"
        if not isinstance(msg, Mapping):
            raise RequestSetError(f"{at}: expected an object with role and content")
        role = msg.get("role")
        if role not in ROLES:
            raise RequestSetError(f"{at}.role: expected one of {', '.join(ROLES)}, got {role!r}")
        content = msg.get("content")
        if content is None and not (role == "assistant" and msg.get("tool_calls")):
            raise RequestSetError(f"{at}.content: missing (only an assistant message with "
                                  "tool_calls may omit it)")
        if content is not None and not isinstance(content, (str, list)):
            raise RequestSetError(f"{at}.content: expected a string or a list of content parts"
                                  f", got {type(content).__name__}")
    return [dict(m) for m in value]


def _tools(value: Any, where: str) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise RequestSetError(f"{where}: tools: expected a list of tool definitions")
    out = []
    for i, tool in enumerate(value):
        at = f"{where}: tools[{i}]"
        if not isinstance(tool, Mapping):
            raise RequestSetError(f"{at}: expected an object")
        if "function" not in tool and "name" in tool:  # short form: the function itself
            tool = {"type": "function", "function": dict(tool)}
        fn = tool.get("function")
        if tool.get("type", "function") != "function" or not isinstance(fn, Mapping):
            raise RequestSetError(f"{at}: expected {{\"type\": \"function\", \"function\": "
                                  "{\"name\": ..., \"parameters\": {...}}}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestSetError(f"{at}.function.name: missing or not a string")
        if "parameters" in fn and not isinstance(fn["parameters"], Mapping):
            raise RequestSetError(f"{at}.function.parameters: expected a JSON schema object")
        out.append({"type": "function", **{k: v for k, v in tool.items() if k != "type"}})
    return out


def _int(value: Any, where: str, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RequestSetError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _name(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RequestSetError(f"{where}: expected a string, got {value!r}")
    return str(value)


#: key of the optional first JSONL line that names the set (``RequestSet.save`` writes it)
HEADER = "k3_request_set"


@dataclass
class RequestSet:
    """An ordered list of :class:`ChatRequest` with its name and source file."""

    requests: list[ChatRequest]
    name: str = ""
    source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[ChatRequest]:
        return iter(self.requests)

    def units(self) -> list[list[ChatRequest]]:
        """Units of work: each conversation (in turn order) or a single request."""
        groups: dict[str, list[ChatRequest]] = {}
        out: list[list[ChatRequest]] = []
        for req in self.requests:
            if req.conversation is None:
                out.append([req])
            elif req.conversation in groups:
                groups[req.conversation].append(req)
            else:
                groups[req.conversation] = [req]
                out.append(groups[req.conversation])
        for unit in groups.values():
            if all(r.turn is not None for r in unit):
                unit.sort(key=lambda r: r.turn or 0)
        return out

    def dumps(self) -> str:
        """The set as JSONL text (one canonical line per request)."""
        return "".join(json.dumps(r.to_json(), ensure_ascii=False, sort_keys=True) + "\n"
                       for r in self.requests)

    def fingerprint(self) -> str:
        """sha256 of the canonical JSONL: equal fingerprints mean the same fixed set."""
        return hashlib.sha256(self.dumps().encode()).hexdigest()

    def save(self, path: str | Path) -> Path:
        """Write the set as JSONL (``load(path)`` gives an equal set back, its name too: a
        first line ``{"k3_request_set": {"name": ...}}`` keeps it; the fingerprint covers the
        requests only)."""
        p = Path(path)
        head = json.dumps({HEADER: {"name": self.name}}, ensure_ascii=False) + "\n"
        p.write_text((head if self.name else "") + self.dumps(), encoding="utf-8")
        return p

    def describe(self) -> dict[str, Any]:
        """Plain facts for evidence and the record (no message texts)."""
        return {"name": self.name, "source": self.source, "requests": len(self.requests),
                "units": len(self.units()), "fingerprint": self.fingerprint(),
                "tools": any(r.tools for r in self.requests),
                **{k: v for k, v in self.meta.items() if not isinstance(v, (list, dict))}}
