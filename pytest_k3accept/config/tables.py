"""TOML / JSON files of tables (profiles, presets, layers): one decoder, one set of messages.

Errors name the file and, where the parser knows them, line and column. Callers turn a
:class:`TableError` into their own error type (``ProfileError``, ``PresetError`` ...).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


class TableError(ValueError):
    """A file or text that is not a table of values; the message names where."""


def decode(text: str, fmt: str, where: str, what: str = "") -> dict[str, Any]:
    """Decode TOML (``fmt="toml"``) or JSON text to a top-level table."""
    try:
        if fmt == "json":
            data = json.loads(text)
        else:
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover - Python 3.10
                import tomli as tomllib
            data = tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise TableError(f"{where}: line {exc.lineno}, column {exc.colno}: invalid JSON: "
                         f"{exc.msg}") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError says "(at line N, column M)"
        raise TableError(f"{where}: invalid TOML: {exc}") from None
    if not isinstance(data, dict):
        of = f" of {what}" if what else ""
        raise TableError(f"{where}: expected a table{of} at the top level, got "
                         f"{type(data).__name__}")
    return data


def fmt_of(path: Path) -> str:
    """``"json"`` for ``*.json`` files, else ``"toml"``."""
    return "json" if path.suffix.lower() == ".json" else "toml"


def read_text(path: str | Path, kind: str) -> str:
    """A file's UTF-8 text; ``kind`` names it in messages ("the profile", "the preset").
    Raises :class:`TableError` when it cannot be read or is not UTF-8."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TableError(f"{p}: cannot read {kind}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TableError(f"{p}: cannot read {kind}: not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start})") from None


def read(path: str | Path, kind: str, what: str = "") -> tuple[dict[str, Any], str]:
    """Read (:func:`read_text`) and decode a file (TOML, or JSON by suffix)."""
    text = read_text(path, kind)
    return decode(text, fmt_of(Path(path)), str(path), what), text
