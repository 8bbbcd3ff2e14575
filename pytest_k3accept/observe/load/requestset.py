"""Request sets: the fixed agent requests a load runs, as files.

Two file forms:

* **JSONL** (``*.jsonl``): one OpenAI chat request per line::

    {"id": "r1", "conversation": "c1", "turn": 1, "messages": [...], "tools": [...],
     "max_tokens": 256, "temperature": 0}

  ``messages`` is required; ``tools``, ``max_tokens``, ``id``, ``conversation`` and ``turn``
  are optional; other OpenAI parameters (``temperature``, ``tool_choice`` ...) are kept and
  sent; ``model``, ``stream`` and ``stream_options`` are set by the runner and ignored here.
  Lines of one ``conversation`` are sent in ``turn`` order, one after the other. An optional
  first line ``{"k3_request_set": {"name": "..."}}`` names the set (``RequestSet.save``
  writes it; without it the set is named after the file).
* **Agent set** (``*.toml`` / ``*.json``): a system prompt, tool definitions and user turns
  that expand into requests (see :mod:`.agentset` and docs/load.md).

A bad file raises :class:`RequestSetError` naming the file, the line and the field. Pure:
no pytest, no network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from .chat import HEADER, ChatRequest, RequestSet, RequestSetError

__all__ = ["ChatRequest", "RequestSet", "RequestSetError", "from_requests", "load",
           "loads_jsonl"]

def loads_jsonl(text: str, source: str = "<string>") -> RequestSet:
    """Parse JSONL text; errors name ``source``, the line and the field."""
    reqs: list[ChatRequest] = []
    seen: dict[tuple[str, int], int] = {}
    name = Path(source).stem
    # split on "\n" only: str.splitlines() would also split inside strings at U+0085/U+2028
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RequestSetError(f"{where}: column {exc.colno}: invalid JSON: {exc.msg} "
                                  "(one JSON object per line)") from None
        if isinstance(data, dict) and set(data) == {HEADER} and not reqs:
            head = data[HEADER]
            if not (isinstance(head, dict) and isinstance(head.get("name"), str)
                    and head["name"]):
                raise RequestSetError(f"{where}: {HEADER}: expected {{\"name\": \"...\"}} "
                                      f"naming the set, got {head!r}")
            name = head["name"]
            continue
        req = ChatRequest.from_json(data, where)
        if req.conversation is not None and req.turn is not None:
            key = (req.conversation, req.turn)
            if key in seen:
                raise RequestSetError(f"{where}: turn: conversation {req.conversation!r} "
                                      f"already has turn {req.turn} (line {seen[key]})")
            seen[key] = lineno
        reqs.append(req)
    if not reqs:
        raise RequestSetError(f"{source}: no requests (expected one JSON object per line)")
    return RequestSet(reqs, name=name, source=source)


def load(path: str | Path) -> RequestSet:
    """Read a request set: ``.jsonl`` lines, or a ``.toml``/``.json`` agent set."""
    from ...config.tables import TableError, read_text

    p = Path(path)
    try:
        text = read_text(p, "the request set")
    except TableError as exc:
        raise RequestSetError(str(exc)) from None
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return loads_jsonl(text, str(p))
    if suffix in (".toml", ".json"):
        from .profile import ProfileError, parse_text

        try:
            data = parse_text(text, suffix[1:], str(p))
        except ProfileError as exc:
            raise RequestSetError(str(exc).replace("profile values", "agent set keys")) from None
        from .agentset import expand_agent_set

        return expand_agent_set(data, str(p))
    raise RequestSetError(f"{p}: unknown request set format {suffix or '(no suffix)'!r}; use "
                          ".jsonl (one request per line) or a .toml/.json agent set")


def from_requests(requests: Sequence[ChatRequest | Mapping[str, Any]],
                  name: str = "inline") -> RequestSet:
    """A set from request objects or mappings (validated like file lines)."""
    reqs = [r if isinstance(r, ChatRequest) else ChatRequest.from_json(r, f"{name}[{i}]")
            for i, r in enumerate(requests)]
    if not reqs:
        raise RequestSetError(f"{name}: no requests")
    return RequestSet(reqs, name=name)
