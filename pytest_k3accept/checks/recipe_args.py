"""The recipe's serving arguments and environment checked against the live server (issue 19).

:func:`check_args` compares the composed arguments of a recipe profile
(:class:`~pytest_k3accept.config.recipe.Profile` ``args``: flag key -> value, True for a bare
flag, False for ``--no-...``) with what the server runs: its log's ``non-default args`` line
(vLLM logs only the arguments that differ from its defaults) or the launch command the
session started. :func:`check_env` does the same for environment variables, known only from
a launch command. Each comparison is an :class:`ArgCheck`: ``ok`` True (as the recipe says),
False (a different value: the message names the recipe value, the live value, the recipe
file, its date and the profile) or None (unknown: never a pass).

An argument missing from the non-default line runs at vLLM's default. Where that default is
known (:data:`VLLM_DEFAULTS`, read from vLLM 0.32's ``EngineArgs``) it is compared; otherwise
the check is unknown.

A ``pd_cluster`` profile has two pools (prefill: TEP; decode: DEP with prefix caching off),
and one server is one of them. :func:`check_profile` judges the pool the server is: the one
chosen with ``--k3-strategy pd_cluster:<pool>``, else the one its ``--kv-transfer-config``
names (:func:`pool_of`: ``kv_role`` ``kv_producer`` = prefill, ``kv_consumer`` = decode, read
from the non-default args line or the launch command). ``kv_both`` (NixlConnector's usual on
both pools) or no KV transfer config does not say: then only the arguments both pools share
are compared and the pool's own (layout, prefix caching, its arguments and variables) are one
unknown check naming why, never a pass. Pure: no pytest, no network.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from ..config.recipe import Profile

#: vLLM's defaults for arguments a recipe commonly sets (vLLM 0.32 ``EngineArgs`` and the
#: configs it reads them from); an argument at its default is absent from the
#: ``non-default args`` line
VLLM_DEFAULTS: dict[str, Any] = {
    "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1,
    "enable_expert_parallel": False, "trust_remote_code": False,
    "disable_custom_all_reduce": False, "enable_auto_tool_choice": False,
    "tool_call_parser": None, "reasoning_parser": "", "kv_cache_dtype": "auto",
    "enforce_eager": False, "moe_backend": "auto", "attention_backend": None,
    "gpu_memory_utilization": 0.92,
}

#: where the live values came from
LOG, COMMAND = "the server log's non-default args", "the launch command"


@dataclass(frozen=True)
class ArgCheck:
    """One recipe argument (or environment variable) against the live server."""

    #: the argument's key (``max_num_seqs``) or the variable's name (never a field called
    #: "key": the record's redactor hides the value of anything named like a key)
    name: str
    recipe: Any
    live: Any
    ok: bool | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        """Plain values (evidence)."""
        return {"name": self.name, "recipe": self.recipe, "live": self.live, "ok": self.ok,
                "message": self.message}


def flag_of(key: str, value: Any = None) -> str:
    """``max_num_seqs`` -> ``--max-num-seqs`` (``--no-x`` for a False bare flag)."""
    name = key.replace("_", "-")
    return f"--no-{name}" if value is False else f"--{name}"


def _norm(value: Any) -> Any:
    """A value in one comparable form: bools stay, numbers and numeric strings become
    float, JSON strings their parsed value, other strings themselves."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        try:
            return float(text)
        except ValueError:
            pass
        if text[:1] in "[{":
            try:
                return json.loads(text)
            except ValueError:
                return text
        return text
    return value


def _same(recipe: Any, live: Any) -> bool:
    if recipe is True and live is None:  # a bare flag the log wrote without a value
        return False
    return bool(_norm(recipe) == _norm(live))


def _show(value: Any) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return "unset" if value is None or value == "" else repr(value)


