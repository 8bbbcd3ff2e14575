"""The load profile parser: files, markers/keywords, validation messages (Hypothesis too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_k3accept.observe.load.profile import LoadProfile, ProfileError, load, parse_text
from pytest_k3accept.checks.slo import SLO_KEYS

DATA = Path(__file__).resolve().parents[2] / "pytest_k3accept" / "data"

TOML = '''
name = "agents"
context_tokens = 6000
output_tokens = 400
concurrency = 16
requests = 200
max_seconds = 600
prefix_tokens = 3000
prefix_reuse = 0.9
request_set = "sets/agents.jsonl"

[slo]
ttft_p99 = 5.0
error_rate = 0.01

[headroom]
min_free = 0.2
failover = true
replicas = 3
'''


def test_toml_file_is_read_and_relative_request_set_resolved(tmp_path: Path) -> None:
    f = tmp_path / "agents.toml"
    f.write_text(TOML)
    p = load(f)
    assert (p.name, p.context_tokens, p.concurrency, p.rate) == ("agents", 6000, 16, None)
    assert not p.open_loop
    assert p.prefix_reuse == 0.9 and p.max_seconds == 600.0
    assert p.request_set == str((tmp_path / "sets" / "agents.jsonl").resolve())
    assert p.slo.limits == {"ttft_p99": 5.0, "error_rate": 0.01}
    assert (p.headroom.min_free, p.headroom.failover, p.headroom.replicas) == (0.2, True, 3)


def test_json_file_and_name_defaults_to_file_stem(tmp_path: Path) -> None:
    f = tmp_path / "night.json"
    f.write_text(json.dumps({"rate": 2.5, "requests": 10}))
    p = load(f)
    assert p.name == "night" and p.open_loop and p.rate == 2.5
    assert p.concurrency is None  # open loop without an explicit in-flight cap


def test_shipped_agent_profile_is_valid() -> None:
    p = load(DATA / "agent_profile.toml")
    assert p.name == "agent-team" and p.request_set
    assert Path(p.request_set).exists()
    assert p.slo and p.headroom.min_free == 0.10


@pytest.mark.parametrize("text, fmt, expected", [
    ('concurrency = "many"', "toml", "concurrency: expected an integer >= 1, got 'many'"),
    ("concurrency = 0", "toml", "concurrency: expected an integer >= 1, got 0"),
    ("prefix_reuse = 1.5", "toml", "prefix_reuse: expected a fraction in [0, 1]"),
    ("max_seconds = -1", "toml", "max_seconds: expected a positive number"),
    ("stream = 1", "toml", "stream: expected true or false"),
    ("concurency = 4", "toml", "concurency: unknown profile field (did you mean 'concurrency'?)"),
    ("[slo]\nttft_p99 = 'fast'", "toml", "slo.ttft_p99: expected a number"),
    ("[slo]\nttft_p999 = 1", "toml", "slo.ttft_p999: unknown SLO (did you mean 'ttft_p99'?)"),
    ("[headroom]\nmin_fre = 0.1", "toml", "headroom.min_fre: unknown field"),
    ("[headroom]\nmin_free = 2", "toml", "headroom: min_free: expected a fraction"),
    ("context_tokens = 100\nprefix_tokens = 100", "toml", "prefix_tokens (100) must be smaller"),
    ("concurrency = [", "toml", "invalid TOML"),
    ('{"requests": 5,\n "rate": }', "json", "line 2, column"),
    ("[1, 2]", "json", "expected a table of profile values at the top level"),
])
def test_bad_values_name_file_and_field(tmp_path: Path, text: str, fmt: str,
                                        expected: str) -> None:
    f = tmp_path / f"p.{fmt}"
    f.write_text(text)
    with pytest.raises(ProfileError) as err:
        load(f)
    assert str(f) in str(err.value)
    assert expected in str(err.value)


def test_missing_file_is_a_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read the load profile"):
        load(tmp_path / "absent.toml")


def test_non_utf8_file_is_a_profile_error(tmp_path: Path) -> None:
    f = tmp_path / "latin1.toml"
    f.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ProfileError, match=r"cannot read the load profile: not UTF-8 text"):
        load(f)


def test_keyword_overrides_and_flat_headroom_keys() -> None:
    base = LoadProfile(concurrency=8)
    p = base.replace("marker", min_free=0.25, slo={"e2e_p90": 3}, requests=5)
    assert p.headroom.min_free == 0.25 and p.requests == 5 and p.concurrency == 8
    assert p.slo.limits == {"e2e_p90": 3.0}
    p2 = p.replace("marker", slo={"ttft_p99": 1})
    assert p2.slo.limits == {"e2e_p90": 3.0, "ttft_p99": 1.0}  # merged, not replaced
    with pytest.raises(ProfileError, match="marker: requests"):
        base.replace("marker", requests=1.5)


def test_scaled_for_failover() -> None:
    p = LoadProfile(concurrency=5, requests=9).scaled(1.5)
    assert (p.concurrency, p.requests) == (8, 14)
    o = LoadProfile().replace("x", rate=2.0).scaled(2.0)
    assert o.rate == 4.0 and o.concurrency is None


# -- Hypothesis -----------------------------------------------------------------------
valid = st.fixed_dictionaries({}, optional={
    "name": st.text(min_size=1, max_size=20).filter(str.strip),
    "context_tokens": st.integers(2000, 100_000),
    "output_tokens": st.integers(1, 10_000),
    "concurrency": st.integers(1, 4096),
    "requests": st.integers(1, 10**6),
    "max_seconds": st.floats(0.001, 1e6),
    "prefix_tokens": st.integers(0, 511),  # below every context_tokens, default 512 too
    "prefix_reuse": st.floats(0, 1),
    "warmup": st.integers(0, 1000),
    "stream": st.booleans(),
    "timeout": st.none() | st.floats(0.01, 1e4),
    "ignore_eos": st.booleans(),
    "seed": st.integers(0, 2**31),
    "slo": st.dictionaries(st.sampled_from(sorted(k for k in SLO_KEYS
                                                  if not k.endswith(("_rate", "_ratio")))),
                           st.floats(0, 1e4), max_size=4),
    "headroom": st.fixed_dictionaries({}, optional={
        "min_free": st.floats(0, 1), "max_preemptions": st.integers(0, 100),
        "failover": st.booleans(), "replicas": st.none() | st.integers(2, 16)}),
})


@given(valid)
def test_valid_tables_round_trip_through_json(data: dict[str, Any]) -> None:
    p = LoadProfile.from_mapping(data, "hyp")
    again = LoadProfile.from_mapping(json.loads(json.dumps(p.as_dict())), "hyp")
    assert again == p
    for key, value in data.items():
        if key not in ("slo", "headroom"):
            assert getattr(p, key) == value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=10)
keys = st.sampled_from([*LoadProfile.__dataclass_fields__, "min_free", "bogus", "rate"])


@settings(max_examples=300)
@given(st.dictionaries(keys, json_values, max_size=6))
def test_any_table_gives_a_profile_or_a_profile_error(data: dict[str, Any]) -> None:
    try:
        p = LoadProfile.from_mapping(data, "fuzz")
    except ProfileError as exc:
        assert str(exc).startswith("fuzz: ")
    else:
        assert p.requests >= 1 and p.max_seconds > 0


@given(st.text(max_size=200))
def test_arbitrary_text_never_escapes_as_another_exception(text: str) -> None:
    for fmt in ("toml", "json"):
        try:
            data = parse_text(text, fmt, "t")
            LoadProfile.from_mapping(data, "t")
        except ProfileError:
            pass


def test_examples_in_the_docs_are_valid() -> None:
    import re

    from pytest_k3accept.observe.load.agentset import expand_agent_set
    from pytest_k3accept.config.tables import decode

    text = (Path(__file__).resolve().parents[2] / "docs" / "load.md").read_text()
    blocks = [decode(b, "toml", "docs/load.md") for b in re.findall(r"```toml\n(.*?)```", text, re.S)]
    assert len(blocks) == 5
    assert len(expand_agent_set(blocks[0], "docs")) == 4
    assert LoadProfile.from_mapping(blocks[1], "docs").concurrency == 16
    soak = LoadProfile.from_mapping(blocks[2], "docs")  # "Long runs: a soak's memory"
    assert soak.name == "soak" and soak.max_seconds == 3600
    assert LoadProfile.from_mapping(blocks[3], "docs").processes == 2  # "Past one process"
    ray = LoadProfile.from_mapping(blocks[4], "docs")  # "Past one machine"
    assert (ray.processes, ray.cluster) == (8, "ray://head:10001")
