"""Endpoint robustness: Hypothesis-generated malformed and edge-case OpenAI requests.

The contract checked by :func:`check_endpoint`: every generated request to
``/v1/chat/completions`` and ``/v1/completions`` (empty messages, wrong types, huge
``max_tokens``, negative values, unknown fields, over-long prompts, invalid roles, lone
surrogates, non-JSON bodies ...) is answered with a 2xx or a 4xx: never a 5xx, never a dropped
connection or a hang; and ``/health`` answers 200 before and after. A failure is reported with
the MINIMAL failing request (Hypothesis shrinking) and a curl line to reproduce it; the API key
is never printed (the curl line names its environment variable). Hypothesis' example database
is off (nothing is written to the working directory); ``seed`` makes a run repeatable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ...observe.endpoint import untrusted as U
from .probes import PATHS, Probe, edge_probes, probes

__all__ = ["PATHS", "Probe", "Outcome", "Finding", "RobustnessReport", "check_endpoint"]


@dataclass(frozen=True)
class Outcome:
    """What the server did with one probe."""

    status: int | None
    kind: str  # "ok" (2xx-4xx), "http-5xx", "timeout" or "connection"
    message: str = ""
    seconds: float = 0.0

    @property
    def bad(self) -> bool:
        """True for a 5xx, a dropped connection or no answer in time."""
        return self.kind != "ok"


@dataclass(frozen=True)
class Finding:
    """A probe the server failed on, and ``/health`` right after it."""

    probe: Probe
    outcome: Outcome
    health_after: int | None

    def as_dict(self) -> dict[str, Any]:
        """Plain data (long strings abbreviated)."""
        return {"path": self.probe.path, "body": self.probe.shown(), "changes":
                list(self.probe.changes), "status": self.outcome.status,
                "kind": self.outcome.kind, "answer": self.outcome.message,
                "health_after": self.health_after}


@dataclass
class RobustnessReport:
    """Result of one robustness run against one endpoint."""

    base_url: str
    examples: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    minimal: Finding | None = None
    health_before: int | None = None
    health_after: int | None = None
    seconds: float = 0.0
    stopped: str | None = None
    api_key_env: str | None = None
    minimal_how: str = "shrunk by Hypothesis"

    @property
    def ran(self) -> bool:
        """False when the server was not healthy to begin with (nothing was sent)."""
        return self.health_before == 200

    @property
    def ok(self) -> bool:
        """No 5xx, drop or hang, and ``/health`` 200 afterwards."""
        return self.ran and not self.findings and self.health_after == 200

    def count(self, outcome: Outcome) -> None:
        """Tally one answer."""
        self.examples += 1
        key = str(outcome.status) if outcome.status is not None else outcome.kind
        self.statuses[key] = self.statuses.get(key, 0) + 1

    def summary(self) -> str:
        """One line for the terminal and the record."""
        tally = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        verdict = ("every malformed request was rejected or served" if self.ok else
                   f"{len(self.findings)} request(s) failed the server" if self.findings
                   else f"/health answered {self.health_after} afterwards")
        return (f"robustness of {self.base_url}: {self.examples} malformed/edge-case requests "
                f"sent ({tally or 'none'}) in {self.seconds:.1f} s; {verdict}")

    def message(self) -> str:
        """The failure message: what failed, the minimal request, how to reproduce."""
        if not self.ran:
            return (f"{self.base_url}/health answered {self.health_before} before any request; "
                    "the robustness check needs a healthy server")
        lines = [self.summary()]
        shown = self.minimal or (min(self.findings, key=lambda f: len(f.probe.raw))
                                 if self.findings else None)
        if shown is not None:
            o = shown.outcome
            what = {"http-5xx": f"HTTP {o.status} (a server error instead of a 4xx "
                                "rejection)",
                    "timeout": "no answer in time (the request hung the server)",
                    "connection": "the connection was dropped (did the server crash?)"}
            label = (f"minimal failing request ({self.minimal_how})" if self.minimal
                     else "smallest failing request seen (shrinking did not finish)")
            lines += [f"{label}: {what.get(o.kind, o.kind)}",
                      f"  POST {self.base_url}{shown.probe.path}",
                      f"  body: {U.clean(shown.probe.shown(), 1500)}",
                      f"  answer: {o.message}",
                      f"  /health right after: {shown.health_after}",
                      f"  reproduce: {shown.probe.curl(self.base_url, self.api_key_env)}"]
        others = [f for f in self.findings if f is not shown][:5]
        for f in others:
            lines.append(f"also failed: POST {f.probe.path} with {', '.join(f.probe.changes)}"
                         f" -> {f.outcome.status or f.outcome.kind}")
        if self.health_after != 200:
            lines.append(f"/health answered {self.health_after} after the run (expected 200)")
        if self.stopped:
            lines.append(f"stopped early: {self.stopped}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the evidence and the record."""
        return {"base_url": self.base_url, "examples": self.examples,
                "statuses": dict(self.statuses), "ok": self.ok,
                "findings": [f.as_dict() for f in self.findings[:20]],
                "minimal": self.minimal.as_dict() if self.minimal else None,
                "health_before": self.health_before, "health_after": self.health_after,
                "seconds": round(self.seconds, 3), "stopped": self.stopped}


