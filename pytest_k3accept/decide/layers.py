"""Which layers of the deployment the user can change here (checklist C12).

The seed's stop-and-move rule depends on it: when only the container can be changed, a
host-driver or interconnect problem cannot be fixed in place, so the advice must be "move to
an environment that has it", never "upgrade the driver". A profile file states it::

    [layers]
    driver = "fixed"          # host GPU driver (R580+ for CUDA 13)
    container = "changeable"  # the image and its CUDA runtime
    network = "fixed"         # interconnect: NVLink / RDMA all-to-all path

Each value is ``"fixed"``, ``"changeable"`` or ``"unknown"`` (the default: nothing is
assumed). Pure: no pytest, no network.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

FIXED, CHANGEABLE, UNKNOWN = "fixed", "changeable", "unknown"
STATES: tuple[str, ...] = (FIXED, CHANGEABLE, UNKNOWN)

#: layer -> what it is, in the words the advice uses
LAYERS: dict[str, str] = {
    "driver": "host GPU driver",
    "container": "container image (CUDA runtime)",
    "network": "interconnect / network (NVLink, RDMA all-to-all path)",
}

#: other spellings accepted in a profile
ALIASES: dict[str, str] = {
    "host_driver": "driver", "host-driver": "driver", "gpu_driver": "driver",
    "image": "container", "cuda_image": "container", "runtime": "container",
    "interconnect": "network", "fabric": "network",
}


class LayersError(ValueError):
    """A ``[layers]`` table is invalid; the message names file, line and field."""


@dataclass(frozen=True)
class Layers:
    """The state of each layer: ``fixed``, ``changeable`` or ``unknown``."""

    driver: str = UNKNOWN
    container: str = UNKNOWN
    network: str = UNKNOWN
    source: str = ""

    def state(self, layer: str) -> str:
        """State of ``layer`` (``driver``, ``container`` or ``network``)."""
        return str(getattr(self, ALIASES.get(layer, layer)))

    def is_fixed(self, layer: str) -> bool:
        """True when the user marked ``layer`` as fixed (cannot be changed here)."""
        return self.state(layer) == FIXED

    @property
    def recorded(self) -> bool:
        """True when at least one layer's state was stated."""
        return any(self.state(name) != UNKNOWN for name in LAYERS)

    def fixed_layers(self) -> list[str]:
        """Names of the layers marked fixed."""
        return [name for name in LAYERS if self.is_fixed(name)]

    def describe(self) -> str:
        """One line, e.g. ``driver fixed, container changeable, network unknown``."""
        return ", ".join(f"{name} {self.state(name)}" for name in LAYERS)

    def as_dict(self) -> dict[str, Any]:
        """Plain values for evidence and the record."""
        return {**{name: self.state(name) for name in LAYERS}, "source": self.source}

    @classmethod
    def from_mapping(cls, data: Any, where: str = "[layers]", text: str | None = None,
                     ) -> "Layers":
        """Validate a ``[layers]`` table; ``text`` (the file) lets errors name the line."""
        if not isinstance(data, Mapping):
            raise LayersError(f"{where}: expected a table such as driver = \"fixed\", got "
                              f"{type(data).__name__}")
        values: dict[str, str] = {}
        for raw_key, value in data.items():
            key = str(raw_key).strip().lower()
            name = ALIASES.get(key, key)
            at = _line_of(text, str(raw_key))
            if name not in LAYERS:
                close = difflib.get_close_matches(key, [*LAYERS, *ALIASES], n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise LayersError(f"{where}{at}: {raw_key}: unknown layer{hint}; known layers: "
                                  f"{', '.join(LAYERS)}")
            state = value.strip().lower() if isinstance(value, str) else value
            if isinstance(state, bool):  # driver = true reads as "changeable"
                state = CHANGEABLE if state else FIXED
            if state not in STATES:
                raise LayersError(f"{where}{at}: {raw_key} = {value!r}: expected one of "
                                  f"{', '.join(repr(s) for s in STATES)}")
            values[name] = str(state)
        return cls(**values, source=where)


def _line_of(text: str | None, key: str) -> str:
    """`` line N`` of ``key = ...`` inside the ``[layers]`` table of ``text``, or ``""``."""
    if not text:
        return ""
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            inside = stripped.replace(" ", "") == "[layers]"
            continue
        if inside and re.match(rf"[\"']?{re.escape(key)}[\"']?\s*=", stripped):
            return f" line {number}"
    return ""


def read_table(path: str | Path) -> tuple[dict[str, Any], str]:
    """The whole profile file (TOML, or JSON by suffix) as a table, with its text.

    Raises :class:`LayersError` naming the file (and line) when it cannot be read or parsed.
    """
    from ..config.tables import TableError, read

    try:
        return read(path, "the profile")
    except TableError as exc:
        raise LayersError(str(exc)) from None


def load(path: str | Path | None) -> Layers:
    """Layers stated in the ``[layers]`` table of profile ``path``; all unknown without one."""
    if path is None:
        return Layers(source="no profile (--k3-profile) given")
    data, text = read_table(path)
    table = data.get("layers")
    if table is None:
        return Layers(source=f"{path}: no [layers] table")
    return Layers.from_mapping(table, where=f"{path}: [layers]", text=text)
