"""Request bodies as bytes, long prompts encoded once.

A load run sends the same few bodies over and over (``run_load`` builds them once and cycles
them). For a 1M-token prompt (4 MiB of text) JSON-encoding the body costs ~20-27 ms of client
CPU per request, several times the rest of the request, and every in-flight request holds
its own 4 MiB copy. :func:`encode_body` encodes a body whose strings are all short as before;
a body with long strings (>= :data:`LONG` characters) is encoded once per distinct shape and
set of long-string objects, and later requests get the same ``bytes`` object back (no encode,
no copy). The bytes are exactly ``json.dumps(body, ensure_ascii=False, separators=(",", ":"),
allow_nan=False).encode()``.

The cache key is the body's skeleton (every long string replaced by a placeholder, encoded)
plus the identities of its long strings; the cache keeps those strings alive, so an identity
is never reused while it is a key. It holds at most :data:`CACHE_BYTES` of bodies (least
recently used dropped first); a body larger than that is encoded every time.
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict
from typing import Any

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
#: strings this long (characters) are encoded once and cached with their body (a 1K-token
#: prompt and up: below it, the lookup would cost about what it saves)
LONG = 1 << 12
#: the cached bodies' total size bound
CACHE_BYTES = 256 << 20
#: a placeholder no real string of a body contains (a per-process random tag)
_TAG = f"\x00k3long-{secrets.token_hex(8)}\x00"
_TAG_JSON = _dumps(_TAG)

_cache: OrderedDict[tuple[str, tuple[int, ...]], tuple[tuple[str, ...], bytes]] = OrderedDict()
_cached_bytes = 0


_SCALARS = (int, float, bool, type(None))


def _has_long(obj: Any) -> bool:
    """Whether ``obj`` holds a string of :data:`LONG` characters or more (the hot path of a
    short body: ~2-3 us, no allocation)."""
    kind = type(obj)
    if kind is str:
        return len(obj) >= LONG
    if kind is dict:
        return any(type(v) not in _SCALARS and _has_long(v) for v in obj.values())
    if kind is list or kind is tuple:
        return any(type(v) not in _SCALARS and _has_long(v) for v in obj)
    if isinstance(obj, str):
        return len(obj) >= LONG
    if isinstance(obj, dict):
        return any(_has_long(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_long(v) for v in obj)
    return False


def _skeleton(obj: Any, longs: list[str]) -> Any:
    """``obj`` with every long string replaced by the placeholder (appended to ``longs``);
    the same object when it has none."""
    if isinstance(obj, str):
        if len(obj) >= LONG:
            longs.append(obj)
            return _TAG
        return obj
    if isinstance(obj, dict):
        before = len(longs)
        out = {k: _skeleton(v, longs) for k, v in obj.items()}
        return out if len(longs) > before else obj
    if isinstance(obj, (list, tuple)):
        before = len(longs)
        items = [_skeleton(v, longs) for v in obj]
        return items if len(longs) > before else obj
    return obj


def encode_body(body: Any) -> bytes:
    """``body`` as compact UTF-8 JSON; a body with long strings from the cache when it was
    encoded before (the same ``bytes`` object)."""
    global _cached_bytes
    if not _has_long(body):
        return _dumps(body).encode()
    longs: list[str] = []
    skel = _skeleton(body, longs)
    text = _dumps(skel)
    key = (text, tuple(id(s) for s in longs))
    hit = _cache.get(key)
    if hit is not None:
        _cache.move_to_end(key)
        return hit[1]
    parts = text.split(_TAG_JSON)
    if len(parts) != len(longs) + 1:  # the tag in a key or a short string: no shortcut
        return _dumps(body).encode()
    out = [parts[0]]
    for s, rest in zip(longs, parts[1:]):
        out += [_dumps(s), rest]
    data = "".join(out).encode()
    if len(data) <= CACHE_BYTES:
        _cache[key] = (tuple(longs), data)
        _cached_bytes += len(data)
        while _cached_bytes > CACHE_BYTES:
            _, (_, old) = _cache.popitem(last=False)
            _cached_bytes -= len(old)
    return data


def clear() -> None:
    """Drop every cached body."""
    global _cached_bytes
    _cache.clear()
    _cached_bytes = 0
