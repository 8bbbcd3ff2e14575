"""Artifacts on a disk that refuses them (pure parts; real mounts in
tests/plugin/test_artifacts_faults.py): a failed record write keeps the good record and
leaves no temporary file; a server log whose directory cannot be written goes elsewhere,
with one note naming the directory."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from pytest_k3accept.fixtures.server import _log_path
from pytest_k3accept.output import record


def test_a_record_that_fails_half_way_never_replaces_a_good_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "record.json"
    record.write({"good": True}, target)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        record.write({"good": False, "big": "x" * 10_000}, target)
    assert json.loads(target.read_text()) == {"good": True}
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_an_unwritable_artifacts_dir_sends_the_log_elsewhere_with_one_note(
        tmp_path: Path) -> None:
    blocker = tmp_path / "arts"
    blocker.write_text("a file where the directory should be")
    notes: list[str] = []
    log = _log_path(blocker / "sub", notes)
    assert log.parent.is_dir() and not str(log).startswith(str(blocker))
    assert len(notes) == 1 and notes[0].startswith(f"artifacts: cannot write the server log "
                                                   f"to {blocker / 'sub'}/ (")
    assert f"it is written to {log} instead" in notes[0]
    fine = _log_path(tmp_path / "ok", notes)
    assert fine.parent == tmp_path / "ok" and len(notes) == 1
