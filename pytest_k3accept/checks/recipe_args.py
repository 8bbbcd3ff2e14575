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
the check is unknown. Pure: no pytest, no network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

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


class _Unknown:
    def __repr__(self) -> str:
        return "<unknown>"


_UNKNOWN: Any = _Unknown()


def summary(checks: list[ArgCheck]) -> tuple[list[str], list[str]]:
    """The messages of the checks that failed, and of those that are unknown."""
    return ([c.message for c in checks if c.ok is False],
            [c.message for c in checks if c.ok is None])
