"""The target load as data: :class:`LoadProfile`, read from TOML/JSON, markers or keywords.

A profile file (``--k3-profile agent.toml``)::

    name = "agent-team"
    context_tokens = 6000      # prompt tokens per request (synthetic requests)
    output_tokens = 400        # max_tokens (exact with ignore_eos = true)
    concurrency = 16           # closed loop: 16 sessions back to back ...
    # rate = 2.0               # ... or open loop: Poisson arrivals per second
    requests = 200             # bound on the number of requests
    max_seconds = 600          # bound on the run's time (in-flight requests cut = timeouts)
    prefix_tokens = 3000       # shared system prompt + tools (tokens)
    prefix_reuse = 0.9         # share of requests that reuse it
    request_set = "agent_requests.jsonl"   # optional fixed request set (relative path)

    [slo]
    ttft_p99 = 5.0
    error_rate = 0.0

    [headroom]
    min_free = 0.10

Every field is validated; a bad one raises :class:`ProfileError` naming the file, the field
and what is expected. Pure: no pytest, no network.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ...checks.slo import SLO, SLOError, suggest


class ProfileError(ValueError):
    """A load profile is invalid; the message names the source and the field."""


@dataclass(frozen=True)
class HeadroomSpec:
    """What "headroom at the target load" requires (see :mod:`.headroom`)."""

    min_free: float = 0.10
    max_error_rate: float = 0.0
    max_preemptions: int = 0
    max_waiting: int | None = 0
    min_free_gpu: float | None = None
    failover: bool = False
    replicas: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain values."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class LoadProfile:
    """One target load. Closed loop when ``rate`` is None, else open loop (Poisson)."""

    name: str = "default"
    context_tokens: int = 512
    output_tokens: int = 64
    concurrency: int | None = 4
    rate: float | None = None
    requests: int = 32
    max_seconds: float = 300.0
    prefix_tokens: int = 0
    prefix_reuse: float = 1.0
    warmup: int = 0
    stream: bool = True
    timeout: float | None = None
    ignore_eos: bool = True
    seed: int = 0
    #: a Ray cluster for the worker processes (``"ray://HEAD:10001"`` or ``"auto"``; None:
    #: this machine), see :mod:`.placement.ray`
    cluster: str | None = None
    request_set: str | None = None
    #: worker processes that share the run's plan (1: this process alone; ``"auto"``: one
    #: per core when one process would saturate; see :mod:`.split`)
    processes: int | str = 1
    slo: SLO = field(default_factory=SLO)
    headroom: HeadroomSpec = field(default_factory=HeadroomSpec)

    @property
    def open_loop(self) -> bool:
        """True when requests arrive at ``rate`` (Poisson) instead of back to back."""
        return self.rate is not None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "profile",
                     base: "LoadProfile | None" = None) -> "LoadProfile":
        """Validate ``data`` (file contents, marker or keyword values) over ``base``."""
        if not isinstance(data, Mapping):
            raise ProfileError(f"{where}: expected a table of profile values, got "
                               f"{type(data).__name__}")
        return (base or cls()).replace(where, **{str(k): v for k, v in data.items()})

    def replace(self, where: str = "profile", /, **changes: Any) -> "LoadProfile":
        """A copy with ``changes`` applied and validated. ``slo``/``headroom`` take tables
        (merged into the current ones); headroom keys may also be given flat
        (``min_free=0.2``)."""
        values = {k: getattr(self, k) for k in _FIELDS}
        slo, head = self.slo, dict(self.headroom.as_dict())
        for key, value in changes.items():
            if key in _HEADROOM_FIELDS:
                head[key] = value
            elif key == "headroom":
                if isinstance(value, HeadroomSpec):
                    head = value.as_dict()
                elif isinstance(value, Mapping):
                    for hk in value:
                        if hk not in _HEADROOM_FIELDS:
                            raise ProfileError(
                                f"{where}: headroom.{hk}: unknown field"
                                f"{suggest(str(hk), list(_HEADROOM_FIELDS))}; known: "
                                f"{', '.join(_HEADROOM_FIELDS)}")
                    head.update(value)
                else:
                    raise ProfileError(f"{where}: headroom: expected a table, got {value!r}")
            elif key == "slo":
                if isinstance(value, SLO):
                    slo = slo.merged(value)
                else:
                    try:
                        slo = slo.merged(SLO.from_mapping(value, "slo"))
                    except SLOError as exc:
                        raise ProfileError(f"{where}: {exc}") from None
            elif key in _FIELDS:
                values[key] = value
            else:
                raise ProfileError(
                    f"{where}: {key}: unknown profile field{suggest(str(key), _KNOWN)}; "
                    f"known: {', '.join(_KNOWN)}")
        if "rate" in changes and changes["rate"] is not None and "concurrency" not in changes:
            values["concurrency"] = None  # open loop: no in-flight cap unless asked for
        checked = {k: _check(k, values[k], where) for k in _FIELDS}
        spec = HeadroomSpec(**{k: _check_head(k, head[k], where) for k in _HEADROOM_FIELDS})
        profile = LoadProfile(**checked, slo=slo, headroom=spec)
        if profile.prefix_tokens >= profile.context_tokens:
            raise ProfileError(f"{where}: prefix_tokens ({profile.prefix_tokens}) must be "
                               f"smaller than context_tokens ({profile.context_tokens})")
        return profile

    def scaled(self, factor: float) -> "LoadProfile":
        """The same load ``factor`` times heavier: concurrency, rate and requests scaled
        (concurrency and requests rounded up)."""
        changes: dict[str, Any] = {"requests": max(1, math.ceil(self.requests * factor))}
        if self.concurrency is not None:
            changes["concurrency"] = max(1, math.ceil(self.concurrency * factor))
        if self.rate is not None:
            changes["rate"] = self.rate * factor
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-serializable values (``from_mapping`` reads them back)."""
        out = {k: getattr(self, k) for k in _FIELDS}
        out["slo"] = self.slo.as_dict()
        out["headroom"] = self.headroom.as_dict()
        return out


