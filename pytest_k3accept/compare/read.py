"""Reading a reproduction record back: load, validate, migrate (pure; no pytest).

A record of any schema version this release knows (:data:`SUPPORTED`) is read and migrated
to the current in-memory shape, so that a record written today stays readable by the next
release. What is not a usable record gets a :class:`RecordError` whose message says which of
these it is: missing or unreadable, empty, truncated (the JSON stops early), not JSON, not a
k3accept record (another tool's JSON), or a schema version this release does not read.

Only the parts a comparison needs are checked (``reproduction``, ``evidence``, ``verdict``),
by hand: reading a record needs no ``jsonschema``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..output.record import SCHEMA_ID, SCHEMA_VERSION

#: schema versions this release reads (older ones are migrated to the current shape)
SUPPORTED: tuple[str, ...] = tuple(dict.fromkeys(("1.0", "1.1", "1.2", SCHEMA_VERSION)))


class RecordError(ValueError):
    """A file that cannot serve as a record; the message names the file and why."""


@dataclass(frozen=True)
class Record:
    """A record read back: its (migrated) data and where it came from."""

    data: dict[str, Any]
    source: str
    #: the schema version the file was written with (``data`` is in the current shape)
    written_as: str
    notes: tuple[str, ...] = field(default=())

    def fact(self, name: str) -> Any:
        """The value of reproduction field ``name`` (None when unknown)."""
        found = (self.data.get("reproduction") or {}).get(name)
        return found.get("value") if isinstance(found, Mapping) else None

    @property
    def model(self) -> str | None:
        """The served model name (None when the record does not know it)."""
        value = self.fact("model")
        return str(value) if isinstance(value, (str, int, float)) and value != "" else None

    @property
    def verdict(self) -> str:
        """The verdict's name (``undecided`` when the record has none)."""
        return str((self.data.get("verdict") or {}).get("name") or "undecided")

    @property
    def evidence(self) -> list[dict[str, Any]]:
        """The evidence entries (dicts with kind, summary, data, nodeid, at)."""
        return [e for e in self.data.get("evidence") or () if isinstance(e, dict)]

    @property
    def generated_at(self) -> str:
        """When the record was written (as the record says)."""
        return str(self.data.get("generated_at") or "unknown")


def read(path: str | Path, source: str | None = None) -> Record:
    """Read the record at ``path`` (named ``source`` in messages, default the path).
    Raises :class:`RecordError` with a specific message."""
    p = Path(path)
    name = source or str(p)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise RecordError(f"{name}: no such file (a pipeline's first run has no previous "
                          "record: keep the last green run's --k3-record as an artifact)"
                          ) from None
    except IsADirectoryError:
        raise RecordError(f"{name}: is a directory, not a record file") from None
    except OSError as exc:
        raise RecordError(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{name}: not a record: not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start}); a record is the JSON file written by --k3-record"
                          ) from None
    return parse(text, name)


def parse(text: str, source: str = "record") -> Record:
    """A record from JSON ``text``; :class:`RecordError` names ``source``."""
    body = text.strip()
    if not body:
        raise RecordError(f"{source}: empty file, not a record (was the session that should "
                          "have written it interrupted?)")
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(body) - 1 or exc.msg.startswith("Unterminated"):
            raise RecordError(
                f"{source}: truncated: the JSON stops early (line {exc.lineno}, column "
                f"{exc.colno}: {exc.msg}; {len(body)} characters); the file was cut while "
                "being written or copied") from None
        raise RecordError(f"{source}: not a record: not JSON (line {exc.lineno}, column "
                          f"{exc.colno}: {exc.msg})") from None
    return from_data(data, source)