def check_args(args: Mapping[str, Any], live: Mapping[str, Any] | None, *, source: str,
               where: str) -> list[ArgCheck]:
    """Each recipe argument against ``live`` (the server's arguments by key; None: unknown,
    every check then says why). ``source`` is :data:`LOG` or :data:`COMMAND`; ``where``
    names the recipe (file, date, profile) in the messages."""
    out = []
    for key, want in args.items():
        flag = flag_of(key, want)
        if live is None:
            out.append(ArgCheck(key, want, None, None,
                                f"{flag}: unknown: the server's arguments are not known "
                                f"(recipe {where} sets {_show(want)})"))
            continue
        if key in live:
            got: Any = live[key]
            how = source
        elif source == COMMAND:  # a flag the command does not give runs at vLLM's default
            got, how = VLLM_DEFAULTS.get(key, _UNKNOWN), "vLLM's default (not on the command)"
        elif key in VLLM_DEFAULTS:
            got, how = VLLM_DEFAULTS[key], "vLLM's default (not among the non-default args)"
        else:
            got, how = _UNKNOWN, ""
        if got is _UNKNOWN:
            out.append(ArgCheck(key, want, None, None,
                                f"{flag}: unknown: not in {source}, so the server runs vLLM's "
                                f"default, which this plugin does not know for it (recipe "
                                f"{where} sets {_show(want)})"))
            continue
        ok = _same(want, got)
        words = (f"{flag}: {_show(got)} as the recipe says ({how})" if ok else
                 f"{flag}: the server runs {_show(got)} ({how}), the recipe {where} says "
                 f"{_show(want)}")
        out.append(ArgCheck(key, want, got, ok, words))
    return out


def check_env(env: Mapping[str, str], live: Mapping[str, str] | None, *,
              where: str) -> list[ArgCheck]:
    """Each recipe environment variable against the launch command's (``live``; None: the
    server's environment is not known: each check is unknown)."""
    out = []
    for name, want in env.items():
        if live is None:
            out.append(ArgCheck(name, want, None, None,
                                f"{name}: unknown: the server's environment is not known "
                                f"(only a launch command shows it); recipe {where} sets "
                                f"{want!r}"))
        elif name not in live:
            out.append(ArgCheck(name, want, None, False,
                                f"{name}: not set on the launch command, the recipe {where} "
                                f"sets {want!r}"))
        else:
            ok = str(live[name]) == str(want)
            out.append(ArgCheck(name, want, live[name], ok,
                                f"{name}={live[name]!r} as the recipe says" if ok else
                                f"{name}={live[name]!r} on the launch command, the recipe "
                                f"{where} sets {want!r}"))
    return out


#: ``--kv-transfer-config`` ``kv_role`` -> the pd_cluster pool it makes a server
POOL_OF_KV_ROLE = {"kv_producer": "prefill", "kv_consumer": "decode"}
_KV_ROLE = re.compile(r"""kv_role['"]?\s*[:=]\s*['"]?(\w+)""")


def pool_of(kv_transfer: Any) -> tuple[str | None, str]:
    """The pool a server is from its KV transfer config: a mapping, the flag's JSON, or the
    ``KVTransferConfig(...)`` repr of vLLM's non-default args line (any text holding
    ``kv_role``). Returns (pool, how) or (None, why not)."""
    if kv_transfer is None:
        return None, "the server shows no --kv-transfer-config"
    if isinstance(kv_transfer, Mapping):
        role = kv_transfer.get("kv_role")
    else:
        m = _KV_ROLE.search(str(kv_transfer))
        role = m.group(1) if m else None
    if role is None:
        return None, "its --kv-transfer-config names no kv_role"
    pool = POOL_OF_KV_ROLE.get(str(role))
    if pool is None:
        return None, (f"its --kv-transfer-config kv_role is {role!r}, which does not say the "
                      "pool (kv_producer = prefill, kv_consumer = decode)")
    return pool, f"kv_role {role!r} of its --kv-transfer-config"


def profile_keys(profile: "Profile") -> tuple[str, ...]:
    """The argument keys to read from the server: the profile's, its pools' and what
    identifies a pool (``kv_transfer_config``) or its layout."""
    keys = dict.fromkeys([*dict(profile.args), *(k for r in profile.roles for k in dict(r.args))])
    if profile.roles:
        keys.update(dict.fromkeys(("kv_transfer_config", "enable_expert_parallel",
                                   "tensor_parallel_size", "data_parallel_size",
                                   "enable_prefix_caching")))
    return tuple(keys)


