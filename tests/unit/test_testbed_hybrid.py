"""The hybrid testbed variant's wiring, without vLLM: ``--k3-launch "testbed --variant NAME"``,
the CLI's variants, the ``testbed-hybrid`` preset."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_k3accept import cli, testbed
from pytest_k3accept.observe.server import command


def test_variant_word_is_the_plugins_the_rest_goes_to_vllm() -> None:
    assert command.testbed_words(()) == ("tiny", ())
    assert command.testbed_words(("--variant", "hybrid", "--max-num-batched-tokens", "512")) == (
        "hybrid", ("--max-num-batched-tokens", "512"))
    assert command.testbed_words(("--no-enable-prefix-caching", "--variant=hybrid")) == (
        "hybrid", ("--no-enable-prefix-caching",))


@pytest.mark.parametrize("words, needle", [
    (("--variant",), "give a model variant (tiny, head16, huge, hybrid, long)"),
    (("--variant", "kimi"), "--variant 'kimi': no such testbed model; choose one of tiny, head16, "
                            "huge, hybrid"),
])
def test_bad_variant_is_named(words: tuple[str, ...], needle: str) -> None:
    with pytest.raises(ValueError) as exc:
        command.testbed_words(words)
    assert needle in str(exc.value)


def test_plan_builds_the_chosen_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake(port: int, **kw: Any) -> str:
        seen.update(kw, port=port)
        return "vllm serve ..."
    monkeypatch.setattr(testbed, "testbed_launch_command", fake)
    p = command.plan("testbed --variant hybrid --max-model-len 4096", None, testbed_port=8123,
                     testbed_args=("--prefix-cache-retention-interval", "512"))
    assert p.testbed and p.base_url == "http://127.0.0.1:8123"
    assert seen == {"port": 8123, "variant": "hybrid", "extra_args": (
        "--max-model-len", "4096", "--prefix-cache-retention-interval", "512")}
    command.plan("testbed", None, testbed_port=1)
    assert seen["variant"] == "tiny" and seen["extra_args"] == ()


def test_cli_and_build_know_the_hybrid_variant() -> None:
    assert "hybrid" in testbed.VARIANTS
    args = cli.build_parser().parse_args(["testbed", "model", "hybrid"])
    assert args.variant == "hybrid"
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["testbed", "model", "qwen"])


def test_hybrid_preset_sizes_its_prefix_in_whole_blocks() -> None:
    import pytest_k3accept.observe.load  # noqa: F401  (import order of presets -> slo)
    from pytest_k3accept.config.presets import load_preset

    p = load_preset("testbed-hybrid")
    assert p.server.kv_cache_bytes and p.server.max_model_len == 2048
    assert p.targets.prefix_tokens % 128 == 0
    assert 0 < p.targets.context_tokens - p.targets.prefix_tokens < 128
