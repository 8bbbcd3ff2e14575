"""Driver and CUDA version parsing and comparison (hypothesis for the version strings)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_k3accept.observe.host.versions import (VersionError, cuda_from_int, driver_covers_cuda,
                                                   driver_meets, parse_cuda, parse_driver)

part = st.integers(min_value=0, max_value=999)
driver_parts = st.lists(part, min_size=1, max_size=3).map(tuple)


def spell(parts: tuple[int, ...], pad: bool) -> str:
    return ".".join(f"{p:02d}" if pad and i else str(p) for i, p in enumerate(parts))


@pytest.mark.parametrize("actual,minimum,ok", [
    ("580.65.06", "580", True), ("580.65.06", "580.65.06", True),
    ("580.65.05", "580.65.06", False), ("580.159.03", "580.65.06", True),
    ("575.57.08", "580", False), ("575.57.08", "R580", False), ("590.44.01", "r580", True),
    ("580", "580.65.06", False), ("580.65", "580.65", True), ("1000.1.1", "580", True),
])
def test_driver_meets_known_cases(actual: str, minimum: str, ok: bool) -> None:
    assert driver_meets(actual, minimum) is ok


@given(driver_parts, st.booleans(), st.sampled_from(["", "R", "r"]))
def test_driver_spellings_round_trip(parts: tuple[int, ...], pad: bool, prefix: str) -> None:
    v = parse_driver(prefix + spell(parts, pad))
    assert v.parts == parts and v.major == parts[0]
    assert parse_driver(v.text).parts == parts


@given(driver_parts, driver_parts)
def test_driver_comparison_is_tuple_comparison_at_the_minimums_precision(
        a: tuple[int, ...], b: tuple[int, ...]) -> None:
    expected = (a + (0,) * 3)[:len(b)] >= b
    assert driver_meets(spell(a, True), spell(b, False)) is expected
    # a version always meets itself and its own branch
    assert driver_meets(spell(a, True), str(a[0]))


@given(st.text(max_size=20))
def test_garbage_driver_strings_raise_version_error_quoting_them(text: str) -> None:
    try:
        v = parse_driver(text)
    except VersionError as exc:
        assert repr(text) in str(exc)
    else:
        assert all(p >= 0 for p in v.parts)
        assert v.text.replace(".", "").isdigit()


@pytest.mark.parametrize("bad", [None, 580, "", "R", "580.", "580..1", "five-eighty", "580.a"])
def test_driver_rejects(bad: object) -> None:
    with pytest.raises(VersionError):
        parse_driver(bad)


@given(st.integers(min_value=1, max_value=99), st.integers(min_value=0, max_value=9))
def test_cuda_int_form(major: int, minor: int) -> None:
    v = cuda_from_int(major * 1000 + minor * 10)
    assert (v.major, v.minor) == (major, minor) and v.text == f"{major}.{minor}"
    assert parse_cuda(major * 1000 + minor * 10).text == v.text


@pytest.mark.parametrize("text,parts", [("13", (13,)), ("13.0", (13, 0)), ("13.0.1", (13, 0, 1)),
                                        ("cuda 12.9", (12, 9)), ("V13.0", (13, 0))])
def test_cuda_strings(text: str, parts: tuple[int, ...]) -> None:
    assert parse_cuda(text).parts == parts


@pytest.mark.parametrize("bad", ["", "thirteen", "13.0.1.2", True, 13, None])
def test_cuda_rejects(bad: object) -> None:
    with pytest.raises(VersionError):
        parse_cuda(bad)


def test_driver_covers_cuda_by_nvml_cuda_version_then_by_driver_table() -> None:
    assert driver_covers_cuda("13.0", None, "13.0.1")[0] is True
    assert driver_covers_cuda("12.9", "575.57.08", "13.0")[0] is False
    assert driver_covers_cuda(None, "580.65.06", "13.0")[0] is True
    ok, how = driver_covers_cuda(None, "575.57.08", "13.0.1")
    assert ok is False and "580.65.06" in how
    assert driver_covers_cuda(None, None, "13.0") == (None, "host driver unknown")
    assert driver_covers_cuda(None, "580.65.06", "99.0")[0] is None
