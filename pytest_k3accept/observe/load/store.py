"""A run's records and value columns, in memory while small, spilled to disk beyond.

Decision (issue 17 item 4, docs/load.md "Long runs"): a soak's client memory must not grow
with the run's length while every figure stays exact (percentiles of *all* values, no
sketch, no sample). So what grows with the run lives in a file, re-read in passes:

* :class:`RecordStore` holds a run's :class:`~.result.RunRecord` objects in slot order. Up to
  ``memory`` records (:data:`MEMORY_RECORDS`) it is a plain list, so the common run
  (hundreds of requests) never touches the disk and is as fast as before. Beyond it the
  records are pickled in frames of ``batch`` (:data:`BATCH`) to an anonymous temporary file
  and read back one frame at a time whenever the store is iterated; the floats are the same
  objects' bits (pickle keeps a float and the packed ``array('d')`` of gaps exactly).
* :class:`FloatColumn` is the same for one metric's values (TTFT, e2e, TPOT, the pooled
  ITL gaps of a summary): a packed ``array('d')`` up to ``memory`` floats, then the
  file. :func:`~.stats.distribution` of a spilled column selects its exact percentiles
  with :func:`~.stats.order_statistics` in passes over the file (bounded memory).

The file is ``tempfile.TemporaryFile`` in the spill directory (``spill_dir``, else
``$K3ACCEPT_SPILL_DIR``, else the system temp directory): it has no name once created, so
nothing is left on disk when the store is closed (:meth:`RecordStore.close`,
``LoadResult.close()``), garbage-collected, or the process ends, even by a crash. A spill
directory that cannot be written (missing, read-only, full) is never an error: the store
says why in :attr:`RecordStore.spill_error` (shown in the run's line and summary) and keeps
the records in memory from then on; what was written stays readable, a partly written frame
is cut off and its records stay in memory, so nothing measured is lost.

Merging (worker processes, issue 20 item 3): :meth:`RecordStore.extend` appends another
store's (or any iterable's) records in order, :meth:`RecordStore.merged` builds one store
from several; a store pickles as its records (exact; it then costs their memory in the
pickle), so a worker's store can be returned through ``multiprocessing`` and merged.
"""

from __future__ import annotations

import bisect
import os
import pickle
import tempfile
import weakref
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, overload

if TYPE_CHECKING:  # pragma: no cover - records are pickled whatever their class
    from .result import RunRecord

#: records a store keeps in memory before it spills to disk (a run below it never writes)
MEMORY_RECORDS = 4096
#: records per pickled frame once spilled (the most a spilled store holds in memory)
BATCH = 512
#: floats a column keeps in memory before it spills (512 KiB)
MEMORY_FLOATS = 65_536
#: bytes read per pass step of a spilled column
_READ = 1 << 20
#: the environment variable naming the spill directory
SPILL_ENV = "K3ACCEPT_SPILL_DIR"


def spill_dir(given: str | os.PathLike[str] | None = None) -> str:
    """The directory spill files go to: ``given``, ``$K3ACCEPT_SPILL_DIR``, the temp dir."""
    return os.fspath(given) if given is not None else (os.environ.get(SPILL_ENV)
                                                       or tempfile.gettempdir())