def from_data(data: Any, source: str = "record") -> Record:
    """Validate and migrate already decoded record ``data`` (not modified)."""
    if not isinstance(data, dict):
        raise RecordError(f"{source}: not a record: a JSON {type(data).__name__} at the top "
                          "level (a record is a JSON object written by --k3-record)")
    schema = data.get("$schema")
    version = data.get("schema_version")
    if schema is None and version is None:
        keys = ", ".join(sorted(str(k) for k in data)[:6]) or "none"
        raise RecordError(f"{source}: not a pytest-k3accept record: no \"$schema\" or "
                          f"\"schema_version\" (top-level keys: {keys}); pass the JSON file "
                          "written by --k3-record")
    if schema is not None and schema != SCHEMA_ID:
        raise RecordError(f"{source}: not a pytest-k3accept record of this kind: $schema is "
                          f"{schema!r}, expected {SCHEMA_ID!r}")
    version = str(version) if version is not None else "?"
    if version not in SUPPORTED:
        newer = _newer(version)
        hint = ("written by a newer release: upgrade pytest-k3accept to read it" if newer
                else "not a schema version any release wrote")
        raise RecordError(f"{source}: schema version {version} is not one this release reads "
                          f"({', '.join(SUPPORTED)}): {hint}")
    migrated, notes = migrate(data, version)
    for key, kind in (("reproduction", dict), ("evidence", list), ("verdict", dict)):
        if not isinstance(migrated.get(key), kind):
            raise RecordError(f"{source}: not a complete record: \"{key}\" is missing or not "
                              f"a JSON {'object' if kind is dict else 'array'} (schema "
                              f"{version}); the file was edited or cut")
    return Record(migrated, source, version, tuple(notes))


def _newer(version: str) -> bool:
    try:
        major, minor = (int(x) for x in version.split(".", 1))
        cur_major, cur_minor = (int(x) for x in SCHEMA_VERSION.split(".", 1))
    except ValueError:
        return False
    return (major, minor) > (cur_major, cur_minor)


# -- migrations: each turns version N into N+1 (on a deep copy) -----------------------------
def _from_1_0(data: dict[str, Any], notes: list[str]) -> None:
    """1.0 -> 1.1: a load entry without the typed fields (``run_id``, ``profile_name``,
    counts) gets them from its plain figures, so that runs can be matched by profile."""
    n = 0
    for ev in data.get("evidence") or ():
        if not isinstance(ev, dict) or ev.get("kind") != "load":
            continue
        d = ev.setdefault("data", {})
        if not isinstance(d, dict):
            continue
        n += 1
        summary: dict[str, Any] = d["summary"] if isinstance(d.get("summary"), dict) else {}
        profile: dict[str, Any] = d["profile"] if isinstance(d.get("profile"), dict) else {}
        d.setdefault("run_id", f"run-{n}")
        d.setdefault("profile_name", str(profile.get("name") or "default"))
        d.setdefault("concurrency", profile.get("concurrency"))
        for key in ("requests", "ok", "errors", "errors_by_kind", "error_rate"):
            if key in summary:
                d.setdefault(key, summary[key])
    if n:
        notes.append(f"schema 1.0 record: {n} load run(s) given run ids and profile names "
                     "from their figures")
    verdict = data.get("verdict")
    if isinstance(verdict, dict):
        verdict.setdefault("reasons", [])
        verdict.setdefault("name", "undecided")


def _from_1_1(data: dict[str, Any], notes: list[str]) -> None:
    """1.1 -> 1.2: more evidence kinds are typed (the plain data a comparison reads kept its
    shape); the reproduction gained ``recipe`` (unknown in an older record)."""
    rep = data.get("reproduction")
    if isinstance(rep, dict) and "recipe" not in rep:
        rep["recipe"] = {"value": None, "reason": "a record of schema 1.1 keeps no recipe"}


MIGRATIONS: dict[str, tuple[str, Callable[[dict[str, Any], list[str]], None]]] = {
    "1.0": ("1.1", _from_1_0), "1.1": ("1.2", _from_1_1)}


def migrate(data: Mapping[str, Any], version: str) -> tuple[dict[str, Any], list[str]]:
    """A copy of ``data`` in the current shape (:data:`SCHEMA_VERSION`) and notes on what
    was changed."""
    out = copy.deepcopy(dict(data))
    notes: list[str] = []
    while version != SCHEMA_VERSION and version in MIGRATIONS:
        version, step = MIGRATIONS[version]
        step(out, notes)
    out["schema_version"] = SCHEMA_VERSION
    return out, notes
