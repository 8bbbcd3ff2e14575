"""Reading a server log while it grows: tolerant of truncation, rotation, odd bytes and absence.

:class:`LogReader` turns a file into :class:`LogLine` objects, one ``poll()`` at a time:
only complete lines are returned (a partial last line waits for its newline, or for
``poll(final=True)``); bytes that are not UTF-8 become U+FFFD; ANSI colour codes are
removed; ``\\r``-separated progress-bar updates become separate lines; over-long lines are
cut. A file that shrinks (``copytruncate``) is read again from its start, a file that was
replaced (rotation) is finished first and then the new one is read from its start, and a
file that does not exist (yet) or cannot be read produces a note, never an exception.
Every such event is written to ``notes`` in a sentence that names the file.

:class:`LogFollower` polls a reader from a background thread, keeps a bounded copy of the
lines (the first ``head`` and the last ``tail``) and hands every line to callbacks.
Standard library only.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

from ...output.redact import Redactor

__all__ = ["LogLine", "LogReader", "LogFollower", "split_lines", "iter_lines", "redact"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_PATTERNS = Redactor()
MAX_LINE_CHARS = 8192
_READ_CHUNK = 1 << 20
LIVE_GAP = 2.0


@dataclass(frozen=True)
class LogLine:
    """One line of a log: its physical line number (1-based; the ``\\r`` pieces of one line share
    it), text and when it was read.

    ``live`` is True when the line was read while the log was being followed (so
    ``seen_at`` is within a poll interval of when the server wrote it) and False for a
    backlog read in bulk (then ``seen_at`` says nothing about when it was written).
    """

    lineno: int
    text: str
    seen_at: float
    live: bool = False


def redact(text: str) -> str:
    """Hide secret values by their shape and name (``api_key: X``, ``--api-key X``,
    ``HF_TOKEN=X``, ``Authorization: Bearer X``, ``hf_...``): the plugin's one
    :class:`~pytest_k3accept.output.redact.Redactor`, without known secrets (a log line is read
    before, and apart from, the session's settings; the report layer adds those)."""
    return _PATTERNS.text(text)


def clean(raw: bytes | str) -> str:
    """Decode (UTF-8, bad bytes -> U+FFFD), drop ANSI codes and control characters, hide
    secret values (:func:`redact`), cap length."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = redact(_CONTROL.sub("\ufffd", _ANSI.sub("", text)))
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + f" ...[line cut: {len(text) - MAX_LINE_CHARS} more chars]"
    return text


#: a vLLM / Ray process tag at a line's start ("(VllmWorker rank=0 pid=234357) ")
_TAG = re.compile(rb"\((?:[\w.=-]+ )*pid=\d+(?:, ip=[\d.]+)?\) ")


def _unjoin(raw: bytes) -> list[bytes]:
    """A line that starts with a process tag and holds the same tag again further on is
    several lines whose breaks were lost (a log pasted where newlines were dropped,
    vllm-ascend#3196: ``...uint8)(VllmWorker rank=0 pid=234357) ERROR ...``): split before
    each repeat. A tag repeated right after itself (nested prefixes) is not a break."""
    m = _TAG.match(raw)
    if not m or raw.count(m.group(0)) < 2:
        return [raw]
    tag, cuts, at = m.group(0), [0], m.end()
    while (at := raw.find(tag, at)) >= 0:
        if at > cuts[-1] + len(tag) + 1:
            cuts.append(at)
        at += len(tag)
    return [raw[a:b] for a, b in zip(cuts, cuts[1:] + [len(raw)])]


def _pieces(raw: bytes) -> list[str]:
    """A raw line without its newline -> the non-empty ``\\r``-separated pieces (and lines
    whose breaks were lost, :func:`_unjoin`), cleaned."""
    return [clean(q) for p in raw.rstrip(b"\r").split(b"\r") if p.strip()
            for q in _unjoin(p) if q.strip()]


def split_lines(text: str | bytes, *, start: int = 1, seen_at: float = 0.0) -> list[LogLine]:
    """Split a whole log (str or bytes) into :class:`LogLine` objects (for pure consumers).

    Line numbers are those of the text (blank lines are counted, not returned).
    """
    raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return [LogLine(start + i, piece, seen_at)
            for i, chunk in enumerate(raw.split(b"\n")) for piece in _pieces(chunk)]


def iter_lines(stream: BinaryIO, *, start: int = 1, seen_at: float = 0.0) -> Iterator[LogLine]:
    """The lines of a binary stream one at a time, never more than one line in memory (a
    physical line longer than ``4 * MAX_LINE_CHARS`` bytes is cut into pieces, each counted as
    a line, as :class:`LogReader` does)."""
    lineno = start - 1
    while True:
        raw = stream.readline(4 * MAX_LINE_CHARS)
        if not raw:
            return
        lineno += 1
        for piece in _pieces(raw.rstrip(b"\n")):
            yield LogLine(lineno, piece, seen_at)


class LogReader:
    """Incremental reader of one log file (see the module docstring for what it tolerates).

    ``offset`` starts reading at that byte (e.g. the size of an existing file whose old
    content belongs to an earlier server). Line numbers continue across truncation and
    rotation, so they stay unique within one reader.
    """

    def __init__(self, path: str | os.PathLike[str], *, offset: int = 0,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.notes: list[str] = []
        self.lines_read = 0
        self.bytes_read = 0
        self._clock = clock
        self._offset = max(0, offset)
        self._ident: tuple[int, int] | None = None
        self._fh: BinaryIO | None = None
        self._buf = b""
        self._bad_utf8_noted = False
        self._missing_noted = False
        self._error_noted: str | None = None
        # a poll within LIVE_GAP s of the previous one (or of construction, when there was
        # no backlog to read) sees lines soon after they were written
        self._last_poll: float | None = None if self._backlog() else clock()

    def _note(self, message: str) -> None:
        self.notes.append(message)

    def poll(self, *, final: bool = False) -> list[LogLine]:
        """Return the complete lines written since the last poll (all of them with ``final``)."""
        now = self._clock()
        live = self._last_poll is not None and now - self._last_poll <= LIVE_GAP
        self._last_poll = now
        raw_lines: list[bytes] = []
        try:
            st: os.stat_result | None = os.stat(self.path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            return self._fail(f"cannot read log file {self.path}: {exc}", raw_lines, final, live)
        try:
            if self._fh is not None and (st is None or (st.st_dev, st.st_ino) != self._ident):
                self._read(raw_lines)  # finish the old file (moved away or deleted)
                if st is not None:
                    self._note(f"log file {self.path} was replaced (rotated) after "
                               f"{self.lines_read + len(raw_lines)} lines; reading the new file "
                               "from its start (line numbers continue)")
                    self._close()
                    self._offset = 0
            if st is None:
                if self._fh is None and not self._missing_noted:
                    self._note(f"log file {self.path} does not exist (yet); nothing to read")
                    self._missing_noted = True
                return self._emit(raw_lines, final, live)
            if not stat.S_ISREG(st.st_mode):
                return self._fail(f"log path {self.path} is not a regular file", raw_lines,
                                  final, live)
            if self._fh is None:
                self._fh = open(self.path, "rb")
                fst = os.fstat(self._fh.fileno())
                if self._ident is not None and (fst.st_dev, fst.st_ino) != self._ident:
                    self._note(f"log file {self.path} is a new file (rotated while it could not "
                               "be read); reading it from its start")
                    self._flush_partial(raw_lines)
                    self._offset = 0
                self._ident = (fst.st_dev, fst.st_ino)
                self._missing_noted = False
            if st.st_size < self._offset:
                self._note(f"log file {self.path} shrank from {self._offset} to {st.st_size} "
                           "bytes (truncated); reading it again from its start")
                self._flush_partial(raw_lines)
                self._offset = 0
            self._fh.seek(self._offset)
            self._read(raw_lines)
        except OSError as exc:
            self._close()
            return self._fail(f"cannot read log file {self.path}: {exc}", raw_lines, final, live)
        self._error_noted = None
        return self._emit(raw_lines, final, live)

    def _read(self, raw_lines: list[bytes]) -> None:
        assert self._fh is not None
        while True:
            data = self._fh.read(_READ_CHUNK)
            if not data:
                return
            self._offset += len(data)
            self.bytes_read += len(data)
            self._buf += data
            *complete, self._buf = self._buf.split(b"\n")
            raw_lines.extend(complete)
            if len(self._buf) > 4 * MAX_LINE_CHARS:  # a "line" with no end in sight
                raw_lines.append(self._buf)
                self._buf = b""

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def close(self) -> None:
        """Release the open file (a later poll opens it again)."""
        self._close()

    def _backlog(self) -> bool:
        try:
            return os.path.getsize(self.path) > self._offset
        except OSError:
            return False

    def _flush_partial(self, raw_lines: list[bytes]) -> None:
        if self._buf:
            raw_lines.append(self._buf)
            self._buf = b""

    def _fail(self, message: str, raw_lines: list[bytes], final: bool,
              live: bool) -> list[LogLine]:
        if self._error_noted != message:
            self._note(message)
            self._error_noted = message
        return self._emit(raw_lines, final, live)

    def _emit(self, raw_lines: list[bytes], final: bool, live: bool) -> list[LogLine]:
        if final:
            self._flush_partial(raw_lines)
        now = self._clock()
        out: list[LogLine] = []
        for raw in raw_lines:
            self.lines_read += 1
            if not self._bad_utf8_noted:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    self._note(f"log file {self.path} has bytes that are not UTF-8 at line "
                               f"{self.lines_read}; shown as U+FFFD")
                    self._bad_utf8_noted = True
            out.extend(LogLine(self.lines_read, piece, now, live) for piece in _pieces(raw))
        return out


class LogFollower:
    """Polls a :class:`LogReader` every ``interval`` s in a daemon thread.

    Each new line goes to every callback (in the follower's thread, under its lock) and
    into a bounded store: the first ``head`` and the last ``tail`` lines are kept
    (``dropped`` counts the rest). ``poll()`` may also be called directly; ``stop()`` makes a
    final poll that includes an unterminated last line.
    """

    def __init__(self, reader: LogReader, *, interval: float = 0.2, head: int = 2000,
                 tail: int = 20000, callbacks: Iterable[Callable[[LogLine], None]] = ()) -> None:
        self.reader = reader
        self.interval = interval
        self.head: list[LogLine] = []
        self.tail: deque[LogLine] = deque(maxlen=tail)
        self.dropped = 0
        self.callbacks = list(callbacks)
        self.errors: list[str] = []
        self._head_max = head
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "LogFollower":
        """Start the background thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"k3-log {self.reader.path}",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self, *, final: bool = False) -> list[LogLine]:
        """Read what is new now, store it and run the callbacks; return the new lines."""
        with self._lock:
            lines = self.reader.poll(final=final)
            for line in lines:
                if len(self.head) < self._head_max:
                    self.head.append(line)
                else:
                    if len(self.tail) == self.tail.maxlen:
                        self.dropped += 1
                    self.tail.append(line)
                for cb in self.callbacks:
                    try:
                        cb(line)
                    except Exception as exc:  # a consumer bug must not kill the follower
                        if len(self.errors) < 20:
                            self.errors.append(f"{getattr(cb, '__qualname__', cb)}: {exc!r}")
            return lines

    @property
    def lock(self) -> threading.RLock:
        """The lock held while lines are stored and callbacks run (re-entrant)."""
        return self._lock

    def lines(self) -> list[LogLine]:
        """The kept lines, in order (a gap where ``dropped`` lines were not kept)."""
        with self._lock:
            return self.head + list(self.tail)

    def stop(self) -> None:
        """Stop the thread and read what is left (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.poll(final=True)
        self.reader.close()
