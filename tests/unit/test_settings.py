"""Settings: precedence, validation messages, no key on the command line."""

from __future__ import annotations

import pytest

from pytest_k3accept.config import settings


class FakeConfig:
    """Just enough of pytest.Config for ``from_config`` (unit test of our own logic)."""

    def __init__(self, options: dict[str, object] | None = None,
                 ini: dict[str, object] | None = None) -> None:
        self.options = options or {}
        self.ini = ini or {}

    def getoption(self, name: str, default: object = None) -> object:
        return self.options.get(name, default)

    def getini(self, name: str) -> object:
        return self.ini.get(name)


def make(options=None, ini=None, env=None) -> settings.Settings:
    return settings.from_config(FakeConfig(options, ini), environ=env or {})  # type: ignore[arg-type]


def test_defaults() -> None:
    s = make()
    assert s.endpoints == () and s.endpoint is None
    assert s.api_key_env == "K3ACCEPT_API_KEY"
    assert s.timeout == 60.0 and s.require is False and s.preset == "kimi-k3"


def test_precedence_cli_env_ini() -> None:
    assert make(env={"K3ACCEPT_ENDPOINT": "http://a:1"}).endpoint == "http://a:1"
    assert make(ini={"k3_endpoint": ["http://i:3"]}).endpoint == "http://i:3"
    s = make({"k3_endpoint": ["http://c:2/v1/"]}, ini={"k3_endpoint": ["http://i:3"]},
             env={"K3ACCEPT_ENDPOINT": "http://a:1"})
    assert s.endpoints == ("http://c:2",)
    assert make(env={"K3ACCEPT_ENDPOINT": "http://a:1, http://b:2"}).endpoints == (
        "http://a:1", "http://b:2")


@pytest.mark.parametrize("option,value,needle", [
    ("k3_endpoint", ["ftp://x"], "--k3-endpoint: 'ftp://x' is not an http(s) URL"),
    ("k3_endpoint", ["http://h:notaport"], "invalid port"),
    ("k3_timeout", "abc", "--k3-timeout: 'abc' is not a number"),
    ("k3_timeout", "-1", "must be a positive number"),
    ("k3_timeout", "nan", "must be a positive number"),
    ("k3_api_key_env", "sk-live-123456", "is not an environment variable name"),
])
def test_bad_values_name_the_option(option: str, value: object, needle: str) -> None:
    with pytest.raises(pytest.UsageError) as err:
        make({option: value if isinstance(value, list) else value})
    assert needle in str(err.value)


def test_api_key_read_from_named_variable() -> None:
    s = make({"k3_api_key_env": "MY_KEY"})
    assert s.api_key({"MY_KEY": "secret"}) == "secret"
    assert s.api_key({}) is None
    assert "secret" not in repr(s)


def test_require_from_env_and_testbed_flag() -> None:
    assert make(env={"K3ACCEPT_REQUIRE": "1"}).require is True
    assert make({"k3_launch": "testbed"}).launch_testbed
    assert not make({"k3_launch": "vllm serve x"}).launch_testbed


def test_baseline_records_repeatable_from_option_env_or_ini() -> None:
    from pathlib import Path

    assert make().baseline == ()
    assert make({"k3_baseline": ["a.json", "b.json"]}).baseline == (Path("a.json"),
                                                                   Path("b.json"))
    assert make(env={"K3ACCEPT_BASELINE": "last.json, older.json"}).baseline == (
        Path("last.json"), Path("older.json"))
    assert make(ini={"k3_baseline": ["ini.json"]}).baseline == (Path("ini.json"),)


def test_lenient_settings_keep_the_good_values_and_default_the_bad_ones() -> None:
    options = {"k3_timeout": "abc", "k3_endpoint": ["gpu-node:8000", "http://b:1"],
               "k3_record": "out/record.json", "k3_artifacts": "arts"}
    with pytest.raises(pytest.UsageError, match="--k3-endpoint: 'gpu-node:8000'"):
        settings.from_config(FakeConfig(options), environ={})  # type: ignore[arg-type]
    s = settings.from_config(FakeConfig(options), environ={}, lenient=True)  # type: ignore[arg-type]
    assert s.timeout == 60.0  # the bad value at its default
    assert s.endpoints == ()  # a repeatable option with one bad value: none of it is used
    assert str(s.record) == "out/record.json" and str(s.artifacts) == "arts"
