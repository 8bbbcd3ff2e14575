"""``k3accept compare OLD.json NEW.json [--markdown|--json] [--profile FILE]``.

Prints the comparison of two reproduction records without running anything. Exit status 1
when a figure regressed beyond its threshold (the profile's ``[baseline]`` table, else the
defaults), 0 otherwise; 2 with a message on stderr when an input cannot be used (missing,
not a record, truncated, another schema version, another model, a bad threshold table).
"""

from __future__ import annotations

import argparse
import json
import sys

from .comparison import compare
from .read import RecordError, read
from .thresholds import ThresholdError, Thresholds, from_table

__all__ = ["add_parser", "run"]

DESCRIPTION = """Print the comparison of two reproduction records (--k3-record) without running
anything: the request sets, every condition that changed (A -> B), the figures side by side
with their change and mark, C6/C7 across sessions and both verdicts.

exit status: 1 when a figure regressed beyond its threshold (the profile's [baseline] table,
else the defaults: p99 TTFT/ITL/e2e +10 %, throughput -10 %, error rate +1 point), 0
otherwise; 2 with a message when an input cannot be used (missing, not a record, truncated,
another schema version, another model, a bad threshold table)."""


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``compare`` on the ``k3accept`` command."""
    p = sub.add_parser("compare", help="compare two reproduction records (before/after)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old", metavar="OLD.json", help="the baseline record (--k3-record)")
    p.add_argument("new", metavar="NEW.json", help="the re-measurement's record")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="print Markdown (step summary)")
    fmt.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--profile", metavar="FILE", default=None,
                   help="load profile whose [baseline] table sets the thresholds")
    p.set_defaults(func=run)


def thresholds_of(profile: str | None) -> Thresholds:
    """The thresholds of a profile file's ``[baseline]`` table (the defaults without one)."""
    if profile is None:
        return Thresholds()
    from ..config.tables import TableError
    from ..config.tables import read as read_table

    try:
        data, _ = read_table(profile, "the load profile", "profile values")
    except TableError as exc:
        raise ThresholdError(str(exc)) from None
    return from_table(data.get("baseline"), f"{profile}: [baseline]")


def run(args: argparse.Namespace) -> int:
    try:
        th = thresholds_of(args.profile)
        old, new = read(args.old), read(args.new)
        result = compare(old, new, th)
    except (RecordError, ThresholdError) as exc:
        print(f"k3accept compare: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_data(), indent=2, default=str))
    elif args.markdown:
        print("### Comparison with the baseline\n\n" + result.to_markdown(), end="")
    else:
        print("\n".join(result.lines()))
    return 1 if result.regressions else 0