class _Failed(Exception):
    """Raised inside the property so that Hypothesis shrinks towards a minimal probe."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(f"{finding.outcome.kind}: {finding.outcome.message}")
        self.finding = finding


class _Stop(BaseException):
    """Ends the run at once (server down, time bound): not an Exception, so not shrunk."""


def _health(http: Any, wait: float = 0.0) -> int | None:
    deadline = time.monotonic() + wait
    while True:
        try:
            status: int | None = http.get("/health", timeout=5.0).status_code
        except Exception:  # noqa: BLE001 - any failure means "not answering"
            status = None
        if status == 200 or time.monotonic() >= deadline:
            return status
        time.sleep(0.5)


def _send(http: Any, probe: Probe) -> Outcome:
    import httpx

    t0 = time.monotonic()
    try:
        resp = http.post(probe.path, content=probe.raw,
                         headers={"Content-Type": "application/json"})
    except httpx.TimeoutException:
        return Outcome(None, "timeout", "no answer within the timeout",
                       time.monotonic() - t0)
    except httpx.HTTPError as exc:
        return Outcome(None, "connection", U.clean(f"{type(exc).__name__}: {exc}", 300),
                       time.monotonic() - t0)
    elapsed = time.monotonic() - t0
    raw = resp.content[:U.MAX_ERROR_BODY]
    text = U.message_of(U.parse_json(raw), U.decode(raw[:300]))
    kind = "http-5xx" if resp.status_code >= 500 else "ok"
    return Outcome(resp.status_code, kind, f"HTTP {resp.status_code}: {U.clean(text, 500)}",
                   elapsed)


def _sweep(http: Any, report: RobustnessReport, sweep: list[Probe], t0: float,
           max_seconds: float, health_wait: float) -> None:
    """Send every probe of the deterministic sweep; the smallest failing one is minimal."""
    for probe in sweep:
        if time.monotonic() - t0 > max_seconds:
            report.stopped = f"the run's time bound of {max_seconds:g} s was reached"
            break
        outcome = _send(http, probe)
        report.count(outcome)
        if not outcome.bad:
            continue
        report.findings.append(Finding(probe, outcome, _health(http, wait=health_wait)))
        if report.findings[-1].health_after != 200:
            report.stopped = (f"/health answered {report.findings[-1].health_after} after "
                              "that request: the server is down or unhealthy")
            break
    if report.findings:
        report.minimal = min(report.findings, key=lambda f: len(f.probe.raw))
        report.minimal_how = "a single change to a valid request, from the edge-case sweep"


def check_endpoint(base_url: str, model: str, *, headers: Mapping[str, str] | None = None,
                   max_model_len: int | None = None, max_examples: int = 30,
                   seed: int | None = 0, paths: Sequence[str] = ("chat", "completions"),
                   timeout: float = 60.0, max_seconds: float = 600.0,
                   api_key_env: str | None = None, health_wait: float = 10.0,
                   edges: bool = True) -> RobustnessReport:
    """Send the edge-case sweep (``edges``), then ``max_examples`` generated malformed
    requests (plus shrinking on a failure).

    The sweep (:func:`~pytest_k3accept.checks.robustness.probes.edge_probes`, ~90 requests per path)
    is deterministic and each of its requests differs from a valid one by one change, so a
    failure there is reported as already minimal and the random search is skipped.

    ``paths``: any of ``"chat"``, ``"completions"``. ``timeout``: per request. ``max_seconds``
    bounds the whole run, shrinking included (the smallest failing request seen so far is
    then reported). ``api_key_env`` names the key's variable in the printed curl line.
    ``health_wait``: how long ``/health`` may take to come back to 200 (before the run, after
    a failing request, after the run).
    """
    import httpx
    from ...observe.endpoint.transport import httpx_limits
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hseed

    report = RobustnessReport(base_url=base_url, api_key_env=api_key_env)
    strategy = probes(model, [PATHS[p] for p in paths], max_model_len)
    t0 = time.monotonic()
    with httpx.Client(base_url=base_url, headers=dict(headers or {}),
                      timeout=timeout, limits=httpx_limits()) as http:
        report.health_before = _health(http, wait=health_wait)
        if not report.ran:
            return report

        if edges:
            _sweep(http, report, edge_probes(model, [PATHS[p] for p in paths], max_model_len),
                   t0, max_seconds, health_wait)
            if report.findings or report.stopped:
                report.health_after = _health(http, wait=health_wait)
                report.seconds = time.monotonic() - t0
                return report

        def prop(probe: Probe) -> None:
            if time.monotonic() - t0 > max_seconds:
                raise _Stop(f"the run's time bound of {max_seconds:g} s was reached")
            outcome = _send(http, probe)
            report.count(outcome)
            if not outcome.bad:
                return
            finding = Finding(probe, outcome, _health(http, wait=health_wait))
            report.findings.append(finding)
            if finding.health_after != 200:
                raise _Stop(f"/health answered {finding.health_after} after that request: "
                            "the server is down or unhealthy, nothing further can be learnt")
            raise _Failed(finding)

        run = settings(max_examples=max_examples, deadline=None, database=None,
                       suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                       phases=(Phase.generate, Phase.shrink), verbosity=Verbosity.quiet,
                       print_blob=False)(given(strategy)(prop))  # type: ignore[no-untyped-call]
        if seed is not None:
            run = hseed(seed)(run)
        try:
            run()
        except _Failed as exc:
            report.minimal = exc.finding
        except _Stop as exc:
            report.stopped = str(exc)
        except Exception as exc:  # noqa: BLE001 - e.g. Hypothesis' Flaky: keep what we saw
            report.stopped = U.clean(f"{type(exc).__name__}: {exc}", 300)
        report.health_after = _health(http, wait=health_wait)
    report.seconds = time.monotonic() - t0
    return report
