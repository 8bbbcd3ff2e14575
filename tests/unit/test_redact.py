"""Secret redaction: names, free text, argv, environments, nested data, learned secrets."""

from __future__ import annotations

import string
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_k3accept.output.redact import REDACTED, Redactor, is_secret_name


@pytest.mark.parametrize("name", [
    "API_KEY", "K3ACCEPT_API_KEY", "--api-key", "HF_TOKEN", "apiKey", "OPENAI_APIKEY",
    "db_password", "PASSWD", "AWS_SECRET_ACCESS_KEY", "GOOGLE_CREDENTIALS", "Authorization",
    "x-api-key", "NGC_AUTH", "session_cookie", "hfToken"])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "max_tokens", "--max-num-batched-tokens", "tokenizer", "--tokenizer-mode", "PWD",
    "--k3-api-key-env", "api_key_env", "prefix_cache_hits_total", "CUDA_VISIBLE_DEVICES",
    "num_gpu_blocks", "model", "--port", "author"])
def test_plain_names(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize("text, secret", [
    ("python -m vllm.entrypoints.openai.api_server --api-key s3cr3t-value --port 8000",
     "s3cr3t-value"),
    ("vllm serve m --api-key=s3cr3t-value", "s3cr3t-value"),
    ("env HF_TOKEN=abcdef123456 python x.py", "abcdef123456"),
    ("non-default args: {'model': '/m', 'api_key': ['s3cr3t-value'], 'port': 8000}",
     "s3cr3t-value"),
    ('{"api_key": "s3cr3t-value", "max_tokens": 32}', "s3cr3t-value"),
    ("Authorization: Bearer abc.def-123456", "abc.def-123456"),
    ("GET https://bob:pa55word@registry.example/v2/", "pa55word"),
    ("key sk-abcdefghijklmnopqrstuvwx in a message", "sk-abcdefghijklmnopqrstuvwx"),
    ("token hf_ABCDEFGHIJKLMNOPQRSTUV leaked", "hf_ABCDEFGHIJKLMNOPQRSTUV"),
    ("curl -H 'x-api-key: s3cr3t-value' http://h", "s3cr3t-value"),
    ("password = 'hunter2hunter2'", "hunter2hunter2"),
    # found by the review of 2026-12-07: an assignment inside another name's value, the
    # docker form of -e, vLLM's list of keys, URL credentials without a user name
    ("Skipped: http://h:8000/?api_key=s3cr3t-value/v1/models answered HTTP 404",
     "s3cr3t-value"),
    ("EngineDeadError: api_key=s3cr3t-value (root cause above)", "s3cr3t-value"),
    ("endpoint=http://h:8000/?token=s3cr3t-value", "s3cr3t-value"),
    ("docker run --env=VLLM_API_KEY=s3cr3t-value vllm/vllm-openai", "s3cr3t-value"),
    ("vllm serve m --api-key first-key-1 s3cr3t-value --port 8000", "s3cr3t-value"),
    ("non-default args: {'api_key': ['first-key-1', 's3cr3t-value']}", "s3cr3t-value"),
    ("base_url http://:s3cr3t-value@127.0.0.1:8000", "s3cr3t-value"),
    ("base_url http://s3cr3t-value@127.0.0.1:8000/v1", "s3cr3t-value"),
])
def test_text_patterns(text: str, secret: str) -> None:
    out = Redactor().text(text)
    assert secret not in out
    assert REDACTED in out


@pytest.mark.parametrize("text", [
    "(EngineCore pid=8086) INFO 11-29 23:14:50 [core.py:402] CPU KV cache size: 5,760 tokens, "
    "Maximum concurrency for 2,048 tokens per request: 2.81x",
    "init engine (profile, create kv cache, warmup model) took 3.21 s",
    '{"model": "k3-testbed", "max_tokens": 32, "prompt_tokens": 12}',
    "python -m vllm.entrypoints.openai.api_server --model /m --port 8000 --max-model-len 2048",
    "--k3-api-key-env MY_KEY_VAR",
    'assert KEY == "something else"',
    "test_secret.py:18: AssertionError",
    'KEY = os.environ["K3_TEST_KEY"]',
    "password = get_password()",
    "KeyError: 'tokens'",  # a traceback's exception name is no secret's name
    "see https://github.com/vllm-project/vllm/issues/39963 and git@github.com:x/y",
])
def test_ordinary_text_is_untouched(text: str) -> None:
    assert Redactor().text(text) == text


@pytest.mark.parametrize("text, expected", [
    ("Authorization: Bearer abcdefgh12345", "Authorization: Bearer ***"),
    ("authorization: Basic dXNlcjpwYXNz", "authorization: Basic ***"),
    ("Authorization: Token abcdefgh12345", "Authorization: Token ***"),
    ('Authorization: Digest username="u", response="abcdef123"', "Authorization: Digest ***"),
    ("Proxy-Authorization: abcdefghij123", "Proxy-Authorization: ***"),
    ('{"Authorization": "Bearer abc12345xyz", "x": 1}', '{"Authorization": "Bearer ***", "x": 1}'),
    ("-H 'Authorization: Token abc' http://h", "-H 'Authorization: Token ***"),
])
def test_authorization_values_hide_the_credential_and_keep_the_scheme(
        text: str, expected: str) -> None:
    assert Redactor().text(text) == expected


def test_known_secret_is_redacted_verbatim_anywhere() -> None:
    red = Redactor(["Zq9-plantedkey"])
    assert red.text("prefixZq9-plantedkeysuffix and again Zq9-plantedkey") == (
        f"prefix{REDACTED}suffix and again {REDACTED}")
    assert red.leaks("has Zq9-plantedkey") and not red.leaks("clean")


def test_short_secrets_are_not_replaced_verbatim() -> None:
    assert Redactor(["ab"]).text("a tab and a cab") == "a tab and a cab"


def test_argv() -> None:
    argv = ["vllm", "serve", "m", "--api-key", "k1-secret", "--port", "8000", "--token=t0k3n",
            "HF_TOKEN=x", "--k3-api-key-env", "MYVAR", "--api-key", "--disable-log-stats"]
    assert Redactor().argv(argv) == [
        "vllm", "serve", "m", "--api-key", REDACTED, "--port", "8000", f"--token={REDACTED}",
        f"HF_TOKEN={REDACTED}", "--k3-api-key-env", "MYVAR", "--api-key",
        "--disable-log-stats"]


def test_from_settings_learns_key_env_and_launch() -> None:
    settings = SimpleNamespace(api_key_env="MY_KEY", launch="testbed --api-key launchpw42")
    environ = {"MY_KEY": "abc1", "NGC_API_KEY": "nvapi-0123456789", "SHORT_TOKEN": "1",
               "HOME": "/root"}
    red = Redactor.from_settings(settings, environ)
    assert red.secrets == {"abc1", "nvapi-0123456789", "launchpw42"}
    assert red.text("vLLM args {'api_key': 'launchpw42'} with abc1 inside") == (
        f"vLLM args {{'api_key': '{REDACTED}'}} with {REDACTED} inside")


def test_env_and_nested_data() -> None:
    red = Redactor(["plantedvalue9"])
    assert red.env({"HF_TOKEN": "x", "VLLM_X": "1", "OTHER": "has plantedvalue9"}) == {
        "HF_TOKEN": REDACTED, "VLLM_X": "1", "OTHER": f"has {REDACTED}"}
    data = {"api_key": "k", "has_api_key": True, "tokens": ["a", "b"], "nested": [
        {"password": ["p1", "p2"], "log": "line with plantedvalue9"}], "max_tokens": 32}
    assert red.data(data) == {"api_key": REDACTED, "has_api_key": True, "tokens": ["a", "b"],
                              "nested": [{"password": [REDACTED, REDACTED],
                                          "log": f"line with {REDACTED}"}], "max_tokens": 32}


_SECRET = st.text(string.ascii_letters + string.digits + "-_.", min_size=4, max_size=40)


@settings(max_examples=200, deadline=None)
@given(secret=_SECRET, before=st.text(max_size=60), after=st.text(max_size=60))
def test_a_known_secret_never_survives(secret: str, before: str, after: str) -> None:
    secret = secret.strip()
    red = Redactor([secret])
    assert secret not in red.text(before + secret + after)
    assert secret not in "".join(red.argv([before, secret, after]))


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["--api-key", "--token", "--password", "HF_TOKEN",
                             "OPENAI_API_KEY"]),
       value=st.text(string.ascii_letters + string.digits, min_size=6, max_size=30),
       sep=st.sampled_from([" ", "="]))