def check_profile(profile: "Profile", live: Mapping[str, Any] | None,
                  live_env: Mapping[str, str] | None, *, source: str, where: str,
                  kv_transfer: Any = None) -> list[ArgCheck]:
    """The profile's arguments and environment against the server (:func:`check_args`,
    :func:`check_env`); for a ``pd_cluster`` profile, those of the pool the server is
    (``profile.pool``, else :func:`pool_of` ``kv_transfer``, else the live
    ``kv_transfer_config``), with its data-parallel floor (DEP)."""
    if not profile.roles:
        return [*check_args(dict(profile.args), live, source=source, where=where),
                *check_env(dict(profile.env), live_env, where=where)]
    role = profile.role(profile.pool)
    how = "--k3-strategy " + profile.label().split("/", 1)[1]
    if role is None:
        given = kv_transfer if kv_transfer is not None else (live or {}).get(
            "kv_transfer_config")
        name, how = pool_of(given)
        role = profile.role(name)
    if role is None:
        shared = {k: v for k, v in profile.args
                  if all(dict(r.args).get(k, _UNKNOWN) == v for r in profile.roles)}
        env = {k: v for k, v in profile.env.items()
               if all(r.env.get(k) == v for r in profile.roles)}
        pools = "; ".join(
            f"{r.name}: {r.parallelism} TP{r.tensor_parallel_size}"
            + (f" DP{r.data_parallel_size}" if r.data_parallel_size else "")
            + (", prefix caching off" if r.prefix_caching is False else "")
            for r in profile.roles)
        return [*check_args(shared, live, source=source, where=where),
                *check_env(env, live_env, where=where),
                ArgCheck("pd_cluster_pool", [r.name for r in profile.roles], None, None,
                         f"pd_cluster pool: unknown: which pool this server is cannot be told "
                         f"({how}), so the pool's own layout, prefix caching, arguments and "
                         f"variables ({pools}) are not checked; recipe {where}. Choose it "
                         f"with --k3-strategy pd_cluster:prefill or pd_cluster:decode")]
    at = f"{where}, {role.name} pool ({how})"
    out = [*check_args(dict(role.args), live, source=source, where=at),
           *check_env(dict(role.env), live_env, where=at)]
    floor = role.data_parallel_size
    if floor:
        got = (live or {}).get("data_parallel_size", VLLM_DEFAULTS["data_parallel_size"]
                               if live is not None else None)
        size = _norm(got)
        ok = None if got is None or not isinstance(size, float) else size >= floor
        out.append(ArgCheck(
            "data_parallel_size", floor, got, ok,
            f"--data-parallel-size: unknown: the server's arguments are not known (recipe "
            f"{at}: DEP over {role.min_gpus} GPUs, at least {floor})" if ok is None else
            f"--data-parallel-size: {got} as the recipe's DEP needs (at least {floor})" if ok
            else f"--data-parallel-size: the server runs {got}, the recipe {at} runs DEP over "
                 f"{role.min_gpus} GPUs: at least {floor}"))
    return out


def check_hardware(profile: "Profile", gpu_names: list[str], *, where: str) -> list[ArgCheck]:
    """The host's GPU model against the profile's hardware (the host facts' GPU names; none
    known: no check, the topology test reports the facts). A profile of other hardware than
    the host's fails, naming the ``--k3-hardware`` that fits."""
    from ..config.recipe import HARDWARE, hardware_of

    names = sorted(set(gpu_names))
    seen = hardware_of(names, [*HARDWARE, *profile.recipe.hardware]) if names else None
    if seen is None:
        return []
    shown = ", ".join(names)
    if seen == profile.hardware:
        return [ArgCheck("hardware", profile.hardware, seen, True,
                         f"hardware: the host's GPUs ({shown}) are {seen}, as the profile")]
    offered = ("" if seen in profile.recipe.hardware else
               f" (the recipe has no {seen} profile; it has: "
               f"{', '.join(profile.recipe.hardware)})")
    return [ArgCheck("hardware", profile.hardware, seen, False,
                     f"hardware: the host's GPUs are {shown} ({seen}), but the expectations "
                     f"are the recipe {where}'s for {profile.hardware}: pass --k3-hardware "
                     f"{seen}{offered}")]


class _Unknown:
    def __repr__(self) -> str:
        return "<unknown>"


_UNKNOWN: Any = _Unknown()


def summary(checks: list[ArgCheck]) -> tuple[list[str], list[str]]:
    """The messages of the checks that failed, and of those that are unknown."""
    return ([c.message for c in checks if c.ok is False],
            [c.message for c in checks if c.ok is None])
