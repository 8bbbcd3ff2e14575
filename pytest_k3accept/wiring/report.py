"""Report wiring: reproduction record, pytest-html report, terminal summary, redaction.

* Every test and collection report is redacted before the terminal, JUnit XML or the HTML
  report sees it (captured output, log sections, failure text, user properties); pytest's
  log handlers get a redacting filter (live logs, ``--log-file``, captured logs).
* Tests that produced evidence get pytest-html extras (evidence table, load summary, charts).
* At session end (also after failures, errors and Ctrl-C) the record is built, extended by
  ``pytest_k3accept_record`` hooks, redacted and written to ``--k3-record``; the report gets
  its title, summary block and environment rows; the terminal gets a few lines.
* pytest-xdist: workers ship their new evidence, checklist outcomes and test outcomes as a
  plain-data report attribute (``k3_state``) and in ``workeroutput`` at their end; only the
  controller merges them and writes the record and summary.
"""

from __future__ import annotations

import html
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generator

import pytest

from .. import record as _record
from .. import report as _report
from ..redact import RedactingFilter, Redactor, redact_file, redact_report
from ..state import Evidence, RunState
from . import SETTINGS_KEY, settings_of, state_of

REDACTOR_KEY = pytest.StashKey[tuple[Redactor, Redactor]]()
DONE_KEY = pytest.StashKey["Done"]()
SHIPPED_KEY = pytest.StashKey[list[int]]()
ATTACHED_KEY = pytest.StashKey[set[int]]()
#: report attribute / workeroutput key carrying a worker's new observations (plain data)
SHIP_ATTR = "k3_state"


@dataclass
class Done:
    """The session's finished record, where it went and what went wrong writing it."""

    record: dict[str, Any] | None
    path: Path | None = None
    error: str | None = None


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def redactor_of(config: pytest.Config) -> Redactor:
    """The session's :class:`~pytest_k3accept.redact.Redactor` (API key, secret env, launch).

    In a session that does not use the plugin, only known secrets are replaced (verbatim),
    so that unrelated test output is left as it is.
    """
    pair = config.stash.get(REDACTOR_KEY, None)
    if pair is None:
        s = settings_of(config)
        pair = config.stash[REDACTOR_KEY] = (Redactor.from_settings(s),
                                              Redactor([s.api_key() or ""], patterns=False))
    return pair[0] if _engaged(config) else pair[1]


def _engaged(config: pytest.Config) -> bool:
    s, state = settings_of(config), state_of(config)
    return bool(s.endpoints or s.launch or s.record or s.server_log or s.host_facts
                or s.profile or s.dcgm_url or s.prometheus_url or state.evidence
                or state.checklist.outcomes)


def pytest_configure(config: pytest.Config) -> None:
    redactor_of(config)
    config.pluginmanager.register(SessionHooks(config), f"k3accept-report-{id(config)}")
    if _is_worker(config):
        config.stash[SHIPPED_KEY] = [0, 0, 0, 0]


def pytest_sessionstart(session: pytest.Session) -> None:
    plugin = session.config.pluginmanager.get_plugin("logging-plugin")
    flt = RedactingFilter(lambda: redactor_of(session.config))
    for name in ("caplog_handler", "report_handler", "log_file_handler", "log_cli_handler"):
        handler = getattr(plugin, name, None)
        if isinstance(handler, logging.Handler):
            handler.addFilter(flt)


def _attach_extras(item: pytest.Item, report: pytest.TestReport) -> None:
    config = item.config
    if not config.getoption("htmlpath", None):
        return
    seen = item.stash.setdefault(ATTACHED_KEY, set())
    new = [e for e in state_of(config).evidence if e.nodeid == item.nodeid and id(e) not in seen]
    if not new:
        return
    seen.update(id(e) for e in new)
    data = redactor_of(config).data([e.as_dict() for e in new])
    extras = list(getattr(report, "extras", []) or []) + _report.extras_for(data)
    setattr(report, "extras", extras)