def test_secret_arguments_never_survive_in_commands(name: str, value: str, sep: str) -> None:
    value = "Zx" + value  # distinct from the rest of the command
    sep = sep if name.startswith("--") else "="  # NAME VALUE is not an assignment
    command = f"python -m vllm.entrypoints.openai.api_server --port 8000 {name}{sep}{value} -x"
    assert value not in Redactor().text(command)
    red = Redactor()
    red.learn_command(command)
    assert value not in red.text(f"log line echoing {value}!")


def test_the_prefilter_lets_every_secret_name_word_through() -> None:
    """Text without a _MAYBE hit skips the patterns: every word that makes a name secret
    must hit it, or a secret of that name would pass unredacted."""
    from pytest_k3accept.output import redact

    for word in sorted(redact._WORDS) + list(redact._SUFFIXES):
        assert redact._MAYBE.search(word.lower()), word
        assert Redactor().text(f"{word.lower()}=s3cr3tvalue") == f"{word.lower()}={REDACTED}"


def test_a_field_called_key_is_an_identifier_in_structured_data() -> None:
    """A timeline event's ``key`` ("engine_init_done") survives the record's redaction (it
    was '***', so a record read back showed no startup event); a secret under it is still
    caught by its shape, and secret-named fields stay redacted."""
    r = Redactor(secrets=["launch-secret-77"])
    events = r.data({"events": [{"key": "engine_init_done", "label": "engine init done"}]})
    assert events["events"][0]["key"] == "engine_init_done"
    assert r.data({"key": "sk-" + "a" * 24})["key"] == REDACTED
    assert r.data({"key": "launch-secret-77"})["key"] == REDACTED
    assert r.data({"api_key": "plain-value-1"})["api_key"] == REDACTED


