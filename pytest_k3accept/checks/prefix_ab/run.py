"""The I/O of the prefix-cache A/B: run one request set on each side, then compare.

Each side runs the *same* request set through the load runner one request at a time
(closed loop, concurrency 1: every repeat of a prefix comes after the request that cached
it), with ``/metrics`` scraped before and after for the prefix-cache counters and the
prefill-time histogram, and KV usage sampled during the run. The pure decision is
:func:`pytest_k3accept.checks.prefix_ab.compare.compare`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from .compare import ABError, ABResult, Arm, PrefixShape, arm_from_load, assign, compare
from .compare import prefix_shape
from .blocks import CacheBlocks, from_config, synthetic_sizes

if TYPE_CHECKING:  # pragma: no cover
    from ...observe.endpoint.client import K3Client
    from ...observe.load.requestset import RequestSet

#: default request set: 6 requests sharing a system prompt of whole blocks (256 tokens: two
#: CPU blocks; :func:`.blocks.synthetic_sizes` on the live config), each with a unique part
#: under one block in align mode
DEFAULT_REQUESTS, DEFAULT_PREFIX, DEFAULT_CONTEXT = 6, 256, 356


@dataclass(frozen=True)
class Side:
    """One server to measure: its role as launched (``on``/``off``/``?``), URL and model."""

    label: str
    base_url: str
    model: str


async def default_request_set(client: "K3Client", *, requests: int = DEFAULT_REQUESTS,
                              prefix_tokens: int = DEFAULT_PREFIX,
                              context_tokens: int = DEFAULT_CONTEXT) -> "RequestSet":
    """A request set whose system prompt (``prefix_tokens`` tokens of the served model,
    measured with ``/tokenize``) repeats in every request; user turns differ."""
    from ...observe.load.profile import LoadProfile
    from ...observe.load.synthetic import generate

    profile = LoadProfile(name="prefix-cache-ab", context_tokens=context_tokens,
                          prefix_tokens=prefix_tokens, prefix_reuse=1.0, requests=requests,
                          output_tokens=8)
    return await generate(client, profile)


async def shape_of(client: "K3Client", rs: "RequestSet", block_size: "int | CacheBlocks",
                   ) -> PrefixShape:
    """The request set's prefix shape in tokens of the served model (``/tokenize``), by the
    live block arithmetic (a :class:`~.blocks.CacheBlocks`, or a plain block size)."""
    import httpx

    ids = []
    for req in rs.requests:
        extra: dict[str, Any] = {"tools": req.tools} if req.tools else {}
        try:
            ids.append(await client.tokenize(messages=req.messages, **extra))
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise ABError(f"cannot tokenize the A/B request set at {client.base_url}/tokenize "
                          f"({type(exc).__name__}: {exc}); the A/B needs a vLLM server") from None
    if isinstance(block_size, int):
        return prefix_shape(ids, block_size)
    blocks = block_size
    return prefix_shape(ids, blocks.block_size or blocks.unit, unit=blocks.unit,
                        align=blocks.align)


async def live_config(base_url: str, api_key: str | None, timeout: float) -> dict[str, str]:
    """``vllm:cache_config_info`` labels of a server; :class:`ABError` without metrics."""
    from ...observe.endpoint.auth import auth_headers
    from ...observe.metrics import MetricsScraper, MetricsUnavailable

    try:
        snap = await MetricsScraper(base_url, headers=auth_headers(api_key),
                                    timeout=timeout).ascrape()
    except MetricsUnavailable as exc:
        raise ABError(f"the prefix-cache A/B needs vLLM metrics: {exc}") from None
    return snap.cache_config()


async def run_side(side: Side, rs: "RequestSet", *, api_key: str | None, timeout: float,
                   config: dict[str, str]) -> Arm:
    """Run ``rs`` once on one side and return its figures."""
    from ...observe.endpoint.client import K3Client
    from ...observe.endpoint.auth import auth_headers
    from ...observe.load.profile import LoadProfile
    from ...observe.load.runner import run_load
    from ...observe.metrics import MetricsScraper

    profile = LoadProfile(name=f"prefix-cache-{side.label}", concurrency=1,
                          requests=len(rs), output_tokens=8, timeout=timeout,
                          max_seconds=max(60.0, timeout * len(rs)))
    scraper = MetricsScraper(side.base_url, headers=auth_headers(api_key), timeout=timeout)
    async with K3Client(side.base_url, side.model, api_key=api_key, timeout=timeout) as client:
        result = await run_load(client, rs, profile, metrics=scraper)
    if result.server is None:
        raise ABError(f"no server metrics from {side.base_url} during the A/B: "
                      f"{result.server_error}")
    return arm_from_load(side.label, result, config)


async def run_ab(sides: Sequence[Side], rs: "RequestSet | None" = None, *,
                 api_key: str | None = None, timeout: float = 60.0) -> ABResult:
    """Measure every side with the same request set and compare cache on vs off.

    ``sides``: one or two servers (a second one is the other side of the A/B); which is
    "on" is read from each server's live config. ``rs`` defaults to
    :func:`default_request_set` built on the first side.
    """
    from ...observe.endpoint.client import K3Client

    if not sides:
        raise ABError("the prefix-cache A/B needs at least one server")
    configs = [await live_config(s.base_url, api_key, timeout) for s in sides]
    async with K3Client(sides[0].base_url, sides[0].model, api_key=api_key,
                        timeout=timeout) as client:
        blocks = from_config(configs)
        if rs is None:
            prefix, context = synthetic_sizes(blocks)
            rs = await default_request_set(client, prefix_tokens=prefix, context_tokens=context)
        shape = await shape_of(client, rs, blocks)
    placeholders = [Arm(s.label, s.base_url, c) for s, c in zip(sides, configs)]
    on, off, notes = assign(placeholders)
    arms: dict[str, Arm | None] = {"on": None, "off": None}
    for role, chosen in (("on", on), ("off", off)):
        if chosen is None:
            continue
        side = next(s for s in sides if s.base_url == chosen.base_url)
        arms[role] = await run_side(Side(role, side.base_url, side.model), rs,
                                    api_key=api_key, timeout=timeout,
                                    config=chosen.cache_config)
    if blocks.block_size is None:
        notes.append(f"no server reports its block size (vllm:cache_config_info block_size): "
                     f"prefixes are counted in blocks of {blocks.unit}, vLLM's GPU default")
    result = compare(arms["on"], arms["off"], shape, notes)
    result.notes.append(f"request set {rs.name or 'inline'} ({len(rs)} requests, "
                        f"fingerprint {rs.fingerprint()[:12]})")
    return result
