"""Handling of what a server sends back: it is untrusted data, never code or markup.

Everything the plugin keeps from a server (error bodies, error messages, numbers in ``usage``)
goes through these helpers first: bodies are cut at :data:`MAX_ERROR_BODY` bytes with a note
saying so, messages lose terminal control characters (an error text cannot move the cursor or
clear the CI log) and are cut at :data:`MAX_MESSAGE` characters, invalid UTF-8 becomes U+FFFD,
and token counts that are not plausible whole numbers become ``None``. HTML/JS stays plain text
here; whoever renders it (report, JUnit) escapes it. ``absorb_full``/``absorb_delta`` fold
OpenAI answers of ANY JSON shape into a result without raising. No third-party import.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

#: stored error bodies are cut at this many bytes (the note says how many there were)
MAX_ERROR_BODY = 64 * 1024
#: error messages are cut at this many characters
MAX_MESSAGE = 1000
#: a non-streamed response body larger than this is not read further (protocol error)
MAX_BODY = 64 * 1024 * 1024
#: a single server-sent-event line longer than this ends the stream (protocol error)
MAX_EVENT_LINE = 16 * 1024 * 1024
#: token counts above this are not believed (``usage`` fields become None)
MAX_TOKENS_PLAUSIBLE = 10**12

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def clean(text: Any, limit: int = MAX_MESSAGE) -> str:
    """``text`` as a one-screen safe string: control characters shown as ``\\xNN``, cut at
    ``limit`` characters with ``... [N more characters]``."""
    s = text if isinstance(text, str) else str(text)
    s = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                     else f"\\u{ord(m.group()):04x}", s)
    if len(s) > limit:
        s = f"{s[:limit]}... [{len(s) - limit} more characters]"
    return s


def decode(raw: bytes) -> str:
    """UTF-8 with invalid bytes replaced (never raises)."""
    return raw.decode("utf-8", "replace")


def error_body(raw: bytes, total: int | None = None) -> Any:
    """What a result keeps of an error body: the parsed JSON when the whole body fits in
    :data:`MAX_ERROR_BODY` bytes, else the decoded text cut there with a note."""
    size = len(raw) if total is None else total
    if size <= MAX_ERROR_BODY:
        parsed = parse_json(raw)
        return parsed if parsed is not None else decode(raw)
    return (decode(raw[:MAX_ERROR_BODY])
            + f"\n... [truncated: the body has more than {MAX_ERROR_BODY // 1024} KiB"
            + (f" ({size} bytes)" if total is not None else "") + "; only the start is kept]")


_decode = json.JSONDecoder().decode


def parse_event(data: bytes) -> Any:
    """The JSON value of one SSE ``data:`` payload (UTF-8, as SSE is), or None when it is
    not JSON. The stream's hot path: skips ``json.loads``'s encoding detection."""
    try:
        return _decode(data.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def parse_json(raw: bytes | str) -> Any:
    """The JSON value of ``raw``, or None when it is not JSON."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def token_count(value: Any) -> int | None:
    """A plausible token count (whole number, 0 <= n <= 10**12), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_TOKENS_PLAUSIBLE:
        return value
    return None


def message_of(body: Any, fallback: str) -> str:
    """The human message of an OpenAI/vLLM error body (``{"error": {"message": ...}}``,
    ``{"error": "..."}``, ``{"detail": ...}``, ``{"message": ...}``), cleaned."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            for key in ("message", "detail"):
                if err.get(key):
                    return clean(err[key])
        elif isinstance(err, str) and err:
            return clean(err)
        if body.get("detail"):
            return clean(body["detail"])
    return clean(fallback)


# -- OpenAI answer shapes, folded into a RequestResult (duck-typed: no client import) --

def _usage(res: Any, usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    for key in ("prompt_tokens", "completion_tokens"):
        if key in usage:
            setattr(res, key, token_count(usage[key]))
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        res.cached_tokens = token_count(details["cached_tokens"])


def absorb_full(res: Any, payload: dict[str, Any]) -> None:
    """Fold a non-streamed chat/completion answer into ``res`` (any JSON shape is safe)."""
    _usage(res, payload.get("usage"))
    choice = _first(payload.get("choices"))
    msg = choice.get("message")
    msg = msg if isinstance(msg, dict) else {}
    res.text = _text(msg.get("content")) or _text(choice.get("text"))
    calls = msg.get("tool_calls")
    res.tool_calls = [c for c in calls if isinstance(c, dict)] if isinstance(
        calls, list) else []
    reason = choice.get("finish_reason")
    res.finish_reason = reason if isinstance(reason, str) else None


def absorb_delta(res: Any, event: dict[str, Any]) -> bool:
    """Fold one stream event into ``res``; True when it carried output.

    The stream's hot path (once per event): the common shapes are read inline, with no
    helper call for an absent ``usage``, ``tool_calls`` or finish reason."""
    usage = event.get("usage")
    if usage is not None:
        _usage(res, usage)
    choices = event.get("choices")
    if not choices or not isinstance(choices, list):
        return False
    choice = choices[0]
    if not choice or not isinstance(choice, dict):
        return False
    reason = choice.get("finish_reason")
    if isinstance(reason, str):
        res.finish_reason = reason
    delta = choice.get("delta")
    if not isinstance(delta, dict):  # /v1/completions
        piece = choice.get("text")
        if piece and isinstance(piece, str):
            res.text += piece
            return True
        return False
    piece = delta.get("content")
    out = False
    if piece and isinstance(piece, str):
        res.text += piece
        out = True
    calls = delta.get("tool_calls")
    if calls and isinstance(calls, list):
        kept = [c for c in calls if isinstance(c, dict)]
        if kept:
            res.tool_calls.extend(kept)
            out = True
    return out or bool(delta.get("reasoning_content") or delta.get("reasoning"))


def _first(choices: Any) -> dict[str, Any]:
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