def test_learn_command_finds_secrets_inside_other_options_and_lists() -> None:
    red = Redactor()
    red.learn_command("docker run --env=VLLM_API_KEY=secret-one-1 -e HF_TOKEN=hf_secrettwo2 "
                      "img vllm serve m --api-key secret-three-3 secret-four-4 --port 8000")
    assert {"secret-one-1", "hf_secrettwo2", "secret-three-3", "secret-four-4"} <= red.secrets
    assert red.argv(["vllm", "serve", "--api-key", "k1-secret", "k2-secret", "--port", "8000"]
                    ) == ["vllm", "serve", "--api-key", REDACTED, REDACTED, "--port", "8000"]


def test_a_usage_error_reaches_the_terminal_redacted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--k3-endpoint", "ftp://user:s3cr3t-value@127.0.0.1:1")
    assert result.ret == 4
    text = result.stdout.str() + result.stderr.str()
    assert "s3cr3t-value" not in text and "ftp://user:***@127.0.0.1:1" in text
    pasted = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--k3-endpoint",
                                           "http://127.0.0.1:1", "--k3-api-key-env",
                                           "not a name s3cr3t-value")
    text = pasted.stdout.str() + pasted.stderr.str()
    assert pasted.ret == 4 and "s3cr3t-value" not in text and "not shown" in text


def test_an_endpoint_with_a_query_string_is_refused_without_echoing_it(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--k3-endpoint", "http://127.0.0.1:1/?api_key=s3cr3t-value")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 4 and "query string" in text and "s3cr3t-value" not in text


def test_a_server_log_in_the_fallback_directory_is_recognised_for_redaction(
        tmp_path: Path) -> None:
    # artifacts/ could not be written: the log went to a k3accept-artifacts-* temp dir, which
    # the record's writer redacts as it does artifacts/
    import tempfile

    from pytest_k3accept.fixtures.server import _log_path, in_fallback_dir

    blocked = tmp_path / "afile"
    blocked.write_text("")
    notes: list[str] = []
    log = _log_path(blocked, notes).resolve()
    try:
        assert notes and in_fallback_dir(log)
    finally:
        log.parent.rmdir()
    assert not in_fallback_dir(tmp_path / "artifacts" / "server-x.log")
    assert not in_fallback_dir(Path(tempfile.gettempdir()) / "elsewhere" / "server-x.log")
