"""Is a run's peak KV usage measured? (pure, no imports: read by the monitor that writes
the figures, the typed evidence and the headroom check.)"""

from __future__ import annotations

from typing import Any, Mapping


def unmeasured_peak(server: Mapping[str, Any] | None) -> str | None:
    """Why a run's peak KV usage is unknown, or None when it was measured.

    Unknown, never "0 %, headroom": when no gauge sample was taken during the run, or when
    every sample showed an idle server (no request running, no KV in use: the run's requests
    fell between samples, or were only seen queued, so the figures are the idle server's). Preemptions
    prove a full cache whatever the samples say (``peak_kv_from == "preemptions"``). Unknown too
    when more samples failed during the run than answered: a scrape that times out under load
    fails exactly when the cache is fullest."""
    if server is None or server.get("peak_kv_usage") is None:
        return "no server metrics for this run"
    if server.get("peak_kv_from", "samples") != "samples":
        return None
    samples = server.get("gauge_samples")
    errors = server.get("gauge_sample_errors") or 0
    failed = first = ""
    if errors:
        why = server.get("gauge_sample_error")
        first = f" (first: {why})" if why else ""
        failed = f"; {errors} sample{'s' if errors != 1 else ''} of /metrics failed{first}"
    if samples == 0:
        return ("no KV-cache usage sample was taken during the run (the idle server after "
                f"it says nothing about the peak){failed}")
    if server.get("gauge_busy_samples") == 0:
        return (f"none of the {samples} gauge sample{'s' if samples != 1 else ''} taken "
                "during the run caught a request running (the requests fell "
                f"between samples): the samples show an idle server, not the peak{failed}")
    if samples is not None and errors > samples:  # a scrape times out when it is fullest
        return (f"{errors} of {errors + samples} /metrics samples during the run failed"
                f"{first}: the peak of the {samples} that answered is no peak")
    return None
