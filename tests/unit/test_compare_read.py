"""Reading a record back (compare/read.py): records of today's format (kept as fixtures,
written by real sessions on the vLLM CPU testbed) and older ones read and migrated; what is
not a usable record gets a message that says which kind of bad it is."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept.compare.read import SUPPORTED, RecordError, from_data, parse, read
from pytest_k3accept.output.record import SCHEMA_VERSION

RECORDS = Path(__file__).resolve().parents[1] / "data" / "records"
POC = RECORDS / "record-1.1-poc.json"  # pytest suites/poc --k3-launch testbed --k3-record
LOAD = RECORDS / "record-1.1-load.json"  # a k3_headroom test (concurrency 2, 6 requests)


def raw(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def as_1_0(data: dict[str, Any]) -> dict[str, Any]:
    """A record in the 1.0 shape: load entries with their plain figures only (no run id,
    no typed fields)."""
    old = copy.deepcopy(data)
    old["schema_version"] = "1.0"
    typed = ("run_id", "profile_name", "concurrency", "requests", "ok", "errors",
             "errors_by_kind", "prompt_tokens_p50", "prompt_tokens_max", "preemptions",
             "peak_kv", "peak_kv_from", "gauge_samples", "sustained_waiting", "target_source",
             "target", "failover", "load_factor", "error_rate")
    for ev in old["evidence"]:
        if ev["kind"] == "load":
            for key in typed:
                ev["data"].pop(key, None)
    return old


def test_todays_records_read_and_carry_what_a_comparison_needs() -> None:
    for path in (POC, LOAD):
        rec = read(path)
        assert rec.written_as == "1.1" and rec.data["schema_version"] == SCHEMA_VERSION
        assert rec.model == "k3-testbed"
        assert rec.source == str(path)
    assert read(POC).verdict == "functional-only"
    assert read(LOAD).verdict == "keep"
    assert [e["kind"] for e in read(LOAD).evidence].count("load") == 1


def test_every_supported_version_reads_and_the_current_one_is_among_them() -> None:
    assert {"1.0", "1.1", "1.2", SCHEMA_VERSION} <= set(SUPPORTED)
    for version in SUPPORTED:
        data = raw(LOAD)
        data["schema_version"] = version
        assert from_data(data, "x").written_as == version


def test_a_1_0_record_is_migrated_its_load_runs_get_ids_and_profile_names() -> None:
    rec = from_data(as_1_0(raw(LOAD)), "old.json")
    load = next(e for e in rec.evidence if e["kind"] == "load")["data"]
    assert load["run_id"] == "run-1" and load["profile_name"] == "default"
    assert load["requests"] == 6 and load["errors"] == 0
    assert rec.written_as == "1.0" and rec.data["schema_version"] == SCHEMA_VERSION
    assert any("1.0" in n for n in rec.notes)


def test_migration_leaves_the_input_alone() -> None:
    data = as_1_0(raw(LOAD))
    before = json.dumps(data, sort_keys=True)
    from_data(data, "x")
    assert json.dumps(data, sort_keys=True) == before


@pytest.mark.parametrize("text, words", [
    ("", "empty file"),
    ("   \n", "empty file"),
    ("[1, 2, 3]", "a JSON list at the top level"),
    ('{"name": "guidellm", "benchmarks": []}', "no \"$schema\" or \"schema_version\""),
    ("not json at all", "not JSON (line 1, column 1"),
    ('{"$schema": "urn:other:1", "schema_version": "1.1"}', "$schema is 'urn:other:1'"),
])
def test_not_a_record_says_why(text: str, words: str) -> None:
    with pytest.raises(RecordError) as err:
        parse(text, "b.json")
    assert words in str(err.value) and str(err.value).startswith("b.json: ")


def test_a_truncated_record_is_called_truncated() -> None:
    text = POC.read_text()
    for cut in (len(text) // 2, len(text) - 3, 100):
        with pytest.raises(RecordError, match="truncated: the JSON stops early"):
            parse(text[:cut], "cut.json")


@pytest.mark.parametrize("version, words", [
    ("1.9", "written by a newer release: upgrade pytest-k3accept"),
    ("2.0", "written by a newer release"),
    ("0.9", "not a schema version any release wrote"),
    ("banana", "not a schema version any release wrote"),
])
def test_another_schema_version_names_the_versions_read(version: str, words: str) -> None:
    data = raw(POC)
    data["schema_version"] = version
    with pytest.raises(RecordError) as err:
        from_data(data, "v.json")
    assert f"schema version {version} is not one this release reads" in str(err.value)
    assert words in str(err.value) and "1.0, 1.1" in str(err.value)


def test_a_record_missing_its_reproduction_is_incomplete() -> None:
    data = raw(POC)
    del data["reproduction"]
    with pytest.raises(RecordError, match="\"reproduction\" is missing"):
        from_data(data, "e.json")


def test_files_that_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no such file .* first run has no previous record"):
        read(tmp_path / "nope.json")
    with pytest.raises(RecordError, match="is a directory"):
        read(tmp_path)
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RecordError, match="not UTF-8 text"):
        read(binary)