_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(LoadProfile)
                                 if f.name not in ("slo", "headroom"))
_HEADROOM_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HeadroomSpec))
_KNOWN: list[str] = [*_FIELDS, "slo", "headroom", *_HEADROOM_FIELDS]

# field -> (kind, minimum, nullable)
_RULES: dict[str, tuple[str, float, bool]] = {
    "name": ("str", 0, False), "context_tokens": ("int", 1, False),
    "output_tokens": ("int", 1, False), "concurrency": ("int", 1, True),
    "rate": ("float+", 0, True), "requests": ("int", 1, False),
    "max_seconds": ("float+", 0, False), "prefix_tokens": ("int", 0, False),
    "prefix_reuse": ("fraction", 0, False), "warmup": ("int", 0, False),
    "stream": ("bool", 0, False), "timeout": ("float+", 0, True),
    "ignore_eos": ("bool", 0, False), "seed": ("int", 0, False),
    "request_set": ("str", 0, True), "processes": ("processes", 1, False),
    "min_free": ("fraction", 0, False), "max_error_rate": ("fraction", 0, False),
    "max_preemptions": ("int", 0, False), "max_waiting": ("int", 0, True),
    "min_free_gpu": ("fraction", 0, True),
    "failover": ("bool", 0, False), "replicas": ("int", 2, True),
    "cluster": ("cluster", 0, True),
}

_EXPECT = {"int": "an integer", "float+": "a positive number", "fraction": "a fraction in [0, 1]",
           "bool": "true or false", "str": "a string",
           "processes": "an integer >= 1 or \"auto\""}


def _check(key: str, value: Any, where: str) -> Any:
    kind, minimum, nullable = _RULES[key]
    if value is None:
        if nullable:
            return None
        raise ProfileError(f"{where}: {key}: a value is required ({_EXPECT[kind]})")
    if kind == "cluster":
        return _check_cluster(key, value, where)
    bad = ProfileError(f"{where}: {key}: expected {_EXPECT[kind]}"
                       f"{f' >= {minimum:g}' if kind == 'int' else ''}, got {value!r}")
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad
        return value
    if kind == "processes" and value == "auto":
        return value
    if kind == "processes":
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise bad
        return value
    if kind == "str":
        if not isinstance(value, str) or (key == "name" and not value.strip()):
            raise bad
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad
    if kind == "int":
        if isinstance(value, float) and not value.is_integer():
            raise bad
        if not math.isfinite(value) or value < minimum:
            raise bad
        return int(value)
    number = float(value)
    if not math.isfinite(number) or number < 0 or (kind == "float+" and number <= 0):
        raise bad
    if kind == "fraction" and number > 1:
        raise bad
    return number


def _check_cluster(key: str, value: Any, where: str) -> str:
    """``"auto"`` or ``"ray://HOST[:PORT]"`` (a Ray cluster's client address)."""
    host, _, port = str(value)[len("ray://"):].partition(":")
    if value == "auto" or (isinstance(value, str) and value.startswith("ray://") and host
                           and "/" not in host and (not port or port.isdigit()
                                                    and 0 < int(port) < 65536)):
        return str(value)
    raise ProfileError(f"{where}: {key}: expected \"auto\" or \"ray://HOST:PORT\" (a Ray "
                       f"cluster's client address, e.g. \"ray://head:10001\"), got {value!r}")


def _check_head(key: str, value: Any, where: str) -> Any:
    return _check(key, value, f"{where}: headroom")


def parse_text(text: str, fmt: str, where: str) -> dict[str, Any]:
    """Decode TOML (``fmt="toml"``) or JSON text to a table; errors name line and column."""
    from ...config.tables import TableError, decode

    try:
        return decode(text, fmt, where, "profile values")
    except TableError as exc:
        raise ProfileError(str(exc)) from None


#: tables of a profile file that other modules read (layers.py, procedure.py,
#: compare/thresholds.py), not the load
DECISION_KEYS = ("layers", "procedure", "audience", "baseline")


def load(path: str | Path, base: LoadProfile | None = None) -> LoadProfile:
    """Read a profile file (``.toml`` or ``.json``). ``request_set`` is resolved relative to
    the file. Raises :class:`ProfileError` with the file name in the message."""
    from ...config.tables import TableError, read

    p = Path(path)
    try:
        data, _ = read(p, "the load profile", "profile values")
    except TableError as exc:
        raise ProfileError(str(exc)) from None
    return from_table(data, p, base)


def from_table(data: Mapping[str, Any], path: Path, base: LoadProfile | None = None,
               ) -> LoadProfile:
    """The load part of an already decoded profile file: tables that other modules read
    (:data:`DECISION_KEYS`) are left out, ``name`` defaults to the file's stem and
    ``request_set`` is resolved relative to the file."""
    values = {k: v for k, v in data.items() if k not in DECISION_KEYS}
    values.setdefault("name", path.stem)
    profile = LoadProfile.from_mapping(values, where=str(path), base=base)
    if profile.request_set and not Path(profile.request_set).is_absolute():
        resolved = (path.parent / profile.request_set).resolve()
        profile = dataclasses.replace(profile, request_set=str(resolved))
    return profile
