"""Deployment presets: what the suites expect of a deployment, kept in one data file.

A preset names the environment (host driver, image CUDA runtime, GPU topology), the server's
configuration (parallel layout, prefix caching, tool-call and reasoning parsers), the target
load defaults and the per-suite values. The suites read every expectation from it; a team
serving another model writes its own file and passes ``--k3-preset PATH``. Shipped presets:
``kimi-k3`` (the default: Kimi K3's official vLLM recipe) and ``testbed`` (the embedded CPU
testbed: no GPU, so the GPU expectations are absent and those checks skip with the reason).

An expectation that is absent from a preset is *not checked*, and the check says so (with the
preset's ``reason`` for the table, when it gives one), never silently passes. Pure: no pytest,
no network. Errors (:class:`PresetError`) name the file, the field and what is expected.
"""

from __future__ import annotations

from pathlib import Path

from ...checks.slo import SLOError, suggest
from ._fields import from_mapping
from .derive import preset_from_recipe
from .model import (DEFAULT, HERE, INTERCONNECTS, PREFIX_MODES, Environment, Preset, PresetError,
                    Server, Suites, Targets)


def shipped() -> dict[str, Path]:
    """The presets shipped with the plugin: name -> file."""
    return {p.stem: p for p in sorted(HERE.glob("*.toml"))}


def resolve(name_or_path: str | Path) -> Path:
    """The preset file for a shipped name or a path; :class:`PresetError` if there is none."""
    text = str(name_or_path).strip()
    if not text:
        raise PresetError("--k3-preset: empty value; give a shipped preset name "
                          f"({', '.join(shipped())}) or a path to a preset file")
    known = shipped()
    if text in known:
        return known[text]
    path = Path(text).expanduser()
    if path.is_file():
        return path
    looks_like_path = any(c in text for c in "/\\") or path.suffix in (".toml", ".json")
    hint = "" if looks_like_path else suggest(text, list(known))
    raise PresetError(f"--k3-preset {text!r}: no such preset file"
                      f"{'' if looks_like_path else ' and no shipped preset of that name'}"
                      f"{hint}; shipped presets: {', '.join(known)}")


def load_preset(name_or_path: str | Path) -> Preset:
    """Read a preset by shipped name (``"kimi-k3"``, ``"testbed"``) or file path (TOML or
    JSON). Raises :class:`PresetError` naming the file and the field for any bad value."""
    from ..tables import TableError, read

    path = resolve(name_or_path)
    try:
        data, _ = read(path, "the preset")
    except TableError as exc:
        raise PresetError(str(exc)) from None
    return from_mapping(data, path)



__all__ = ["Preset", "PresetError", "Environment", "Server", "Targets", "Suites",
           "load_preset", "resolve", "shipped", "from_mapping", "preset_from_recipe", "DEFAULT", "HERE",
           "INTERCONNECTS", "PREFIX_MODES", "SLOError"]
