"""The official vLLM recipe of a model (vllm-project/recipes ``models/<org>/<model>.yaml``) as
typed data, and the profile one hardware and one serving strategy select from it.

A recipe states, per hardware and per strategy, how vLLM serves the model: the image, the
host driver floor (in its install notes), the minimum GPUs of each strategy, the extra
arguments and environment variables of each hardware generation, the parsers, prefix caching,
the all-to-all backend per interconnect (in its notes) and the engine-ready timeout.
:func:`load_recipe` reads a file, :func:`select` composes one profile the way the recipes
site's command builder does (``src/lib/command-synthesis.js``: base args, strategy args and
parallel sizes, strategy overrides, hardware overrides, default features; last flag wins).

Every value the recipe does not state is None ("unknown"), never a guessed default. What
the recipe's YAML does not carry itself comes from two small tables copied from the recipes
repository (commit 8959cf6, 2026-08-21): :data:`HARDWARE` (``taxonomy.yaml``: brand,
generation, GPUs per node) and :data:`STRATEGIES` (``strategies/*.yaml``: parallelism,
expert parallel, single or multi node). Pure: no pytest, no network. Errors
(:class:`RecipeError`) name the file and list what is valid.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence


class RecipeError(ValueError):
    """A recipe cannot be read, or it has no such hardware or strategy; the message names the
    file and lists the valid names."""


@dataclass(frozen=True)
class HardwareKind:
    """One hardware profile of the recipes taxonomy."""

    brand: str
    generation: str
    gpus_per_node: int
    vram_gb: int


#: ``taxonomy.yaml`` hardware_profiles (the accelerators vLLM recipes name)
HARDWARE: dict[str, HardwareKind] = {
    "h100": HardwareKind("NVIDIA", "hopper", 8, 640),
    "h200": HardwareKind("NVIDIA", "hopper", 8, 1128),
    "b200": HardwareKind("NVIDIA", "blackwell", 8, 1440),
    "b300": HardwareKind("NVIDIA", "blackwell", 8, 2144),
    "gb200": HardwareKind("NVIDIA", "blackwell", 4, 768),
    "gb300": HardwareKind("NVIDIA", "blackwell", 4, 1152),
    "mi300x": HardwareKind("AMD", "amd", 8, 1536),
    "mi325x": HardwareKind("AMD", "amd", 8, 2048),
    "mi355x": HardwareKind("AMD", "amd", 8, 2304),
}


@dataclass(frozen=True)
class StrategyKind:
    """One serving strategy of the recipes repository (``strategies/<name>.yaml``)."""

    parallelism: str            # tp, tep, dep, tp_dp, tp_pp, pd
    multi_node: bool
    vllm_args: tuple[str, ...] = ()


#: ``strategies/*.yaml``: what each strategy name means
STRATEGIES: dict[str, StrategyKind] = {
    "single_node_tp": StrategyKind("tp", False),
    "single_node_tep": StrategyKind("tep", False, ("--enable-expert-parallel",)),
    "single_node_dep": StrategyKind("dep", False, ("--enable-expert-parallel",)),
    "multi_node_tp": StrategyKind("tp", True),
    "multi_node_tep": StrategyKind("tep", True, ("--enable-expert-parallel",)),
    "multi_node_dep": StrategyKind("dep", True, ("--enable-expert-parallel",
                                                 "--data-parallel-hybrid-lb")),
    "multi_node_tp_dp": StrategyKind("tp_dp", True),
    "multi_node_tp_pp": StrategyKind("tp_pp", True),
    "pd_cluster": StrategyKind("pd", True),
}

#: top-level keys of recipe files this module understands (others are reported, not fatal)
KNOWN_KEYS = ("meta", "model", "features", "opt_in_features", "hardware_opt_in_features",
              "variants", "compatible_strategies", "strategy_hardware", "default_strategy",
              "strategy_min_gpus", "hardware_overrides", "strategy_overrides", "guide",
              "dependencies", "kv_offload_support", "omni", "hardware_notes")
READY_TIMEOUT_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"
#: the recipe copies kept in the package (the shipped presets' ``[recipe] file``)
PACKAGED = Path(__file__).resolve().parents[1] / "data" / "recipes"
INTERCONNECT_WORDS = {"rdma": "rdma", "nvlink": "nvlink", "infiniband": "rdma"}

Args = tuple[tuple[str, "str | bool"], ...]


@dataclass(frozen=True)
class Recipe:
    """One recipe file: its identity, hardware and strategies, and the raw tables."""

    path: str
    sha256: str
    title: str
    slug: str | None
    model_id: str | None
    date_updated: str | None
    default_hardware: str | None
    default_strategy: str | None
    hardware: Mapping[str, str]              # name -> status ("verified", ...)
    strategies: tuple[str, ...]              # compatible + opted-in strategies
    data: Mapping[str, Any] = field(repr=False, default_factory=dict)
    unknown_keys: tuple[str, ...] = ()

    @property
    def packaged(self) -> bool:
        """True for a copy kept in the package (``pytest_k3accept/data/recipes``)."""
        return Path(self.path).resolve().parent == PACKAGED

    def identity(self) -> dict[str, Any]:
        """File, model, ``date_updated`` and hash: what a record keeps of the recipe (a
        packaged copy by its place in the package, the same wherever the plugin is
        installed, so two sessions on one recipe never differ by an install path)."""
        file = (f"pytest_k3accept/data/recipes/{Path(self.path).name}" if self.packaged
                else self.path)
        return {"file": file, "title": self.title, "model_id": self.model_id,
                "date_updated": self.date_updated, "sha256": self.sha256}

    def where(self) -> str:
        """The recipe as messages name it: file, date_updated and short hash."""
        return (f"{self.path} ({self.title}, date_updated {self.date_updated or 'unknown'}, "
                f"sha256 {self.sha256[:12]})")

    def supported(self, hardware: str, strategy: str) -> bool:
        """The recipe offers ``strategy`` on ``hardware`` (``strategy_hardware`` grants and
        opt-outs over ``compatible_strategies``)."""
        gate = _keyed(self.data.get("strategy_hardware", {}).get(strategy), hardware)
        if gate is not None:
            return str(gate) != "unsupported"
        return strategy in (self.data.get("compatible_strategies") or [])

    def strategies_on(self, hardware: str) -> tuple[str, ...]:
        """The strategies the recipe offers on ``hardware``."""
        return tuple(s for s in self.strategies if self.supported(hardware, s))


@dataclass(frozen=True)
class Role:
    """One pool of a disaggregated (``pd_cluster``) profile: prefill or decode."""

    name: str
    parallelism: str | None
    tensor_parallel_size: int | None
    min_gpus: int | None
    args: Args
    env: Mapping[str, str]

    @property
    def prefix_caching(self) -> bool | None:
        """``--enable-prefix-caching`` (True), ``--no-enable-prefix-caching`` (False) or
        neither (None: vLLM's default)."""
        return _flag(self.args, "--enable-prefix-caching")

    @property
    def expert_parallel(self) -> bool | None:
        """Expert parallelism of the pool's layout (TEP, DEP: on; None: no layout named)."""
        return self.parallelism in ("tep", "dep") if self.parallelism else None

    @property
    def data_parallel_size(self) -> int | None:
        """The data-parallel size of a DEP pool: its GPU floor over its TP (None otherwise)."""
        if self.parallelism != "dep" or not self.min_gpus:
            return None
        return max(1, self.min_gpus // (self.tensor_parallel_size or 1))


@dataclass(frozen=True)
class Profile:
    """What the recipe says for one hardware and one strategy (None: the recipe does not
    say). ``args`` are the composed vLLM arguments (flag -> value, True for a bare flag,
    False for ``--no-...``), ``env`` the environment variables."""

    recipe: Recipe
    hardware: str
    strategy: str
    brand: str | None
    generation: str | None
    image: str | None
    image_source: str | None
    cuda_major: int | None
    driver_min: str | None
    min_gpus: int | None
    gpus_per_node: int | None
    nodes: int | None
    parallelism: str | None
    expert_parallel: bool | None
    tensor_parallel_size: int | None
    data_parallel_size: int | None
    pipeline_parallel_size: int | None
    args: Args
    env: Mapping[str, str]
    tool_call_parser: str | None
    reasoning_parser: str | None
    prefix_caching: bool | None
    max_model_len: int | None
    all2all: Mapping[str, str]              # interconnect -> backend (the recipe's notes)
    engine_ready_timeout: float | None
    roles: tuple[Role, ...] = ()
    notes: tuple[str, ...] = ()
    #: the ``pd_cluster`` pool the server under test is, when chosen with
    #: ``--k3-strategy pd_cluster:<pool>`` (None: from its ``kv_role``, else unknown)
    pool: str | None = None

    def role(self, name: str | None) -> Role | None:
        """The pool (prefill / decode) of that name, or None."""
        return next((r for r in self.roles if r.name == name), None)

    def arg(self, flag: str) -> str | bool | None:
        """The value of one composed argument (None when the recipe does not give it)."""
        return dict(self.args).get(_key(flag)[0])

    def label(self) -> str:
        """``h200/single_node_tp`` (``b300/pd_cluster:decode`` with a chosen pool)."""
        return f"{self.hardware}/{self.strategy}" + (f":{self.pool}" if self.pool else "")

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-serializable values (evidence and the record)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("recipe", "args", "env", "all2all", "roles")}
        out.update(recipe=self.recipe.identity(), args=dict(self.args), env=dict(self.env),
                   all2all=dict(self.all2all), notes=list(self.notes),
                   roles=[{"name": r.name, "parallelism": r.parallelism,
                           "tensor_parallel_size": r.tensor_parallel_size,
                           "min_gpus": r.min_gpus, "args": dict(r.args),
                           "env": dict(r.env)} for r in self.roles])
        return out


# -- reading -----------------------------------------------------------------------------


def load_recipe(path: str | Path) -> Recipe:
    """Read a vllm-project/recipes YAML file. :class:`RecipeError` (naming the file) for a
    missing file, malformed YAML or a file that is not a recipe; unknown top-level keys are
    kept in ``unknown_keys`` (reported, never fatal)."""
    import yaml

    where = str(path)
    try:
        raw = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise RecipeError(f"--k3-recipe {where}: cannot read the recipe: "
                          f"{exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(raw.decode("utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(f"{where}: not valid YAML{at}: {problem}") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("meta"), Mapping) or not (
            isinstance(data.get("model"), Mapping)):
        raise RecipeError(f"{where}: not a vLLM recipe: expected a mapping with 'meta' and "
                          "'model' tables (vllm-project/recipes models/<org>/<model>.yaml)")
    meta, model = data["meta"], data["model"]
    for key in ("hardware_overrides", "strategy_overrides", "strategy_hardware", "features",
                "variants"):
        if data.get(key) is not None and not isinstance(data[key], Mapping):
            raise RecipeError(f"{where}: {key}: expected a mapping, got "
                              f"{type(data[key]).__name__}")
    compatible = data.get("compatible_strategies") or []
    if not isinstance(compatible, list):
        raise RecipeError(f"{where}: compatible_strategies: expected a list, got "
                          f"{type(compatible).__name__}")
    hw = meta.get("hardware")
    hardware = ({str(k): str(v) for k, v in hw.items()} if isinstance(hw, Mapping)
                else {k: "catalog" for k in HARDWARE})
    opt_ins = [s for s, gates in (data.get("strategy_hardware") or {}).items()
               if isinstance(gates, Mapping) and "supported" in map(str, gates.values())
               and s not in compatible]
    default_hw = meta.get("default_hardware")
    default_st = data.get("default_strategy")
    return Recipe(
        path=where, sha256=hashlib.sha256(raw).hexdigest(),
        title=str(meta.get("title") or model.get("model_id") or Path(where).stem),
        slug=_str(meta.get("slug")), model_id=_str(model.get("model_id")),
        date_updated=_str(meta.get("date_updated")),
        default_hardware=_str(default_hw), default_strategy=_str(default_st),
        hardware=hardware, strategies=tuple(str(s) for s in [*compatible, *opt_ins]),
        data=data, unknown_keys=tuple(str(k) for k in data if k not in KNOWN_KEYS))


# -- selecting ---------------------------------------------------------------------------


def select(recipe: Recipe, hardware: str | None = None, strategy: str | None = None) -> Profile:
    """The recipe's profile for ``hardware`` and ``strategy`` (defaults: the recipe's
    ``meta.default_hardware`` and ``default_strategy``; without ``default_strategy``, the
    recipes site's rule: ``single_node_tp`` when the recipe offers it). ``pd_cluster:decode``
    (or ``:prefill``) also says which pool the server under test is. Unknown or unsupported
    names raise :class:`RecipeError` listing the valid ones."""
    hw = _pick(recipe, hardware, recipe.default_hardware, tuple(recipe.hardware), "hardware")
    strategy, _, pool = (strategy or "").partition(":")
    offered = recipe.strategies_on(hw)
    st = _pick(recipe, strategy, recipe.default_strategy or (
        "single_node_tp" if "single_node_tp" in offered else None), recipe.strategies,
        "strategy")
    if st not in offered:
        raise RecipeError(f"{recipe.where()}: --k3-strategy {st!r} is not supported on {hw} "
                          f"(strategy_hardware); on {hw} the recipe offers: "
                          f"{', '.join(offered) or 'none'}")
    profile = _compose(recipe, hw, st)
    pool = pool.strip()
    if pool and not profile.role(pool):
        pools = ", ".join(f"{st}:{r.name}" for r in profile.roles)
        raise RecipeError(f"{recipe.where()}: --k3-strategy {st}:{pool}: "
                          + (f"the profile has no pool {pool!r}; it has: {pools}" if pools else
                             f"{st} has no pools (only pd_cluster's prefill and decode)"))
    return dataclasses.replace(profile, pool=pool) if pool else profile


def _pick(recipe: Recipe, given: str | None, default: str | None, known: Sequence[str],
          what: str) -> str:
    """``given`` (else ``default``), checked against the names the recipe has."""
    name = (given or "").strip() or default
    option = f"--k3-{what}"
    if not name:
        raise RecipeError(f"{recipe.where()}: the recipe names no default_{what}; choose one "
                          f"with {option}: {', '.join(known)}")
    if name not in known:
        raise RecipeError(f"{recipe.where()}: {option} {name!r}: the recipe has no such "
                          f"{what}; it has: {', '.join(known)}")
    return name


def _compose(recipe: Recipe, hw: str, st: str) -> Profile:
    data, kind = recipe.data, HARDWARE.get(hw)
    gen, brand = (kind.generation, kind.brand) if kind else (None, None)
    shape = STRATEGIES.get(st)
    so = _map(_map(data.get("strategy_overrides")).get(st))
    variant = _map(_map(data.get("variants")).get("default"))
    gpn = kind.gpus_per_node if kind else None
    min_gpus = _min_gpus(data.get("strategy_min_gpus"), st, hw)
    if min_gpus is not None and gpn and shape and not shape.multi_node and min_gpus > gpn:
        raise RecipeError(f"{recipe.where()}: --k3-strategy {st!r} needs {min_gpus} GPUs, "
                          f"more than one {hw} node has ({gpn}); on {hw} choose a multi-node "
                          f"strategy: {', '.join(s for s in recipe.strategies_on(hw) if s != st)}")
    nodes = max(1, math.ceil(min_gpus / gpn)) if min_gpus and gpn else (
        1 if gpn and shape and shape.parallelism != "pd" else None)
    total = gpn * nodes if gpn and nodes else None
    layout = _layout(shape, variant, so, hw, kind, total, nodes)
    pools = shape is not None and shape.parallelism == "pd"
    roles = tuple(_role(recipe, st, variant, so, name, hw, gen, brand)
                  for name in ("prefill", "decode")
                  if pools and isinstance(so.get(name), Mapping))
    strategy_args = [] if pools or shape is None else [*shape.vllm_args,
                                                        *_parallel_args(layout)]
    args = _dedupe(_common_args(recipe, st, variant, so, None, hw, gen, brand, strategy_args))
    env = _env(recipe, variant, so, None, hw, gen, brand)
    text = _prose(data)
    image, source = _image(data, variant, hw, brand, text)
    flags = dict(args)
    prefix = _flag(args, "--enable-prefix-caching")
    if roles:
        states = {r.prefix_caching for r in roles}
        prefix = states.pop() if len(states) == 1 else None
    ready = env.get(READY_TIMEOUT_ENV)
    return Profile(
        recipe=recipe, hardware=hw, strategy=st, brand=brand, generation=gen,
        image=image, image_source=source,
        cuda_major=_cuda_major(data, variant, brand, text), driver_min=_driver(brand, text),
        min_gpus=min_gpus, gpus_per_node=gpn, nodes=nodes,
        parallelism=shape.parallelism if shape else None,
        expert_parallel=layout.get("ep"), tensor_parallel_size=layout.get("tp"),
        data_parallel_size=layout.get("dp"), pipeline_parallel_size=layout.get("pp"),
        args=args, env=env,
        tool_call_parser=_str(flags.get("tool_call_parser")),
        reasoning_parser=_str(flags.get("reasoning_parser")),
        prefix_caching=prefix, max_model_len=_int(flags.get("max_model_len")),
        all2all=_all2all(text), engine_ready_timeout=_float(ready),
        roles=roles, notes=_notes(text))


def _layout(shape: StrategyKind | None, variant: Mapping[str, Any],
            so: Mapping[str, Any], hw: str, kind: HardwareKind | None, total: int | None,
            nodes: int | None) -> dict[str, Any]:
    """Parallel sizes as the command builder emits them (None: not determined)."""
    if shape is None or kind is None or shape.parallelism == "pd":
        return {}
    gpn = kind.gpus_per_node
    multi = shape.multi_node and (nodes or 1) > 1
    p = shape.parallelism
    ep = p in ("tep", "dep")
    if p == "dep":
        return {"ep": True, "dp": total if multi else gpn}
    if p == "tp_dp" and multi:
        return {"ep": False, "tp": gpn, "dp": nodes}
    if p == "tp_pp" and multi:
        return {"ep": False, "tp": gpn, "pp": nodes}
    if multi:
        return {"ep": ep, "tp": total}
    tp = gpn
    if p == "tp":
        declared = _keyed(variant.get("tp"), hw, kind) or so.get("tp")
        vram = variant.get("vram_minimum_gb")
        if isinstance(declared, int) and not isinstance(declared, bool):
            tp = declared
        elif isinstance(vram, (int, float)) and vram <= kind.vram_gb / gpn:
            tp = 1
    return {"ep": ep, "tp": tp}


def _parallel_args(layout: Mapping[str, Any]) -> list[str]:
    out = []
    for key, flag in (("tp", "--tensor-parallel-size"), ("dp", "--data-parallel-size"),
                      ("pp", "--pipeline-parallel-size")):
        if layout.get(key):
            out += [flag, str(layout[key])]
    return out


def _hardware_block(overrides: Any, gen: str | None, brand: str | None) -> Mapping[str, Any]:
    table = _map(overrides)
    block = table.get(gen) if gen else None
    if block is None and brand == "NVIDIA":
        block = table.get("nvidia")
    return _map(block)


def _common_args(recipe: Recipe, st: str, variant: Mapping[str, Any], so: Mapping[str, Any],
                 role: str | None, hw: str, gen: str | None, brand: str | None,
                 strategy_args: Sequence[str]) -> list[str]:
    """The command builder's argument order: base, variant, strategy, strategy override,
    hardware override (the strategy's replaces the recipe's), exact-GPU tweaks, features."""
    data = recipe.data
    args = [*_strs(_map(data.get("model")).get("base_args")),
            *_strs(_map(_map(variant.get("hardware_overrides")).get(hw)).get("extra_args")),
            *strategy_args]
    src = _map(so.get(role)) if role else so
    args += [*_strs(src.get("extra_args")), *_strs(src.get("vllm_args"))]
    strategy_ho = _hardware_block(so.get("hardware_overrides"), gen, brand)
    if strategy_ho:
        args += _strs(strategy_ho.get("extra_args"))
    else:
        args += _strs(_hardware_block(data.get("hardware_overrides"), gen, brand)
                      .get("extra_args"))
        args += _strs(_hardware_block(variant.get("hardware_overrides"), gen, brand)
                      .get("extra_args"))
    args += _strs(_map(_map(so.get("hardware_overrides")).get(hw)).get("extra_args"))
    if role:
        args += _strs(_map(_map(_map(so.get(role)).get("hardware_overrides")).get(hw))
                      .get("extra_args"))
    opt_in = set(_strs(data.get("opt_in_features")))
    for name, feat in _map(data.get("features")).items():
        feat = _map(feat)
        allowed = feat.get("strategies")
        if name in opt_in or feat.get("modes") or (
                isinstance(allowed, list) and st not in map(str, allowed)):
            continue
        ho = _hardware_block(feat.get("hardware_overrides"), gen, brand)
        args += _strs(ho.get("args") if ho.get("args") is not None else feat.get("args"))
    return args


def _env(recipe: Recipe, variant: Mapping[str, Any], so: Mapping[str, Any], role: str | None,
         hw: str, gen: str | None, brand: str | None) -> dict[str, str]:
    data = recipe.data
    env: dict[str, str] = {}
    for table in (_map(data.get("model")).get("base_env"),
                  _map(_map(variant.get("hardware_overrides")).get(hw)).get("extra_env"),
                  so.get("env"), _map(so.get(role)).get("env") if role else so.get("extra_env")):
        env.update({str(k): str(v) for k, v in _map(table).items()})
    strategy_ho = _hardware_block(so.get("hardware_overrides"), gen, brand)
    if strategy_ho:
        env.update({str(k): str(v) for k, v in _map(strategy_ho.get("extra_env")).items()})
    else:
        for block in (_hardware_block(data.get("hardware_overrides"), gen, brand),
                      _hardware_block(variant.get("hardware_overrides"), gen, brand)):
            env.update({str(k): str(v) for k, v in _map(block.get("extra_env")).items()})
    for block in (_map(_map(so.get("hardware_overrides")).get(hw)),
                  _map(_map(_map(so.get(role)).get("hardware_overrides")).get(hw)) if role
                  else {}):
        env.update({str(k): str(v) for k, v in _map(block.get("extra_env")).items()})
    return env


def _role(recipe: Recipe, st: str, variant: Mapping[str, Any], so: Mapping[str, Any], name: str,
          hw: str, gen: str | None, brand: str | None) -> Role:
    table = _map(so.get(name))
    parallelism = _str(table.get("parallelism"))
    strategy_args = ["--enable-expert-parallel"] if parallelism in ("tep", "dep") else []
    tp = _int(table.get("tp"))
    if tp:
        strategy_args += ["--tensor-parallel-size", str(tp)]
    args = _dedupe(_common_args(recipe, st, variant, so, name, hw, gen, brand,
                                strategy_args))
    floor = _min_gpus(recipe.data.get("strategy_min_gpus"), parallelism, hw) if parallelism \
        else None
    return Role(name=name, parallelism=parallelism, tensor_parallel_size=tp, min_gpus=floor,
                args=args, env=_env(recipe, variant, so, name, hw, gen, brand))


def hardware_of(gpu_names: Sequence[str], known: Sequence[str]) -> str | None:
    """The hardware name (of ``known``) the GPUs' model names say: ``NVIDIA H200`` -> ``h200``,
    ``NVIDIA GB200`` -> ``gb200`` (the longest name that is a word of it); None when the names
    say none, or not one for all GPUs."""
    found = set()
    for gpu in gpu_names:
        words = re.findall(r"[a-z0-9]+", gpu.lower())
        hit = next((k for k in sorted(known, key=len, reverse=True) if k.lower() in words), None)
        if hit is None:
            return None
        found.add(hit)
    return found.pop() if len(found) == 1 else None


# -- the recipe's prose: install notes and guide ----------------------------------------


def _prose(data: Mapping[str, Any]) -> str:
    install = _map(_map(data.get("model")).get("install"))
    notes = [str(_map(v).get("note", "")) for v in install.values()]
    return "\n".join([*notes, str(data.get("guide") or "")])


_DRIVER = re.compile(r"\b[rR](\d{3})\+")
_CUDA = re.compile(r"CUDA (\d+)(?:\.\d+)? \(cu\d+\) build only|CUDA (\d+)(?:\.\d+)? only")
_ALL2ALL = re.compile(r"--all2all-backend\s+([\w-]+)`?\s+for\s+(RDMA|NVLink|InfiniBand)", re.I)
_IMAGE = {"NVIDIA": re.compile(r"\bvllm/vllm-openai:[\w.-]*\w"),
          "AMD": re.compile(r"\bvllm/vllm-openai[-_]rocm:[\w.-]*\w")}


def _driver(brand: str | None, text: str) -> str | None:
    m = _DRIVER.search(text) if brand == "NVIDIA" else None
    return m.group(1) if m else None


def _cuda_map(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) and any(
        str(k).startswith("cu") and str(k)[2:].isdigit() for k in value) else None


def _image_table(data: Mapping[str, Any], variant: Mapping[str, Any], hw: str) -> list[Any]:
    return [_map(_map(variant.get("hardware_overrides")).get(hw)).get("docker_image"),
            variant.get("docker_image"), _map(data.get("model")).get("docker_image")]


def _image(data: Mapping[str, Any], variant: Mapping[str, Any], hw: str, brand: str | None,
           text: str) -> tuple[str | None, str | None]:
    key = (brand or "").lower()
    for i, value in enumerate(_image_table(data, variant, hw)):
        if isinstance(value, str) and i == 0:
            return value, f"variants.default.hardware_overrides.{hw}.docker_image"
        if isinstance(value, str) and brand == "NVIDIA":
            return value, "docker_image"
        if isinstance(value, Mapping):
            picked = value.get(key) if key in value else (value if _cuda_map(value) and
                                                          brand == "NVIDIA" else None)
            cuda = _cuda_map(picked)
            if cuda:
                picked = cuda.get("cu130") or next(iter(cuda.values()))
            if isinstance(picked, str):
                return picked, "model.docker_image" if i == 2 else "variants.default.docker_image"
    pattern = _IMAGE.get(brand or "")
    m = pattern.search(text) if pattern else None
    return (m.group(0).replace("openai_rocm", "openai-rocm"), "guide") if m else (None, None)


def _cuda_major(data: Mapping[str, Any], variant: Mapping[str, Any], brand: str | None,
                text: str) -> int | None:
    if brand != "NVIDIA":
        return None
    for value in _image_table(data, variant, ""):
        cuda = _cuda_map(_map(value).get("nvidia")) or _cuda_map(value)
        if cuda and len(cuda) == 1:
            (name,) = cuda
            return int(str(name)[2:]) // 10
    m = _CUDA.search(text)
    return int(m.group(1) or m.group(2)) if m else None


def _all2all(text: str) -> dict[str, str]:
    return {INTERCONNECT_WORDS[m.group(2).lower()]: m.group(1) for m in _ALL2ALL.finditer(text)}


def _notes(text: str) -> tuple[str, ...]:
    """The guide's notes the checks act on (e.g. the tool-call format advice)."""
    return tuple(line.strip().lstrip("-").strip() for line in text.splitlines()
                 if re.match(r"\s*-\s*\*\*Tool call", line))


# -- small helpers -----------------------------------------------------------------------


def _key(flag: str) -> tuple[str, bool]:
    """``--no-enable-x`` -> ("enable_x", False); ``--max-model-len`` -> ("max_model_len", True)."""
    name = flag.lstrip("-")
    if name.startswith("no-"):
        return name[3:].replace("-", "_"), False
    return name.replace("-", "_"), True


def _dedupe(tokens: Sequence[str]) -> Args:
    """argv -> ordered (key, value) pairs, the last occurrence of a flag winning (the
    command builder's last-wins dedupe); ``--no-x`` sets ``x`` to False."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            i += 1
            continue
        key, positive = _key(tok.split("=", 1)[0])
        out.pop(key, None)
        if "=" in tok:
            out[key] = tok.split("=", 1)[1]
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            out[key] = tokens[i + 1]
            i += 1
        else:
            out[key] = positive
        i += 1
    return tuple(out.items())


def _flag(args: Args, flag: str) -> bool | None:
    value = dict(args).get(_key(flag)[0])
    return value if isinstance(value, bool) else None


def _min_gpus(cfg: Any, strategy: str, hw: str) -> int | None:
    """``strategy_min_gpus``: a number, or per strategy with exact-GPU floors (highest wins)."""
    if cfg is None:
        return None
    if isinstance(cfg, int) and not isinstance(cfg, bool):
        return cfg

    def block(b: Any) -> int:
        if isinstance(b, int) and not isinstance(b, bool):
            return b
        b = _map(b)
        short = strategy.replace("multi_node_", "").replace("single_node_", "")
        value = next((b[k] for k in (strategy, short, f"multi_node_{short}",
                                     f"single_node_{short}") if k in b), 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    cfg = _map(cfg)
    floor = max(block(cfg), block(cfg.get(hw)) if hw in cfg else 0)
    return floor or None


def _keyed(table: Any, hw: str, kind: HardwareKind | None = None) -> Any:
    """A hardware-keyed value: exact id, then generation, brand, ``default``."""
    if not isinstance(table, Mapping):
        return table if table is not None and not isinstance(table, Mapping) else None
    kind = kind or HARDWARE.get(hw)
    for key in (hw, kind.generation if kind else None, kind.brand.lower() if kind else None,
                "default"):
        if key is not None and key in table:
            return table[key]
    return None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strs(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return str(value) if value is not None and not isinstance(value, bool) and str(value) else None


def _int(value: Any) -> int | None:
    try:
        return int(str(value)) if value is not None and not isinstance(value, bool) else None
    except ValueError:
        return None


def _float(value: Any) -> float | None:
    try:
        number = float(str(value)) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) and number > 0 else None


__all__ = ["Recipe", "RecipeError", "Profile", "Role", "load_recipe", "select", "HARDWARE",
           "STRATEGIES", "KNOWN_KEYS", "PACKAGED", "hardware_of"]
