"""Robustness wiring: the ``k3_robustness`` marker (Hypothesis-generated malformed requests)."""

from __future__ import annotations

from typing import Any

import pytest

from . import settings_of, state_of, unavailable

ENDPOINT_KEY = pytest.StashKey[Any]()

#: argument -> (type check, description)
ARGS: dict[str, tuple[Any, str]] = {
    "max_examples": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
                     "a whole number > 0"),
    "seed": (lambda v: v is None or isinstance(v, int) and not isinstance(v, bool),
             "a whole number or None (random)"),
    "paths": (lambda v: isinstance(v, (list, tuple)) and bool(v) and all(
        p in ("chat", "completions") for p in v), "a non-empty list of 'chat', 'completions'"),
    "timeout": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
                "seconds > 0"),
    "max_seconds": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                    and v > 0, "seconds > 0"),
    "edges": (lambda v: isinstance(v, bool), "True or False"),
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "k3_robustness(max_examples=30, seed=0, paths=('chat', 'completions'), edges=True, "
        "timeout=60, max_seconds=600): before the test body runs, send a fixed edge-case "
        "sweep (edges) and MAX_EXAMPLES Hypothesis-generated malformed OpenAI requests to the "
        "endpoint; fail on any 5xx, dropped connection or hang (with the minimal failing "
        "request) or when /health is not 200 afterwards")


def marker_args(mark: pytest.Mark, nodeid: str) -> dict[str, Any]:
    """The marker's keyword arguments, validated (``pytest.UsageError`` naming the test)."""
    if mark.args:
        if len(mark.args) > 1 or "max_examples" in mark.kwargs:
            raise pytest.UsageError(f"{nodeid}: @k3_robustness takes at most one positional "
                                    "argument (max_examples); pass the others by name")
    kwargs = dict(mark.kwargs)
    if mark.args:
        kwargs["max_examples"] = mark.args[0]
    for name, value in kwargs.items():
        if name not in ARGS:
            raise pytest.UsageError(f"{nodeid}: @k3_robustness got unknown argument {name!r}; "
                                    f"it takes {', '.join(ARGS)}")
        check, what = ARGS[name]
        if not check(value):
            raise pytest.UsageError(f"{nodeid}: @k3_robustness({name}=...) must be {what}, "
                                    f"got {value!r}")
    if "paths" in kwargs:
        kwargs["paths"] = tuple(kwargs["paths"])
    return kwargs


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("k3_robustness")
        if mark is not None:
            marker_args(mark, item.nodeid)


@pytest.fixture(autouse=True)
def k3_robustness_target(request: pytest.FixtureRequest) -> None:
    """For tests marked ``k3_robustness`` only: resolves ``k3_endpoint`` (skips, or fails
    under ``--k3-require``, when there is no usable endpoint). Does nothing elsewhere."""
    if request.node.get_closest_marker("k3_robustness") is not None:
        request.node.stash[ENDPOINT_KEY] = request.getfixturevalue("k3_endpoint")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    mark = item.get_closest_marker("k3_robustness")
    endpoint = item.stash.get(ENDPOINT_KEY, None)
    if mark is None or endpoint is None:
        return
    from ..endpoint import auth_headers
    from ..robustness import check_endpoint

    s = settings_of(item.config)
    key = s.api_key()
    report = check_endpoint(endpoint.base_url, endpoint.model, headers=auth_headers(key),
                            max_model_len=endpoint.max_model_len,
                            api_key_env=s.api_key_env if key else None,
                            **marker_args(mark, item.nodeid))
    state_of(item.config).add("robustness", report.summary(), report.as_dict(),
                              nodeid=item.nodeid)
    item.user_properties.append(("k3_robustness", report.summary()))
    if not report.ran:
        unavailable(item.config, report.message())
    if not report.ok:
        pytest.fail(report.message(), pytrace=False)
