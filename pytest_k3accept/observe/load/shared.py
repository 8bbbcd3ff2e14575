"""Other clients of the server under test: did it do more work during a run than we sent?

The plugin judges a server it may not have to itself. Over each run the server's own
counters (``vllm:request_success_total`` over every finish reason, abort included,
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``) are compared with what the
runner sent (requests, and the ``usage`` tokens of its successful requests). On a server the
runner has alone they agree exactly (``tests/live/test_load_live.py``); when the server did
materially more, the run is *shared*: its latency, queue and KV figures include another
client's traffic.

* requests: the server finished more requests than the runner sent (a request the server
  rejected before the engine never finishes there, so own traffic can only be fewer);
* tokens: more prompt or generated tokens than the successful requests' ``usage`` by more
  than :data:`TOKEN_SLACK` (at least :data:`MIN_TOKENS`): another client's request that was
  still running when the run ended shows here. Only judged when every request of the run
  succeeded: a failed or cancelled request's tokens are not in any ``usage``.

``shared`` is None (unknown, never "alone") when the server exports none of the counters.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Mapping

#: token excess that counts as another client's work: this fraction of the run's own tokens
TOKEN_SLACK = 0.05
#: ... and at least this many tokens
MIN_TOKENS = 32


def sentence(other: int | None) -> str:
    """What a shared run's lines and judgements say."""
    if other:
        return (f"the server served {other} other request{'s' if other != 1 else ''} during "
                "this run: latency and KV figures include them")
    return ("the server did more work during this run than this run sent (another client's "
            "requests still running): latency and KV figures include it")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value else None  # NaN: unknown


def _excess(server: float | None, own: float) -> float | None:
    return None if server is None else server - own


def compare(summary: Mapping[str, Any], server: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"shared": True/False/None, "other_requests": N or None, "extra_prompt_tokens",
    "extra_generation_tokens", "note"}`` for a run's summary and its server figures
    (``Delta.as_dict()``: ``successes``, ``prompt_tokens``, ``generation_tokens``)."""
    out: dict[str, Any] = {"shared": None, "other_requests": None,
                           "extra_prompt_tokens": None, "extra_generation_tokens": None,
                           "note": ""}
    if not server:
        out["note"] = "other clients unknown: no server metrics for this run"
        return out
    sent = int(summary.get("requests") or 0)
    failed = int(summary.get("errors") or 0)
    successes = server.get("successes")
    finished = (sum(v for v in (_num(x) for x in successes.values()) if v is not None)
                if isinstance(successes, Mapping) and successes else None)
    extra_prompt = _excess(_num(server.get("prompt_tokens")),
                           float(summary.get("prompt_tokens") or 0))
    extra_gen = _excess(_num(server.get("generation_tokens")),
                        float(summary.get("completion_tokens") or 0))
    out["extra_prompt_tokens"] = extra_prompt
    out["extra_generation_tokens"] = extra_gen
    if finished is None and extra_prompt is None and extra_gen is None:
        out["note"] = ("other clients unknown: the server exports no request or token "
                       "counters (vllm:request_success, vllm:prompt_tokens)")
        return out
    other = None if finished is None else max(0, round(finished) - sent)
    out["other_requests"] = other
    material = False
    if failed == 0:
        for extra, own in ((extra_prompt, summary.get("prompt_tokens")),
                           (extra_gen, summary.get("completion_tokens"))):
            slack = max(MIN_TOKENS, TOKEN_SLACK * float(own or 0))
            material = material or (extra is not None and extra > slack)
    out["shared"] = bool(other) or material
    out["note"] = sentence(other) if out["shared"] else ""
    return out
