"""Live test: the embedded testbed really serves a tiny model with vLLM 0.32 (CPU build).

Skips when the testbed virtualenv is not installed. Takes ~30-90 s (vLLM start-up).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept import testbed
from pytest_k3accept.observe.server.launch import ServerProcess, _proc_table, free_port

pytestmark = pytest.mark.live

STARTUP_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def testbed_ready() -> None:
    reason = testbed.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def _post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def _group_alive(pgid: int) -> list[int]:
    """Non-zombie processes whose process group is ``pgid`` (the launcher's own /proc table)."""
    return [pid for pid, (_ppid, group, state, _start) in _proc_table().items()
            if state != "Z" and group == pgid]


def test_testbed_server_serves_and_stops(testbed_ready: None, tmp_path: Path) -> None:
    t0 = time.monotonic()
    model = testbed.build_model("tiny")
    build_s = time.monotonic() - t0
    assert (model / "config.json").exists() and (model / "model.safetensors").exists()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "vllm.log"
    sp = ServerProcess()
    with sp:
        argv = testbed.server_command(model, port=port, kv_cache_bytes=1 << 30)
        sp.start(testbed.pinned(argv),
                 env=testbed.server_env(), log_path=log)
        sp.wait_ready(base, timeout=STARTUP_TIMEOUT_S)
        startup = sp.startup_seconds
        assert startup is not None
        print(f"\ntestbed: model ready in {build_s:.1f} s, server ready in {startup:.1f} s (port {port})")

        models = _get(f"{base}/v1/models")
        card = models["data"][0]
        assert card["id"] == "k3-testbed" and card["max_model_len"] == 2048
        assert card["root"] == str(model)

        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "The server loads the weights at startup. Why?"}]
        counted = _post(f"{base}/tokenize", {"model": "k3-testbed", "messages": messages})
        chat = _post(f"{base}/v1/chat/completions",
                     {"model": "k3-testbed", "messages": messages, "max_tokens": 12,
                      "ignore_eos": True, "temperature": 0})
        usage = chat["usage"]
        assert usage["prompt_tokens"] == counted["count"] > 10
        assert usage["completion_tokens"] == 12
        assert usage["total_tokens"] == usage["prompt_tokens"] + 12
        assert chat["choices"][0]["finish_reason"] == "length"
        assert isinstance(chat["choices"][0]["message"]["content"], str)

        # The chat template renders tool definitions; the hermes parser is on.
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}]
        tool_chat = _post(f"{base}/v1/chat/completions",
                          {"model": "k3-testbed", "messages": messages, "tools": tools,
                           "max_tokens": 4})
        assert tool_chat["usage"]["prompt_tokens"] > usage["prompt_tokens"]

        pgid = sp.pid
        assert pgid is not None and sp.alive()
        log_text = log.read_text(errors="replace")
        assert "init engine (profile, create kv cache, warmup model) took" in log_text
        assert "CPU KV cache size: " in log_text

    assert not sp.alive()
    with socket.socket() as s:
        s.settimeout(1)
        assert s.connect_ex(("127.0.0.1", port)) != 0, "port still accepts connections after stop()"
    assert _group_alive(pgid) == [], "processes of the server's group survived stop()"


def test_broken_variants_build(testbed_ready: None) -> None:
    t0 = time.monotonic()
    head16 = testbed.build_model("head16")
    huge = testbed.build_model("huge")
    print(f"\nhead16+huge models ready in {time.monotonic() - t0:.1f} s")
    cfg16 = json.loads((head16 / "config.json").read_text())
    assert cfg16["head_dim"] == 16 and (head16 / "model.safetensors").exists()
    cfg_huge = json.loads((huge / "config.json").read_text())
    assert cfg_huge["vocab_size"] == 2_000_000 and cfg_huge["hidden_size"] == 8192
    assert not list(huge.glob("*.safetensors"))
    assert (huge / "tokenizer.json").exists()
    assert testbed.server_command(huge, port=1)[-2:] == ["--load-format", "dummy"]


def test_the_real_server_answers_openmetrics_and_both_pages_read_the_same(testbed) -> None:
    """vLLM 0.32 answers ``GET /metrics/`` as OpenMetrics (ending ``# EOF``) when asked with
    ``Accept: application/openmetrics-text``; parsed with prometheus_client's OpenMetrics
    parser it gives the same counters and gauges as the Prometheus text page read at once."""
    import httpx

    from pytest_k3accept.observe.metrics import Snapshot

    accept = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    with httpx.Client(base_url=testbed.base_url, timeout=30) as http:
        om = http.get("/metrics/", headers={"Accept": accept})
        text = http.get("/metrics")
    assert om.status_code == 200 and "openmetrics" in om.headers["content-type"]
    assert om.text.rstrip().endswith("# EOF")
    a = Snapshot.parse(om.text, content_type=om.headers["content-type"])
    b = Snapshot.parse(text.text, content_type=text.headers.get("content-type"))
    assert a.openmetrics and not b.openmetrics and a.problems == {} == b.problems
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:num_requests_running",
                 "vllm:kv_cache_usage_perc"):
        assert a.value(name) is not None and a.value(name) == b.value(name), name
