"""``k3accept triage LOG [--exit-code N] [--json]``: the classifier of ``--k3-launch`` and
``--k3-server-log`` on a log file (or ``-`` for stdin), streamed line by line.

Exit status 0 whatever the category; 2 (with a message on stderr) only when the input cannot
be read. Empty, binary or non-vLLM input gets an answer (``none`` or ``unknown``) and a note
saying what the input looked like.
"""

from __future__ import annotations

import argparse
import codecs
import io
import json
import sys
from typing import BinaryIO, Iterator, TextIO

from ..classify import Classification, Quote, decide
from ..logread import LogLine, iter_lines
from .scan import Scanner

__all__ = ["add_parser", "run", "triage_stream"]

_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _lines(stream: BinaryIO) -> Iterator[LogLine]:
    """Lines of ``stream``; UTF-16/32 (told by a byte-order mark) is re-encoded as UTF-8 as it
    is read, anything else is read as UTF-8 with bad bytes shown as U+FFFD."""
    head = stream.read(4)
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            rest = io.BufferedReader(_Prefixed(head, stream))
            text = io.TextIOWrapper(rest, encoding=encoding, errors="replace", newline="")
            yield from iter_lines(_Utf8(text))  # type: ignore[arg-type]
            return
    yield from iter_lines(_Prefixed(head, stream))  # type: ignore[arg-type]


class _Prefixed(io.RawIOBase):
    """``stream`` with ``head`` (already read from it) put back in front."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head, self._stream = head, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buf: "bytearray | memoryview") -> int:  # type: ignore[override]
        data = self._head[:len(buf)] or self._stream.read(len(buf))
        self._head = self._head[len(data):] if self._head else b""
        buf[:len(data)] = data
        return len(data)

    def readline(self, limit: int | None = -1) -> bytes:
        if not self._head:
            return self._stream.readline(limit if limit is not None else -1)
        line = self._head
        self._head = b""
        if b"\n" in line:
            cut = line.index(b"\n") + 1
            self._head, line = line[cut:], line[:cut]
            return line
        return line + self._stream.readline(max(1, (limit or 0) - len(line)) if limit and
                                             limit > 0 else -1)


class _Utf8:
    """A text stream seen as UTF-8 bytes, one line at a time (for :func:`iter_lines`)."""

    def __init__(self, text: TextIO) -> None:
        self._text = text

    def readline(self, limit: int = -1) -> bytes:
        return self._text.readline(limit).encode("utf-8", "replace")


def triage_stream(stream: BinaryIO, *, exit_code: int | None = None,
                  ended: bool = True) -> tuple[Classification, Scanner]:
    """Classify the log read from ``stream`` (streamed: bounded memory whatever its size)."""
    scan = Scanner()
    for line in _lines(stream):
        scan.feed(line)
    return decide(scan, exit_code=exit_code, ended=ended), scan


def _q(q: Quote) -> str:
    return f"  line {q.lineno}: {q.text}" if q.lineno else f"  {q.text}"


def render(cls: Classification, scan: Scanner, source: str) -> str:
    """The answer for a terminal."""
    out = [f"log:        {source} ({scan.total_lines} lines read)",
           f"category:   {cls.category}",
           f"phase:      {cls.phase}" + (f" [{cls.stage}]" if cls.stage else ""),
           f"rule:       {cls.rule} ({cls.confidence})"]
    if cls.evidence:
        first, *rest = cls.evidence
        if cls.root_cause is not None:
            out += ["root cause:", _q(cls.root_cause), "deciding line:", _q(first)]
        else:
            out += ["root cause:" if cls.confidence == "matched" else "evidence:", _q(first)]
        shown = {q.text for q in cls.consequences} | {cls.root_cause.text if cls.root_cause
                                                       else ""}
        out += [_q(q) for q in rest if q.text not in shown]
    if cls.consequences:
        out += ["consequences:"] + [_q(q) for q in cls.consequences]
    out += [f"advice:     {cls.advice}"]
    out += [f"note:       {n}" for n in cls.notes]
    return "\n".join(out)


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``triage`` on the ``k3accept`` command."""
    tr = sub.add_parser("triage", help="classify a vLLM server log (category, phase, cause)")
    tr.add_argument("log", help="the log file, or - for stdin")
    tr.add_argument("--exit-code", type=int, default=None,
                    help="the server's exit status, if known (137: SIGKILL)")
    tr.add_argument("--json", action="store_true", help="one JSON object instead of text")
    tr.add_argument("--running", action="store_true",
                    help="the server is still running (a log ending in a traceback is not "
                         "by itself a failure)")
    tr.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The ``triage`` subcommand: 0 whatever the category, 2 for an unreadable input."""
    source = "stdin" if args.log == "-" else args.log
    try:
        if args.log == "-":
            cls, scan = triage_stream(sys.stdin.buffer, exit_code=args.exit_code,
                                      ended=not args.running)
        else:
            with open(args.log, "rb") as fh:
                cls, scan = triage_stream(fh, exit_code=args.exit_code,
                                          ended=not args.running)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"k3accept triage: cannot read {source}: {reason}", file=sys.stderr)
        return 2
    if args.json:
        data = cls.as_dict()
        data.update({"log": source, "lines_read": scan.total_lines})
        print(json.dumps(data, ensure_ascii=False))
    else:
        print(render(cls, scan, source))
    return 0