class _Spill:
    """An anonymous temporary file written and read by offset (``os.pwrite``/``pread``),
    closed when its owner is collected; ``error`` says why it could not be used."""

    def __init__(self, directory: str | os.PathLike[str] | None, what: str) -> None:
        self.directory, self.what = spill_dir(directory), what
        self.fd: int | None = None
        self.size = 0
        self.error: str | None = None
        self._finalizer: Any = None

    def write(self, data: bytes, held: int) -> bool:
        """Append ``data``; False (and ``error`` set) when the file cannot take it, the
        file then cut back to what it held before. ``held``: items kept in memory instead."""
        if self.error is not None:
            return False
        try:
            if self.fd is None:
                handle = tempfile.TemporaryFile(dir=self.directory, prefix="k3accept-",
                                                suffix=".spill", buffering=0)
                self.fd = os.dup(handle.fileno())
                handle.close()  # the dup keeps the (nameless) file open
                self._finalizer = weakref.finalize(self, os.close, self.fd)
            view, offset = memoryview(data), self.size
            while view:
                n = os.pwrite(self.fd, view, offset)
                view, offset = view[n:], offset + n
        except OSError as exc:
            self._fail(exc, held)
            return False
        self.size += len(data)
        return True

    def _fail(self, exc: OSError, held: int) -> None:
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, self.size)  # a frame written in part is cut off
            except OSError:
                pass  # reads stop at ``size`` anyway
        reason = exc.strerror or str(exc) or type(exc).__name__
        self.error = (f"could not spill {self.what} to {self.directory!r} ({reason}); "
                      f"keeping them in memory from number {held + 1} on, so this run's "
                      f"client memory grows with its length: set {SPILL_ENV} to a "
                      "writable directory with free space")

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (all of them: a regular file reads short only at
        its end)."""
        assert self.fd is not None
        parts, got = [], 0
        while got < length:
            chunk = os.pread(self.fd, length - got, offset + got)
            if not chunk:
                raise OSError(f"spill file of {self.what} ended early")
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        """Close (and so delete) the file."""
        if self._finalizer is not None:
            self._finalizer()
        self.fd, self.size = None, 0


class FloatColumn:
    """One metric's values: a packed ``array('d')`` up to ``memory`` floats, then spilled
    to disk in blocks; iterating it yields every value in order (re-iterable, so
    :func:`~.stats.order_statistics` can make its passes)."""

    def __init__(self, values: Iterable[float] = (), *, memory: int | None = None,
                 spill_dir: str | os.PathLike[str] | None = None) -> None:
        self.memory = max(1, MEMORY_FLOATS if memory is None else memory)
        self.values = array("d")  #: the values not on disk (all of them until it spills)
        self._file = _Spill(spill_dir, "values")
        self._on_disk = 0
        self.extend(values)

    @property
    def spilled(self) -> bool:
        """True when some values are on disk."""
        return self._on_disk > 0

    @property
    def spill_error(self) -> str | None:
        """Why the values stay in memory although there are many (None: they did not)."""
        return self._file.error

    def append(self, value: float) -> None:
        """Add one value."""
        self.values.append(value)
        if len(self.values) >= self.memory:
            self._spill()

    def extend(self, values: Iterable[float]) -> None:
        """Add values (an ``array('d')`` is copied as one block)."""
        self.values.extend(values)
        if len(self.values) >= self.memory:
            self._spill()

    def _spill(self) -> None:
        if self._file.write(self.values.tobytes(), self._on_disk):
            self._on_disk += len(self.values)
            self.values = array("d")

    def __len__(self) -> int:
        return self._on_disk + len(self.values)

    def __iter__(self) -> Iterator[float]:
        end, offset, step = self._on_disk * 8, 0, _READ
        while offset < end:
            block = array("d")
            block.frombytes(self._file.read(offset, min(step, end - offset)))
            offset += step
            yield from block
        yield from self.values[:]  # a copy: appending while iterating cannot shift it

    def close(self) -> None:
        """Drop the values and delete the file."""
        self._file.close()
        self._on_disk, self.values = 0, array("d")

    def __repr__(self) -> str:
        return f"FloatColumn({len(self)} values{', spilled' if self.spilled else ''})"


class RecordStore(Sequence["RunRecord"]):
    """A run's records in order: a list up to ``memory`` records, then pickled frames of
    ``batch`` records in an anonymous temporary file (see the module docstring).

    It is a read-only ``Sequence`` for callers (``len``, iteration, ``store[i]``; an index
    into the spilled part reads its frame, a slice is a list) plus :meth:`append`,
    :meth:`extend`, :meth:`update` and :meth:`close`."""

    def __init__(self, records: Iterable[RunRecord] = (), *, memory: int | None = None,
                 batch: int | None = None,
                 spill_dir: str | os.PathLike[str] | None = None) -> None:
        self.memory = max(1, MEMORY_RECORDS if memory is None else memory)
        self.batch = max(1, BATCH if batch is None else batch)
        self._dir = spill_dir
        self._mem: list[RunRecord] = []  # the records after the spilled ones
        self._file = _Spill(spill_dir, "load records")
        self._frames: list[tuple[int, int]] = []  # (offset, bytes) of each frame on disk
        self._ends: list[int] = []  # records on disk up to and including each frame
        self._patched: dict[int, list[RunRecord]] = {}  # changed frames the file refused
        self._closed = False
        self.extend(records)

    # -- writing --------------------------------------------------------------------

    def append(self, record: RunRecord) -> None:
        """Add one record at the end (spilling a frame when the memory part is full)."""
        self._mem.append(record)
        if len(self._mem) >= (self.batch if self._frames else self.memory):
            self._spill()

    def extend(self, records: Iterable[RunRecord]) -> None:
        """Add ``records`` (another store's, read frame by frame, or any iterable) in
        order: how the stores of worker processes are merged exactly."""
        for r in records:
            self.append(r)

    @classmethod
    def merged(cls, stores: Iterable[Iterable[RunRecord]], **options: Any) -> "RecordStore":
        """One store holding the records of ``stores`` one after the other."""
        out = cls(**options)
        for s in stores:
            out.extend(s)
        return out

    def _spill(self) -> None:
        if self._file.error is not None:
            return  # stays in memory (spill_error says why)
        keep: list[RunRecord] = []
        mem, self._mem = self._mem, keep
        for i in range(0, len(mem), self.batch):
            frame = mem[i:i + self.batch]
            held = self._ends[-1] if self._ends else 0
            try:
                data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # noqa: BLE001 - an odd record: keep it in memory
                self._file._fail(OSError(f"{type(exc).__name__}: {exc}"), held)
                data = b""
            offset = self._file.size
            if not data or not self._file.write(data, held):
                keep.extend(mem[i:])  # nothing measured is lost
                return
            self._frames.append((offset, len(data)))
            self._ends.append(held + len(frame))

    @property
    def spill_error(self) -> str | None:
        """Why the records stay in memory although there are many (None: they did not)."""
        return self._file.error

    @property
    def spilled(self) -> bool:
        """True when some records are on disk."""
        return bool(self._frames)

    def update(self, change: Callable[[RunRecord], bool]) -> int:
        """Call ``change`` on every record (it edits the record in place and returns True
        when it changed it); spilled frames with a change are written back. Returns how
        many records changed."""
        changed = 0
        for k, (offset, length) in enumerate(list(self._frames)):
            frame = self._frame(k)
            hits = sum(1 for r in frame if change(r))
            if hits:
                data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
                new = self._file.size
                if self._file.write(data, self._ends[k]):
                    self._frames[k] = (new, len(data))  # the old frame's bytes stay unused
                    self._patched.pop(k, None)
                else:
                    self._patched[k] = frame  # the file is full: the change stays in memory
                changed += hits
        changed += sum(1 for r in self._mem if change(r))
        return changed

    # -- reading --------------------------------------------------------------------

    def _frame(self, k: int) -> list[RunRecord]:
        if k in self._patched:
            return self._patched[k]
        offset, length = self._frames[k]
        frame: list[RunRecord] = pickle.loads(self._file.read(offset, length))
        return frame

    def _check(self) -> None:
        if self._closed:
            raise ValueError("this RecordStore is closed (LoadResult.close() dropped the "
                             "run's records): read the records before closing it")

    def __len__(self) -> int:
        return (self._ends[-1] if self._ends else 0) + len(self._mem)

    def __iter__(self) -> Iterator[RunRecord]:
        self._check()
        for k in range(len(self._frames)):
            yield from self._frame(k)
        yield from list(self._mem)

    @overload
    def __getitem__(self, index: int) -> RunRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[RunRecord]: ...

    def __getitem__(self, index: int | slice) -> RunRecord | list[RunRecord]:
        self._check()
        if isinstance(index, slice):
            return list(self)[index] if self._frames else self._mem[index]
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("RecordStore index out of range")
        on_disk = self._ends[-1] if self._ends else 0
        if i >= on_disk:
            return self._mem[i - on_disk]
        k = bisect.bisect_right(self._ends, i)
        return self._frame(k)[i - (self._ends[k - 1] if k else 0)]

    def __bool__(self) -> bool:
        return len(self) > 0

    # -- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Drop the records and delete the spill file (iterating afterwards raises)."""
        self._file.close()
        self._mem, self._frames, self._ends, self._closed = [], [], [], True
        self._patched = {}

    def __enter__(self) -> "RecordStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its records (exact; a spilled store's records all go into the
        pickle), unpickled as a new store with the same thresholds."""
        return (_rebuild, (list(self), self.memory, self.batch))

    def __repr__(self) -> str:
        return (f"RecordStore({len(self)} records"
                f"{f', {len(self._frames)} frames on disk' if self._frames else ''})")


def _rebuild(records: list[RunRecord], memory: int, batch: int) -> RecordStore:
    return RecordStore(records, memory=memory, batch=batch)
