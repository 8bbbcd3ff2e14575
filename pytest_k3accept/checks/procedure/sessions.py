"""C6 and C7 across sessions: a re-measurement judged against a baseline record (pure).

Within one session :func:`~.plan.one_variable` checks that each procedure step changed one
variable against its base step. Across sessions the base step is the baseline record and
the variables are its reproduction fields (:mod:`pytest_k3accept.compare.diff`):

* C6 (request set fixed): passes when both sessions ran the same request set (same
  fingerprint), fails when it differs;
* C7 (one variable at a time): passes when exactly one variable changed, fails when more
  than one did (listing them) or when the request sets differ (a different set is a second
  change, and no before/after); with no variable changed it is a same-condition re-run and
  decides nothing.

An outcome of None leaves the item to the session's other tests (unknown is never a pass).
The outcomes go to the checklist like every test's (``Checklist.add``).
"""

from __future__ import annotations

from typing import Sequence

from ..registry import FAIL, PASS

Outcome = tuple[str | None, str]


def across_sessions(request_set: str, request_line: str, variables: Sequence[str],
                    changes: Sequence[str], *, launch_known: bool) -> dict[str, Outcome]:
    """``{"C6": (outcome, message), "C7": (outcome, message)}``.

    ``request_set`` is ``same``/``different``/``unknown`` (with its line), ``variables`` the
    changed variables that count and ``changes`` their "changed: A -> B" lines;
    ``launch_known``: the launch arguments are known on both sides (else a change of server
    flags could not be seen, and one visible change cannot prove only one changed).
    """
    c6: Outcome = ((PASS, f"C6 across sessions: {request_line}") if request_set == "same"
                   else (FAIL, f"C6 across sessions: {request_line}")
                   if request_set == "different"
                   else (None, f"C6 not decided by the baseline: {request_line}"))
    listed = "; ".join(changes)
    if request_set == "different":
        c7: Outcome = (FAIL, "C7 across sessions: not on the same request set, so no variable "
                             f"change can be judged ({request_line})"
                             + (f"; also {listed}" if listed else ""))
    elif len(variables) > 1:
        c7 = (FAIL, f"C7 across sessions: {len(variables)} variables changed at once "
                    f"(vs the baseline): {listed}")
    elif len(variables) == 1 and not launch_known:
        c7 = (None, f"C7 not decided by the baseline: {listed}, but the launch arguments are "
                    "not known on both sides, so other server flags may have changed too")
    elif len(variables) == 1:
        c7 = (PASS, f"C7 across sessions: one variable changed (vs the baseline): {listed}")
    else:
        c7 = (None, "C7 not decided by the baseline: no variable changed (a same-condition "
                    "re-measurement; C7 is decided when exactly one changes)")
    return {"C6": c6, "C7": c7}