def _delta(config: pytest.Config) -> dict[str, Any] | None:
    """A worker's observations not shipped yet, as JSON-plain data."""
    import json

    state, sent = state_of(config), config.stash[SHIPPED_KEY]
    parts = (state.evidence, state.checklist.outcomes, state.tests, state.notes)
    chunk = {"evidence": [e.as_dict() for e in state.evidence[sent[0]:]],
             "outcomes": [list(o) for o in state.checklist.outcomes[sent[1]:]],
             "tests": state.tests[sent[2]:], "notes": state.notes[sent[3]:],
             "interrupted": state.interrupted}
    sent[:] = [len(p) for p in parts]
    if not any(chunk[k] for k in ("evidence", "outcomes", "tests", "notes", "interrupted")):
        return None
    return json.loads(json.dumps(chunk, default=str))  # type: ignore[no-any-return]


def _merge(config: pytest.Config, chunk: Any) -> None:
    if not isinstance(chunk, dict) or _is_worker(config):
        return
    state = state_of(config)
    for ev in chunk.get("evidence", []):
        state.evidence.append(Evidence(ev["kind"], ev["summary"], ev.get("data") or {},
                                       ev.get("nodeid", ""), ev.get("at", 0.0)))
    state.checklist.outcomes.extend(
        (o[0], o[1], o[2], o[3]) for o in chunk.get("outcomes", []))
    state.tests.extend(chunk.get("tests", []))
    state.notes.extend(chunk.get("notes", []))
    state.interrupted = state.interrupted or bool(chunk.get("interrupted"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None],
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    config = item.config
    try:
        _attach_extras(item, report)
    except Exception as exc:  # a chart must never break a test's report
        state_of(config).notes.append(f"report extras for {item.nodeid} failed: "
                                      f"{type(exc).__name__}: {exc}")
    redact_report(report, redactor_of(config))
    if _is_worker(config):
        chunk = _delta(config)
        if chunk:
            setattr(report, SHIP_ATTR, chunk)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector,
                               ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    redact_report(report, redactor_of(collector.config))
    return report


class SessionHooks:
    """Hooks that need the session's config but are not given it (one instance per config,
    so that nested in-process pytest runs keep their own state)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """pytest-xdist controller: merge what a worker shipped with this report."""
        _merge(self.config, getattr(report, SHIP_ATTR, None))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """pytest-xdist: merge what a worker observed after its last report."""
        _merge(self.config, (getattr(node, "workeroutput", None) or {}).get(SHIP_ATTR))

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C: the record says the run was interrupted (and is still written)."""
        state_of(self.config).interrupted = True


@pytest.hookimpl(trylast=True)  # after session fixtures were torn down (Ctrl-C case)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _is_worker(config):
        config.workeroutput[SHIP_ATTR] = _delta(config)  # type: ignore[attr-defined]
        return
    finalize(config, int(exitstatus))


def finalize(config: pytest.Config, exit_status: int | None) -> Done:
    """Build, extend, redact and write the record once; never raises for its own failures."""
    done = config.stash.get(DONE_KEY, None)
    if done is not None:
        return done
    done = config.stash[DONE_KEY] = Done(None)
    if not _engaged(config):
        return done
    s, state, red = settings_of(config), state_of(config), redactor_of(config)
    workers = getattr(config.option, "numprocesses", None)
    kwargs: dict[str, Any] = dict(exit_status=exit_status,
                                  invocation=red.argv(list(config.invocation_params.args)),
                                  workers=workers if isinstance(workers, int) else None)
    try:
        record = _record.build(state, s, **kwargs)
    except Exception as exc:  # a bug must not cost the session its record
        record = _record.build(RunState(started_at=state.started_at,
                                        interrupted=state.interrupted), s, **kwargs)
        record["notes"].append(f"the record could not be built from the evidence "
                               f"({type(exc).__name__}: {exc}); this one holds none of it")
    try:
        config.hook.pytest_k3accept_record(record=record)
    except Exception as exc:
        record["notes"].append(f"a pytest_k3accept_record hook failed: "
                               f"{type(exc).__name__}: {exc}")
    done.record = _record.finish(record, red)
    if s.record:
        target = Path(config.invocation_params.dir, s.record)
        try:
            done.path = _record.write(done.record, target)
        except OSError as exc:
            done.error = f"NOT written to {target}: {exc.strerror or exc}"
    _update_metadata(config, done.record)
    root = Path(config.invocation_params.dir, s.artifacts).resolve()
    for ev in state.of_kind("launch"):  # logs the plugin wrote itself, never --k3-server-log
        own = ev.data.get("output") or ev.data.get("log") or ""  # "output": what it captured
        log = Path(config.invocation_params.dir, str(own)).resolve()
        if root in log.parents:
            error = redact_file(log, red)
            if error:
                state.notes.append(error)
    return done


def _update_metadata(config: pytest.Config, record: dict[str, Any]) -> None:
    try:
        from pytest_metadata.plugin import metadata_key
    except ImportError:
        return
    meta = config.stash.get(metadata_key, None)
    if isinstance(meta, dict):
        meta.update(_report.environment_rows(record))
        red = redactor_of(config)
        for key, value in list(meta.items()):
            meta[key] = red.data(value)


def pytest_unconfigure(config: pytest.Config) -> None:
    if SETTINGS_KEY in config.stash and not _is_worker(config):
        finalize(config, None)
    hooks = config.pluginmanager.get_plugin(f"k3accept-report-{id(config)}")
    if hooks is not None:
        config.pluginmanager.unregister(hooks)


@pytest.hookimpl(optionalhook=True, trylast=True)
def pytest_metadata(metadata: dict[str, Any], config: pytest.Config) -> None:
    """pytest-metadata: rows for what is known at start; redacts every row."""
    s = config.stash.get(SETTINGS_KEY, None)
    if s is None:  # pytest-metadata configured before the plugin: read the options now
        from ..settings import from_config

        s = from_config(config)
    if s.endpoints or s.launch:
        red = Redactor.from_settings(s)
        text = html.escape(", ".join(s.endpoints) or "launched by the plugin", quote=False)
        metadata["K3 endpoint"] = text
        if s.launch:
            metadata["K3 launch"] = html.escape(red.command(s.launch), quote=False)
        for key, value in list(metadata.items()):
            metadata[key] = red.data(value)


@pytest.hookimpl(optionalhook=True)
def pytest_html_report_title(report: Any) -> None:
    """pytest-html: the report's title (left alone in sessions that do not use the plugin)."""
    config = getattr(report, "config", None)
    if config is None or _engaged(config):
        report.title = "K3 acceptance report"


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(prefix: list[str], summary: list[str], postfix: list[str],
                                session: pytest.Session) -> None:
    """pytest-html: the verdict, checklist, reproduction fields and record at the top."""
    done = finalize(session.config, int(session.exitstatus))
    if done.record is None:
        return
    href = None
    html_path = session.config.getoption("htmlpath", None)
    if done.path and html_path:
        base = Path(session.config.invocation_params.dir, os.path.expandvars(html_path))
        href = os.path.relpath(done.path, base.expanduser().parent)
    prefix.insert(0, _report.summary_html(done.record, record_href=href,
                                          record_path=str(done.path) if done.path else None))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    done = config.stash.get(DONE_KEY, None)
    if done is None or done.record is None or _is_worker(config):
        return
    note = done.error or (str(done.path) if done.path else "not written (pass --k3-record PATH)")
    terminalreporter.write_sep("-", "k3accept")
    for line in _report.terminal_lines(done.record, note):
        terminalreporter.write_line(line)
