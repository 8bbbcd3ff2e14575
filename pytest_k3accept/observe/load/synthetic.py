"""Synthetic requests of an exact prompt length in tokens of the *served* model.

Lengths are measured with the server's own ``/tokenize`` (chat template and tools
included), never guessed from characters. Each request is ``[system, user]``:

* the **system** message is the shared prefix: rendered alone it is ``prefix_tokens`` long
  (within one token); a ``prefix_reuse`` share of the requests carry the *same* system
  text (prefix-cache hits possible), the others a unique text of the same length;
* the **user** message is unique filler that brings the whole rendered prompt (with the
  generation prompt) to ``context_tokens`` (within one token).

Filler is whole words from a fixed list, chosen by a seeded RNG, so a profile and a seed
always give the same set (the text of ``n`` words is a prefix of the text of ``n + k``). Word
counts are found by a secant search on measured counts (a few ``/tokenize`` calls per message).

A long user message (more than :data:`LONG_WORDS` words) is probed whole as few times as
possible: each probe of a multi-MiB text is most of the generator's cost (the server's
tokenizer, HF ``tokenizers``, also costs more per token there). After the first whole probe,
the words to add (or drop) are fitted on their own: the tokens of words ``a .. b-1`` are the
count of those words after the word before them, minus that word alone (small calls; no
template or boundary counted twice), and the next whole probe checks the result. The whole
count is always the length reported: where the tokenizer's tokens are not additive at word
boundaries, the secant search on whole texts goes on from there.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Awaitable, Callable, Sequence

from .profile import LoadProfile
from .requestset import ChatRequest, RequestSet

WORDS: tuple[str, ...] = tuple((
    "time day year people way thing world life hand part child eye woman place work week "
    "case point number group problem fact water room mother area money story month lot "
    "right study book word business issue side kind head house service friend father power "
    "hour game line end member law car city community name president team minute idea kid "
    "body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education good new first last long great little own other old big high different small "
    "large next early young important few public bad same able red blue green quiet happy"
).split())

Counter = Callable[[list[dict[str, Any]], bool], Awaitable[int]]

#: a user message of more words than this is probed whole as few times as possible (module
#: docstring); below it whole probes are cheap and the plain secant search runs
LONG_WORDS = 4096


class SyntheticError(ValueError):
    """The requested lengths cannot be built (e.g. a prefix shorter than the template)."""


class _Filler:
    """The seeded filler of one message, drawn as far as it is asked for (one RNG, drawn in
    order: the text of ``n`` words is a prefix of the text of ``n + k``), never drawn twice."""

    def __init__(self, rng_seed: int) -> None:
        self._rng = random.Random(rng_seed)
        self._words: list[str] = []

    def text(self, a: int, b: int | None = None) -> str:
        """Words ``a .. b-1`` (``text(n)``: the first ``n``), joined."""
        a, b = (0, a) if b is None else (a, b)
        while len(self._words) < b:
            self._words.append(self._rng.choice(WORDS))
        return " ".join(self._words[a:b])


def _text(rng_seed: int, n: int) -> str:
    return _Filler(rng_seed).text(n)


async def _fit(count: Callable[[int], Awaitable[int]], target: int, empty: int,
               per_word: float, what: str, start: tuple[int, int] | None = None,
               ) -> tuple[int, int]:
    """Smallest-error word count ``n`` with ``count(n words)`` == target (or within 1);
    ``start``: a word count already counted, ``(n, count)``, to search on from."""
    if target < empty:
        raise SyntheticError(f"{what}: target {target} tokens is shorter than the prompt "
                             f"without any text ({empty} tokens: chat template and tool "
                             "definitions); raise the target")
    n = max(0, round((target - empty) / per_word))
    cache: dict[int, int] = {}
    if start is not None:
        n, cache[start[0]] = start
    for _ in range(24):
        if n not in cache:
            cache[n] = await count(n)
        c = cache[n]
        if c == target:
            return n, c
        step = round((target - c) / per_word) or (1 if c < target else -1)
        nxt = max(0, n + step)
        under = [k for k, v in cache.items() if v < target]
        over = [k for k, v in cache.items() if v > target]
        lo, hi = (max(under) if under else None), (min(over) if over else None)
        if lo is not None and hi is not None:
            if hi - lo <= 1:
                break
            if not lo < nxt < hi:
                nxt = (lo + hi) // 2
        n = nxt
    best = min(cache, key=lambda k: (abs(cache[k] - target), k))
    return best, cache[best]


class _Builder:
    def __init__(self, counter: Counter, seed: int) -> None:
        self.counter = counter
        self.seed = seed
        self.per_word = 1.0
        self.empty: dict[str, int] = {}
        self.anchors: dict[str, int] = {}

    async def calibrate(self) -> None:
        sys_empty = await self.counter([{"role": "system", "content": ""}], False)
        user_empty = await self.counter([{"role": "user", "content": ""}], True)
        sample = await self.counter([{"role": "user", "content": _text(-1, 400)}], True)
        self.per_word = max(0.25, (sample - user_empty) / 400)
        self.empty = {"system": sys_empty, "user": user_empty}

    async def system(self, key: int, target: int) -> tuple[str, int]:
        seed = self.seed * 1_000_003 + key

        async def count(n: int) -> int:
            return await self.counter([{"role": "system", "content": _text(seed, n)}],
                                      False)
        n, got = await _fit(count, target, self.empty["system"], self.per_word,
                            f"prefix_tokens (system prompt {key})")
        return _text(seed, n), got

    async def user(self, key: int, head: list[dict[str, Any]], target: int,
                   ) -> tuple[str, int]:
        seed = self.seed * 1_000_003 + 500_000 + key
        empty = await self.counter([*head, {"role": "user", "content": ""}], True)

        what = f"context_tokens (request {key})"
        filler = _Filler(seed)

        async def count(n: int) -> int:
            return await self.counter([*head, {"role": "user", "content": filler.text(n)}],
                                      True)
        start = None
        if target >= empty and (target - empty) / self.per_word > LONG_WORDS:
            n = round((target - empty) / self.per_word)
            start = (n, await count(n))
            if start[1] != target:
                n = await self._delta(filler, n, target - start[1], what)
                start = (n, await count(n))
            if start[1] == target:
                return filler.text(n), target
        n, got = await _fit(count, target, empty, self.per_word, what, start)
        return filler.text(n), got

    async def _word(self, word: str) -> int:
        """The count of a user message of this one word (cached: a piece's anchor)."""
        got = self.anchors.get(word)
        if got is None:
            got = self.anchors[word] = await self.counter(
                [{"role": "user", "content": word}], True)
        return got

    async def _delta(self, filler: _Filler, n: int, missing: int, what: str) -> int:
        """The word count whose text has ``missing`` tokens more than the text of ``n``
        words (fewer when negative), fitted on the words between them alone: the tokens of
        words ``a .. b-1`` are the count of words ``a-1 .. b-1`` minus that of word ``a-1``
        (with no word before, of an empty message)."""
        async def piece(a: int, b: int) -> int:
            if b <= a:
                return 0
            whole = await self.counter(
                [{"role": "user", "content": filler.text(max(0, a - 1), b)}], True)
            return whole - (await self._word(filler.text(a - 1, a)) if a else
                            self.empty["user"])

        if missing > 0:
            k, _ = await _fit(lambda k: piece(n, n + k), missing, 0, self.per_word, what)
            return n + k
        k, _ = await _fit(lambda k: piece(n - k, n), -missing, 0, self.per_word, what)
        return max(0, n - k)


class CallCounting:
    """A :data:`Counter` that counts its own calls, the tokens they counted and the seconds
    spent waiting for them: the generator's cost in ``/tokenize`` calls, in tokens the server
    tokenized, and the part of its time that was the server's (the benchmark and the
    long-context tests print them)."""

    def __init__(self, inner: Counter) -> None:
        self.inner, self.calls, self.tokens, self.seconds = inner, 0, 0, 0.0

    async def __call__(self, messages: list[dict[str, Any]], generation_prompt: bool) -> int:
        self.calls += 1
        t0 = time.perf_counter()
        try:
            got = await self.inner(messages, generation_prompt)
        finally:
            self.seconds += time.perf_counter() - t0
        self.tokens += got
        return got


def tokenize_counter(client: Any, tools: Sequence[dict[str, Any]] | None = None) -> Counter:
    """A counter over ``K3Client.tokenize``: rendered chat length in the served model's tokens."""
    extra: dict[str, Any] = {"tools": list(tools)} if tools else {}

    async def count(messages: list[dict[str, Any]], generation_prompt: bool) -> int:
        try:
            ids = await client.tokenize(messages=messages,
                                        add_generation_prompt=generation_prompt, **extra)
        except (KeyError, TypeError, ValueError, _status_error()) as exc:
            raise SyntheticError(_no_tokenize(client, exc)) from None
        return len(ids)
    return count


def _status_error() -> type[Exception]:
    import httpx

    return httpx.HTTPStatusError


def _no_tokenize(client: Any, exc: Exception) -> str:
    """Why the synthetic set cannot be built on this endpoint, in one line."""
    import httpx

    where = f"{getattr(client, 'base_url', '')}/tokenize"
    got = (f"answered HTTP {exc.response.status_code}" if isinstance(exc, httpx.HTTPStatusError)
           else f"answered in another shape ({type(exc).__name__}: no 'tokens' list)")
    return (f"synthetic requests are built to exact lengths with vLLM's POST /tokenize, and "
            f"{where} {got}: a gateway or proxy in front of vLLM may not pass it; give the "
            "profile a request_set file (or point --k3-endpoint at the vLLM server)")


async def generate(client: Any, profile: LoadProfile, *, n: int | None = None,
                   tools: Sequence[dict[str, Any]] | None = None, parallel: int = 8,
                   counter: Counter | None = None) -> RequestSet:
    """Build ``n`` (default ``requests + warmup``) requests of ``profile.context_tokens``
    prompt tokens with a ``profile.prefix_tokens`` system prefix shared by a
    ``profile.prefix_reuse`` share of them; ``max_tokens`` is ``profile.output_tokens``.

    ``client`` is a :class:`~pytest_k3accept.observe.endpoint.client.K3Client` (its ``tokenize``);
    ``counter`` replaces it in unit tests. Measured lengths are kept in ``meta``.
    """
    count = counter or tokenize_counter(client, tools)
    total = n if n is not None else profile.requests + profile.warmup
    builder = _Builder(count, profile.seed)
    await builder.calibrate()
    rng = random.Random(profile.seed)
    shared_n = round(total * profile.prefix_reuse) if profile.prefix_tokens else 0
    shares = [True] * shared_n + [False] * (total - shared_n)
    rng.shuffle(shares)
    shared: tuple[str, int] | None = None
    if shared_n:
        shared = await builder.system(0, profile.prefix_tokens)
    sem = asyncio.Semaphore(max(1, parallel))

    async def one(i: int) -> tuple[ChatRequest, int, int]:
        async with sem:
            head: list[dict[str, Any]] = []
            prefix_got = 0
            if profile.prefix_tokens:
                text, prefix_got = shared if shares[i] and shared else await builder.system(
                    i + 1, profile.prefix_tokens)
                head = [{"role": "system", "content": text}]
            user, got = await builder.user(i, head, profile.context_tokens)
            msgs = [*head, {"role": "user", "content": user}]
            req = ChatRequest(messages=msgs, tools=list(tools) if tools else None,
                              max_tokens=profile.output_tokens, id=f"synthetic-{i + 1}")
            return req, got, prefix_got

    built = await asyncio.gather(*(one(i) for i in range(total)))
    prompt = [b[1] for b in built]
    prefix = [b[2] for b in built]
    meta = {"synthetic": True, "context_tokens": profile.context_tokens,
            "prefix_tokens": profile.prefix_tokens, "prefix_reuse": profile.prefix_reuse,
            "seed": profile.seed, "shared_prefix_requests": shared_n,
            "max_prompt_deviation": max((abs(p - profile.context_tokens) for p in prompt),
                                        default=0),
            "measured_prompt_tokens": prompt, "measured_prefix_tokens": prefix}
    name = f"synthetic-{profile.context_tokens}t-{total}"
    return RequestSet([b[0] for b in built], name=name, meta=meta)
