"""Deployment presets: what the suites expect of a deployment, kept in one data file.

A preset names the environment (host driver, image CUDA runtime, GPU topology), the server's
configuration (parallel layout, prefix caching, tool-call and reasoning parsers), the target
load defaults and the per-suite values. The suites read every expectation from it; a team
serving another model writes its own file and passes ``--k3-preset PATH``. Shipped presets:
``kimi-k3`` (the default: its deployment expectations derived from the copy of Kimi K3's
official vLLM recipe kept in the package, ``[recipe]``) and ``testbed`` (the embedded CPU
testbed: no GPU, so the GPU expectations are absent and those checks skip with the reason).

An expectation that is absent from a preset is *not checked*, and the check says so (with the
preset's ``reason`` for the table, when it gives one), never silently passes. Pure: no pytest,
no network. Errors (:class:`PresetError`) name the file, the field and what is expected.
"""

from __future__ import annotations

from pathlib import Path

from ...checks.slo import SLOError, suggest
from ._fields import from_mapping
from ..recipe import Profile
from .derive import preset_from_recipe
from .model import (DEFAULT, HERE, INTERCONNECTS, PREFIX_MODES, Environment, Preset, PresetError,
                    RecipeRef, Server, Suites, Targets)


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


def read_preset(name_or_path: str | Path) -> Preset:
    """The preset file as written (its ``[recipe]`` not applied). Raises
    :class:`PresetError` naming the file and the field for any bad value."""
    from ..tables import TableError, read

    path = resolve(name_or_path)
    try:
        data, _ = read(path, "the preset")
    except TableError as exc:
        raise PresetError(str(exc)) from None
    return from_mapping(data, path)


def preset_profile(base: Preset, recipe: str | Path | None = None,
                   hardware: str | None = None, strategy: str | None = None,
                   ) -> Profile | None:
    """The recipe profile a preset's deployment expectations come from: ``recipe`` (the
    ``--k3-recipe`` file) else the preset's ``[recipe] file``; ``hardware`` / ``strategy``
    else (for the preset's own recipe) its ``[recipe]`` names, else the recipe's defaults.
    None when neither names a recipe. :class:`~pytest_k3accept.config.recipe.RecipeError`
    for a bad recipe or name, :class:`PresetError` for a hardware or strategy without one."""
    from ..recipe import RecipeError, load_recipe, select

    ref = base.recipe
    if recipe is None and ref is None:
        if hardware or strategy:
            raise PresetError(f"--k3-hardware / --k3-strategy choose a profile of the official "
                              f"recipe, but no recipe was given: pass --k3-recipe FILE (the "
                              f"preset {base.name!r} ({base.source}) names none in [recipe])")
        return None
    if recipe is not None:
        return select(load_recipe(recipe), hardware, strategy)
    assert ref is not None
    try:
        return select(load_recipe(ref.file), hardware or ref.hardware,
                      strategy or ref.strategy)
    except RecipeError as exc:
        raise RecipeError(f"preset {base.name!r} ({base.source}) [recipe]: {exc}") from None


def load_with_recipe(name_or_path: str | Path, recipe: str | Path | None = None,
                     hardware: str | None = None, strategy: str | None = None,
                     ) -> tuple[Preset, Profile | None]:
    """The preset with its recipe profile applied (:func:`preset_profile`,
    :func:`preset_from_recipe`), and that profile (None: the preset names no recipe and none
    was given)."""
    base = read_preset(name_or_path)
    profile = preset_profile(base, recipe, hardware, strategy)
    return (base if profile is None else preset_from_recipe(base, profile)), profile


def load_preset(name_or_path: str | Path, recipe: str | Path | None = None,
                hardware: str | None = None, strategy: str | None = None) -> Preset:
    """Read a preset by shipped name (``"kimi-k3"``, ``"testbed"``) or file path (TOML or
    JSON), with the deployment expectations of its recipe profile (``[recipe]``, or
    ``recipe`` / ``hardware`` / ``strategy`` as given: :func:`preset_profile`). Raises
    :class:`PresetError` naming the file and the field for any bad value."""
    return load_with_recipe(name_or_path, recipe, hardware, strategy)[0]


__all__ = ["Preset", "PresetError", "Environment", "Server", "Targets", "Suites", "RecipeRef",
           "load_preset", "load_with_recipe", "read_preset", "preset_profile", "resolve",
           "shipped", "from_mapping", "preset_from_recipe", "DEFAULT", "HERE",
           "INTERCONNECTS", "PREFIX_MODES", "SLOError"]
