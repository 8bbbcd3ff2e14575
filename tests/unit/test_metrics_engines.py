"""Per-engine metrics, older releases' names, OpenMetrics and scoped Prometheus queries, on
REAL pages: a vLLM 0.32 server with ``--data-parallel-size 2`` and a real Prometheus 2.42
answering PromQL about them (``tests/data/metrics/README.md`` says how each was captured).
The expected figures are read off the pages by hand (grep), not computed by the code."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from fault_stub import StubServer
from pytest_k3accept.observe.host.facts import GpuFacts, HostFacts, NodeFacts
from pytest_k3accept.observe.host.remote import Prometheus, RemoteError, selector_matchers
from pytest_k3accept.observe.host.telemetry import GpuTelemetry
from pytest_k3accept.observe.load import monitor
from pytest_k3accept.observe.load.peak import unmeasured_peak
from pytest_k3accept.observe.metrics import (MetricsScraper, MetricsUnavailable, Snapshot,
                                             not_exported, scan_engine_gauges, scan_gauges)

DATA = Path(__file__).parent.parent / "data" / "metrics"
OM = "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"
#: the under-load page, per engine (engine "0", engine "1")
KV = {"0": 0.9523809523809523, "1": 0.8571428571428572}
RUNNING, WAITING = {"0": 4.0, "1": 3.0}, {"0": 0.0, "1": 1.0}


def page(name: str) -> str:
    return (DATA / name).read_text()


def snap(name: str, at: float = 0.0) -> Snapshot:
    return Snapshot.parse(page(name), at=at)


def empty() -> Snapshot:
    return Snapshot.from_samples([], at=0.0)


# -- engines ------------------------------------------------------------------------------
def test_two_engines_kv_is_the_fullest_engine_not_the_sum() -> None:
    s = snap("vllm-0.32-dp2-under-load.txt")
    assert s.kv_cache_usage_per_engine() == KV
    assert s.kv_cache_usage() == max(KV.values())  # the sum, 1.81, was the bug
    assert s.engine_gauges() == {"kv": KV, "running": RUNNING, "waiting": WAITING}
    assert s.running() == 7.0 and s.waiting() == 1.0  # requests add up over engines
    text = page("vllm-0.32-dp2-under-load.txt")
    assert scan_engine_gauges(text) == s.engine_gauges()  # the cheap line scan agrees
    assert scan_gauges(text) == s.gauges() == {"kv": KV["0"], "running": 7.0, "waiting": 1.0}


def test_two_engines_counters_are_summed_and_kept_per_engine() -> None:
    d = snap("vllm-0.32-dp2-second-load.txt", 10.0) - snap("vllm-0.32-dp2-idle.txt")
    assert d.prompt_tokens() == 4944 + 4944
    assert d.generation_tokens() == 1735 + 1702
    assert d.preemptions() == 2 + 2
    assert d.prefix_cache_hits() == 1024 + 640 and d.prefix_cache_queries() == 4944 + 4944
    assert d.prefix_cache_hit_rate() == pytest.approx(1664 / 9888)
    assert d.per_engine("vllm:generation_tokens_total") == {"0": 1735, "1": 1702}
    assert d.per_engine("vllm:prefix_cache_hits_total") == {"0": 1024, "1": 640}
    # histograms merge: counts and sums add up over engines
    total, count = d.histogram("vllm:time_to_first_token_seconds")
    assert count == 16 and total == pytest.approx(13.74960732460022 + 12.091092586517334)
    assert d.histogram_over("vllm:request_queue_time_seconds", 1.0) == 0.0
    assert d.missing() == [] and d.as_dict()["aliased"] == {}


class Pages:
    """A loopback ``/metrics`` that answers the given pages in turn (the last one again)."""

    def __init__(self, stub: StubServer, *names: str) -> None:
        self.texts = [n if "\n" in n else page(n) for n in names]  # a name, or a page's text
        stub.route("GET", "/metrics", self.handle)

    def handle(self, req: Any) -> None:
        text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        req.send(200, text.encode(), "text/plain; version=1.0.0; charset=utf-8")


def run_monitor(*names: str, ok: int) -> dict[str, Any]:
    """Monitor over pages: the first is the baseline, the second a gauge sample during the
    run, the rest what the server shows after it."""
    async def go(base: str) -> dict[str, Any] | None:
        mon = monitor.Monitor(object(), MetricsScraper(base), settle_timeout=0.5)
        await mon.open()
        await mon.baseline()
        await mon.sample()
        try:
            return await mon.final(ok)
        finally:
            await mon.close()

    with StubServer() as stub:
        Pages(stub, *names)
        out = asyncio.run(go(stub.base_url))
    assert out is not None
    return out


def test_a_sample_of_the_idle_server_is_not_a_peak() -> None:
    """Real 0.32 DP=2 pages: a gauge sample taken while requests ran counts as busy; when
    the only sample during the run shows the idle page (short requests between samples),
    the peak is unknown, not 0 % (``unmeasured_peak``), in the headroom check and in the
    typed evidence's ``peak_kv``."""
    busy = run_monitor("vllm-0.32-dp2-idle.txt", "vllm-0.32-dp2-under-load.txt",
                       "vllm-0.32-dp2-after-load.txt", ok=0)
    assert busy["gauge_samples"] == 1 and busy["gauge_busy_samples"] == 1
    assert unmeasured_peak(busy) is None
    idle = run_monitor("vllm-0.32-dp2-idle.txt", "vllm-0.32-dp2-idle.txt",
                       "vllm-0.32-dp2-idle.txt", ok=0)
    assert idle["gauge_samples"] == 1 and idle["gauge_busy_samples"] == 0
    assert idle["peak_kv_usage"] == 0.0  # what an idle page reads: no peak
    assert "caught a request running" in (unmeasured_peak(idle) or "")


def test_a_sample_that_saw_requests_only_queued_is_not_a_peak() -> None:
    """A sample showing requests waiting with none running and no KV in use (queued before
    their first step: CI saw "peak KV 0 %" from such a sample alone) is not the server at
    work: the peak stays unknown (and with no busy sample the catch-up pace goes on, as
    tests/unit/test_monitor_schedule.py shows)."""
    queued = page("vllm-0.32-dp2-idle.txt").replace(
        'vllm:num_requests_waiting{engine="0",model_name="k3-testbed"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="k3-testbed"} 2.0')
    assert queued != page("vllm-0.32-dp2-idle.txt")
    out = run_monitor("vllm-0.32-dp2-idle.txt", queued, "vllm-0.32-dp2-idle.txt", ok=0)
    assert out["gauge_samples"] == 1 and out["peak_waiting"] == 2.0
    assert out["gauge_busy_samples"] == 0 and out["peak_kv_usage"] == 0.0
    assert "caught a request running" in (unmeasured_peak(out) or "")


def test_load_run_server_view_judges_the_fullest_engine() -> None:
    """The issue's case: two engines each near 90 % read as 'peak 1.81' (summed)."""
    srv = run_monitor("vllm-0.32-dp2-idle.txt", "vllm-0.32-dp2-under-load.txt",
                      "vllm-0.32-dp2-under-load.txt", ok=0)
    assert srv["peak_kv_usage"] == KV["0"] and srv["peak_kv_from"] == "samples"
    assert srv["peak_running"] == 7.0 and srv["peak_waiting"] == 1.0
    assert srv["engines"] == 2
    eng = srv["per_engine"]
    assert {e: v["peak_kv_usage"] for e, v in eng.items()} == KV
    assert {e: v["peak_running"] for e, v in eng.items()} == RUNNING
    assert {e: v["generation_tokens"] for e, v in eng.items()} == {"0": 69, "1": 99}
    assert srv["prompt_tokens"] == 2 * 2472 and srv["generation_tokens"] == 69 + 99
    assert eng["1"]["kv_usage"] == [round(KV["1"], 4)]


def test_preemptions_prove_each_engine_full_on_their_own() -> None:
    srv = run_monitor("vllm-0.32-dp2-idle.txt", "vllm-0.32-dp2-under-load.txt",
                      "vllm-0.32-dp2-after-load.txt", ok=8)
    assert srv["preemptions"] == 4 and srv["successes"]["length"] == 8
    assert srv["peak_kv_usage"] == 1.0 and srv["peak_kv_from"] == "preemptions"
    for engine in ("0", "1"):
        e = srv["per_engine"][engine]
        assert e["preemptions"] == 2 and e["peak_kv_usage"] == 1.0
        assert e["peak_kv_from"] == "preemptions"


# -- the Prometheus path ------------------------------------------------------------------
@pytest.fixture
def prom() -> Iterator[tuple[StubServer, dict[str, Any]]]:
    """A loopback Prometheus ``/api/v1/query`` answering the saved real answers:
    ``answers[selector]`` by the query's ``cluster`` matcher (``None``: no selector)."""
    answers: dict[str | None, str] = {
        'cluster="k3"': "prometheus-2.42-gauges-k3.json",
        'cluster="other"': "prometheus-2.42-counters-after.json",
        None: "prometheus-2.42-gauges-all.json"}
    seen: dict[str, Any] = {"queries": []}

    def handle(req: Any) -> None:
        query = parse_qs(urlsplit(req.path).query)["query"][0]
        seen["queries"].append(query)
        key = next((k for k in answers if k and k in query), None)
        if "(" in query.split("cluster", 1)[-1]:
            name, status = "prometheus-2.42-error-bad-selector.json", 400
        elif key is None and "cluster" in query:
            req.send(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}')
            return
        else:
            name, status = answers[key], 200
        req.send(status, page(name).encode())

    with StubServer() as stub:
        stub.route("GET", "/api/v1/query", handle)
        yield stub, seen


def test_prometheus_path_gives_the_direct_figures(prom: tuple[StubServer, dict[str, Any]],
                                                  ) -> None:
    stub, seen = prom
    scoped = Prometheus(stub.base_url, selector='cluster="k3"')
    direct = snap("vllm-0.32-dp2-under-load.txt")
    got = scoped.snapshot()
    assert got.engine_gauges() == direct.engine_gauges()
    assert got.gauges() == direct.gauges()
    assert scoped.kv_cache_usage() == direct.kv_cache_usage() == KV["0"]
    assert scoped.kv_cache_usage_per_engine() == KV
    assert all('cluster="k3"' in q for q in seen["queries"])
    # counters through PromQL: the after-load page's, summed the same way
    counters = Prometheus(stub.base_url, selector='{cluster="other"}').snapshot(
        ["vllm:prompt_tokens_total", "vllm:num_preemptions_total"])
    after = snap("vllm-0.32-dp2-after-load.txt")
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total"):
        assert (counters - empty()).known(name) == (after - empty()).known(name), name
        assert (counters - empty()).per_engine(name) == (after - empty()).per_engine(name)
    assert (counters - empty()).successes()["length"] == 8


def test_prometheus_without_selector_keeps_the_servers_apart(
        prom: tuple[StubServer, dict[str, Any]]) -> None:
    """Two scrape targets (an idle server and a loaded one) in one Prometheus: each has an
    engine "0"; unscoped, they are told apart by target, never merged into one engine."""
    stub, _ = prom
    per = Prometheus(stub.base_url).kv_cache_usage_per_engine()
    assert per == {"vllm-after@127.0.0.1:18741/0": 0.0, "vllm-after@127.0.0.1:18741/1": 0.0,
                   "vllm-under-load@127.0.0.1:18741/0": KV["0"],
                   "vllm-under-load@127.0.0.1:18741/1": KV["1"]}


def test_prometheus_selector_errors_say_what(prom: tuple[StubServer, dict[str, Any]]) -> None:
    stub, _ = prom
    with pytest.raises(RemoteError, match=r"HTTP 400.*bad_data.*parse error"):
        Prometheus(stub.base_url, selector='cluster=~"("').kv_cache_usage()
    with pytest.raises(RemoteError, match=r'the selector matched no GPU series: \{cluster="none"\}'):
        Prometheus(stub.base_url, selector='cluster="none"').facts()
    assert Prometheus(stub.base_url, selector='cluster="none"').kv_cache_usage() is None
    for bad in ("k3", "cluster", '{a="b"}}', 'a="b"\nc="d"'):
        with pytest.raises(ValueError, match="not a PromQL label selector"):
            selector_matchers(bad)
    assert selector_matchers(' {namespace="k3", pod=~"vllm-.*"} ') == \
        'namespace="k3", pod=~"vllm-.*"'


def test_kv_fallback_telemetry_keeps_engines() -> None:
    direct = snap("vllm-0.32-dp2-under-load.txt")
    tel = GpuTelemetry(None, kv_reader=direct.kv_cache_usage_per_engine, kv_label="x")
    tel.sample_now()
    summary = tel.summary()
    assert summary["kv_cache_usage_peak"] == KV["0"]
    assert summary["kv_cache_usage_peak_per_engine"] == KV
    assert "engine 1 85.7%" in tel.describe()
    one = GpuTelemetry(None, kv_reader=lambda: 0.5)
    one.sample_now()
    assert one.summary()["kv_cache_usage_peak"] == 0.5
    assert one.summary()["kv_cache_usage_peak_per_engine"] == {}


# -- older releases -----------------------------------------------------------------------
def test_older_names_read_as_the_current_ones() -> None:
    new = snap("vllm-0.32-dp2-under-load.txt", 5.0)
    old = snap("vllm-0.8-shape-dp2-under-load.txt", 5.0)
    assert old.engine_gauges() == new.engine_gauges()
    assert old.kv_cache_usage() == KV["0"]
    assert set(old.aliased) == {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries",
                                "vllm:gpu_prefix_cache_hits",
                                "vllm:time_per_output_token_seconds"}
    d_new, d_old = new - empty(), old - empty()
    assert d_old.prefix_cache_queries() == d_new.prefix_cache_queries() == 2 * 2472
    assert d_old.prefix_cache_hit_rate() == d_new.prefix_cache_hit_rate() == 0.0
    assert d_old.histogram("vllm:inter_token_latency_seconds") == \
        d_new.histogram("vllm:inter_token_latency_seconds")
    assert d_old.histogram("vllm:inter_token_latency_seconds")[1] == 65 + 95
    assert scan_engine_gauges(page("vllm-0.8-shape-dp2-under-load.txt")) == \
        new.engine_gauges()


def test_old_and_new_names_side_by_side_count_once() -> None:
    both = snap("vllm-0.11-shape-dp2-hidden-metrics.txt")
    new = snap("vllm-0.32-dp2-under-load.txt")
    assert both.aliased == {}
    assert (both - empty()).prefix_cache_queries() == 2 * 2472
    assert (both - empty()).histogram("vllm:inter_token_latency_seconds")[1] == 65 + 95
    assert both.engine_gauges() == new.engine_gauges()
    assert scan_gauges(page("vllm-0.11-shape-dp2-hidden-metrics.txt")) == new.gauges()


# -- OpenMetrics ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["vllm-0.32-dp2-after-load", "vllm-0.32-dp2-second-load"])
def test_openmetrics_page_gives_the_text_page_figures(name: str) -> None:
    """The two formats one after the other; under load (second-load) a few tokens were
    generated between the two reads, so there only the gauges and prompt counts compare."""
    om_text = page(f"{name}.openmetrics.txt")
    om, text = Snapshot.parse(om_text, content_type=OM), snap(f"{name}.txt")
    assert om.openmetrics and not text.openmetrics
    assert Snapshot.parse(om_text).openmetrics  # '# EOF' alone says so
    assert om.has_vllm and om.engine_gauges() == text.engine_gauges()
    assert scan_engine_gauges(om_text) == text.engine_gauges()
    assert om.cache_config() == text.cache_config()
    d_om, d_text = om - empty(), text - empty()
    assert d_om.prompt_tokens() == d_text.prompt_tokens() and d_om.prompt_tokens()
    if "second" in name:
        assert d_om.generation_tokens() == pytest.approx(d_text.generation_tokens(), abs=8)
        return
    keep = ("prompt_tokens", "generation_tokens", "preemptions", "prefix_cache_queries",
            "prefix_cache_hits", "prefix_cache_hit_rate", "successes", "queue_time_sum",
            "ttft_mean", "e2e_mean", "missing")
    assert {k: d_om.as_dict()[k] for k in keep} == {k: d_text.as_dict()[k] for k in keep}
    assert d_om.histogram_over("vllm:request_queue_time_seconds", 1.0) == \
        d_text.histogram_over("vllm:request_queue_time_seconds", 1.0)


def test_openmetrics_variants_counters_without_total_and_exemplars() -> None:
    text = ('# TYPE vllm:prompt_tokens_total counter\n'
            'vllm:prompt_tokens_total{engine="0"} 7 # {trace_id="a"} 1.0\n'
            '# TYPE vllm:generation_tokens counter\n'
            'vllm:generation_tokens{engine="0"} 3\n'
            '# TYPE vllm:kv_cache_usage_perc gauge\n'
            'vllm:kv_cache_usage_perc{engine="0"} 0.5\n# EOF\n')
    s = Snapshot.parse(text, content_type=OM)
    d = s - empty()
    assert d.prompt_tokens() == 7 and d.generation_tokens() == 3
    assert s.kv_cache_usage() == 0.5


def test_openmetrics_without_eof_is_refused_by_name() -> None:
    cut = page("vllm-0.32-dp2-after-load.openmetrics.txt").replace("# EOF", "")
    with pytest.raises(ValueError, match="without the closing '# EOF'"):
        Snapshot.parse(cut, content_type=OM)
    with pytest.raises(MetricsUnavailable, match="not OpenMetrics.*# EOF"):
        MetricsScraper("http://h:1")._check(200, cut, OM)


def test_scraper_reads_an_openmetrics_answer() -> None:
    """A Rust-frontend-like server: ``/metrics`` answered as OpenMetrics without asking."""
    body = page("vllm-0.32-dp2-second-load.openmetrics.txt").encode()
    with StubServer() as stub:
        stub.route("GET", "/metrics", lambda r: r.send(200, body, OM))
        got = MetricsScraper(stub.base_url).scrape()
        per = MetricsScraper(stub.base_url).engine_gauges()
    want = snap("vllm-0.32-dp2-second-load.txt")
    assert got.openmetrics and got.engine_gauges() == want.engine_gauges() == per


# -- missing families: unknown, never zero ---------------------------------------------------
def test_missing_families_are_unknown_not_zero() -> None:
    text = page("vllm-0.32-dp2-under-load.txt")
    cut = "\n".join(line for line in text.splitlines()
                    if "prefix_cache_hits" not in line and "kv_cache_usage_perc" not in line
                    and "num_preemptions" not in line) + "\n"
    s = Snapshot.parse(cut)
    assert s.has_vllm and s.kv_cache_usage() is None and s.kv_cache_usage_per_engine() == {}
    d = s - empty()
    assert d.prefix_cache_queries() == 2 * 2472
    assert d.prefix_cache_hits() is None and d.prefix_cache_hit_rate() is None
    assert d.preemptions() is None
    rec = d.as_dict()
    assert rec["preemptions"] is None and rec["prefix_cache_hit_rate"] is None
    assert rec["missing"] == ["vllm:num_preemptions", "vllm:prefix_cache_hits"]
    assert not_exported(rec["missing"], "0.32.0") == (
        "vllm:num_preemptions, vllm:prefix_cache_hits not exported by this server "
        "(vLLM 0.32.0): unknown, not zero")
    assert not_exported([]) == ""
    assert scan_engine_gauges(cut).get("kv") is None


# -- one node seen under two names ------------------------------------------------------------
def test_a_node_seen_under_two_names_counts_once() -> None:
    gpus = tuple(GpuFacts(index=i, uuid=f"GPU-{i}", name="NVIDIA H200") for i in range(8))
    file_view = NodeFacts(node="gpu-node-1", source="file", gpu_available=True,
                          driver_version="580.65.06", gpus=gpus)
    dcgm_view = NodeFacts(node="nvidia-dcgm-exporter-x7k2p", source="dcgm", gpu_available=True,
                          gpus=tuple(GpuFacts(index=g.index, uuid=g.uuid,
                                              memory_total_bytes=1 << 30) for g in gpus))
    other = NodeFacts(node="gpu-node-2", source="dcgm", gpu_available=True,
                      gpus=(GpuFacts(index=0, uuid="GPU-other"),))
    facts = HostFacts.merge([file_view, dcgm_view, other])
    assert facts.node_count == 2 and facts.gpu_count == 9
    first = facts.nodes[0]
    assert first.node == "gpu-node-1" and first.gpus[0].memory_total_bytes == 1 << 30
    assert any("nvidia-dcgm-exporter-x7k2p" in n and "counted once" in n for n in facts.notes)


def test_prometheus_answers_are_real_json_shapes() -> None:
    """Guard: the saved answers are Prometheus' own (status, resultType, [time, "value"])."""
    body = json.loads(page("prometheus-2.42-gauges-k3.json"))
    assert body["status"] == "success" and body["data"]["resultType"] == "vector"
    first = body["data"]["result"][0]
    assert isinstance(first["value"][1], str) and first["metric"]["job"] == "vllm-under-load"


def test_prometheus_selector_setting() -> None:
    from pytest_k3accept.config import settings

    class Config:
        def __init__(self, options: dict[str, object]) -> None:
            self.options = options

        def getoption(self, name: str, default: object = None) -> object:
            return self.options.get(name, default)

        def getini(self, name: str) -> object:
            return None

    def make(**options: object) -> settings.Settings:
        return settings.from_config(Config(options), environ={})  # type: ignore[arg-type]

    assert make(k3_gpu_selector='{cluster="k3"}').gpu_selector == 'cluster="k3"'
    assert make(k3_gpu_selector='{cluster="k3"}').prometheus_selector == 'cluster="k3"'
    assert make().gpu_selector is None
    with pytest.raises(pytest.UsageError, match="--k3-gpu-selector: not a PromQL"):
        make(k3_gpu_selector="k3")


def test_load_result_line_names_each_engine_and_unknowns() -> None:
    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.result import LoadResult
    from pytest_k3accept.observe.load.stats import summarize

    srv = run_monitor("vllm-0.32-dp2-idle.txt", "vllm-0.32-dp2-under-load.txt",
                      "vllm-0.32-dp2-under-load.txt", ok=0)
    result = LoadResult(LoadProfile(name="dp2"), [], 1.0, 0.0, "requests", 0,
                        summarize([], 1.0), {"mean": 0.0, "max": 0.0}, "http://x", "chat",
                        {}, server=srv)
    assert result.peak_kv_usage == KV["0"]
    assert ("peak KV 95.2% (fullest engine; engine 0 95.2%, engine 1 85.7%), 0 preemptions"
            in result.line())
    result.server = {**srv, "peak_kv_usage": None, "preemptions": None, "per_engine": {}}
    assert "peak KV unknown, unknown preemptions" in result.line()


def test_two_api_servers_multiprocess_pages() -> None:
    """``--api-server-count 2 --data-parallel-size 2``: prometheus_client's multiprocess
    collector merges both API server processes; engines stay apart, nothing is doubled."""
    load = snap("vllm-0.32-dp2-api2-under-load.txt")
    after = snap("vllm-0.32-dp2-api2-after-load.txt")
    assert not any(n.startswith(("python_", "process_")) or n.endswith("_created")
                   for n, _ in after.samples)
    per_engine = {"0": 0.8571428571428572, "1": 0.8571428571428572}
    assert load.kv_cache_usage_per_engine() == per_engine
    assert load.kv_cache_usage() == per_engine["0"] and load.running() == 6.0
    assert load.waiting() == 2.0
    om_text = page("vllm-0.32-dp2-api2-under-load.openmetrics.txt")
    # the real page repeats a family (http_request_duration_highr_seconds) in multiprocess mode
    assert om_text.count("# TYPE http_request_duration_highr_seconds histogram") == 2
    om = Snapshot.parse(om_text, content_type=OM)
    assert om.engine_gauges() == load.engine_gauges()
    d = after - empty()
    assert d.prompt_tokens() == 2 * 2476 and d.generation_tokens() == 2 * 1600
    assert d.preemptions() == 4 and d.successes()["length"] == 8
    assert d.per_engine("vllm:num_preemptions_total") == {"0": 2, "1": 2}


# -- histogram quantiles (PromQL's histogram_quantile) ------------------------------------
def test_ttft_quantiles_from_the_merged_buckets_of_two_engines() -> None:
    """Second load - idle on the real DP2 pages, read off by hand: both engines together
    have 2 TTFTs <= 0.75 s, 3 <= 1.0 s, 16 <= 2.5 s (of 16). p50: rank 8 falls in
    (1.0, 2.5] at 5 of its 13: 1.0 + 1.5 * 5/13; p99: rank 15.84, 1.0 + 1.5 * 12.84/13;
    p10: rank 1.6 in (0.5, 0.75] at 1.6 of 2."""
    d = snap("vllm-0.32-dp2-second-load.txt", 10.0) - snap("vllm-0.32-dp2-idle.txt")
    ttft = "vllm:time_to_first_token_seconds"
    assert d.histogram_quantile(ttft, 0.5) == pytest.approx(1.0 + 1.5 * 5 / 13)
    assert d.histogram_quantile(ttft, 0.99) == pytest.approx(1.0 + 1.5 * 12.84 / 13)
    assert d.histogram_quantile(ttft, 0.1) == pytest.approx(0.5 + 0.25 * 0.8)
    # nothing observed, no such histogram, q outside 0..1: undefined, never 0
    idle = snap("vllm-0.32-dp2-idle.txt") - snap("vllm-0.32-dp2-idle.txt")
    assert idle.histogram_quantile(ttft, 0.5) is None
    assert d.histogram_quantile("vllm:no_such_seconds", 0.5) is None
    assert d.histogram_quantile(ttft, 1.5) is None


def test_bucket_quantile_follows_promql_edge_cases() -> None:
    from pytest_k3accept.observe.metrics.histograms import bucket_quantile

    inf = float("inf")
    assert bucket_quantile(0.5, {1.0: 0, 2.0: 10, inf: 10}) == 1.5
    assert bucket_quantile(0.99, {1.0: 5, 2.0: 10, inf: 20}) == 2.0  # in +Inf: highest bound
    assert bucket_quantile(0.25, {1.0: 4, 2.0: 2, inf: 8}) == 0.5  # made monotonic first
    assert bucket_quantile(0.5, {-1.0: 3, 1.0: 4, inf: 4}) == -1.0  # bound <= 0 kept
    assert bucket_quantile(0.5, {1.0: 2, 2.0: 4}) is None  # no +Inf bucket
    assert bucket_quantile(0.5, {inf: 4}) is None and bucket_quantile(float("nan"), {}) is None


def test_prometheus_engine_peaks_over_a_window() -> None:
    """``max_over_time`` answers drop ``__name__`` (as Prometheus does): one query per
    family, each answer given its family's name back; shaped as ``engine_gauges``."""
    saved = json.loads(page("prometheus-2.42-gauges-k3.json"))["data"]["result"]
    seen: list[str] = []

    def handle(req: Any) -> None:
        query = parse_qs(urlsplit(req.path).query)
        seen.append(query["query"][0] + " @" + query["time"][0])
        name = query["query"][0].split("(", 1)[1].split("{", 1)[0]
        rows = [{"metric": {k: v for k, v in s["metric"].items() if k != "__name__"},
                 "value": s["value"]} for s in saved if s["metric"]["__name__"] == name]
        req.send(200, json.dumps({"status": "success", "data": {
            "resultType": "vector", "result": rows}}).encode())

    with StubServer() as stub:
        stub.route("GET", "/api/v1/query", handle)
        peaks = Prometheus(stub.base_url, selector='cluster="k3"').engine_peaks(100.0, 112.4)
    assert peaks == snap("vllm-0.32-dp2-under-load.txt").engine_gauges()
    assert peaks["kv"] == KV and peaks["running"] == RUNNING
    assert 'max_over_time(vllm:kv_cache_usage_perc{cluster="k3"}[13s]) @112.400' in seen


def test_failed_gauge_samples_say_why_the_peak_is_unknown() -> None:
    """A sample of ``/metrics`` that fails (here a 503 during the run) is counted and its
    reason kept, and the unknown peak's explanation says how many failed and why, so a run
    with one good sample and many failed ones is not read as 'requests between samples'."""
    with StubServer() as stub:
        answers = [page("vllm-0.32-dp2-idle.txt")]

        def handle(req: Any) -> None:
            if answers:
                req.send(200, answers.pop().encode(), "text/plain; version=1.0.0")
            else:
                req.send(503, b"busy", "text/plain")

        stub.route("GET", "/metrics", handle)

        async def go() -> None:
            mon = monitor.Monitor(object(), MetricsScraper(stub.base_url))
            await mon.open()
            await mon.sample()
            await mon.sample()
            assert mon.samples == 0 and mon.sample_errors == 2
            assert mon.sample_error == "HTTP 503"

        asyncio.run(go())
    srv = {"peak_kv_usage": 0.0, "peak_kv_from": "samples", "gauge_samples": 1,
           "gauge_busy_samples": 0, "gauge_sample_errors": 7,
           "gauge_sample_error": "ReadTimeout: timed out"}
    why = unmeasured_peak(srv) or ""
    assert "none of the 1 gauge sample taken" in why
    assert why.endswith("; 7 samples of /metrics failed (first: ReadTimeout: timed out)")
    assert "failed" not in (unmeasured_peak({**srv, "gauge_sample_errors": 0}) or "")


# -- two pages of two lifetimes (review of 2026-12-07): counter increases are unknown -------
def _page(name: str) -> str:
    return (DATA / name).read_text()


def test_a_restart_between_the_two_scrapes_makes_counters_unknown_not_measured() -> None:
    # the real page after load, from a process that started later (an OOM kill, a pod
    # rescheduled between the baseline and the final scrape): its counters are no increase
    after = _page("vllm-0.32-dp2-second-load.txt").replace(
        "process_start_time_seconds 1.79612342864e+09",
        "process_start_time_seconds 1.79612400000e+09")
    d = Snapshot.parse(after, at=10.0) - snap("vllm-0.32-dp2-idle.txt")
    assert d.prompt_tokens() is None and d.preemptions() is None
    assert d.successes() == {} and d.histogram_mean("vllm:time_to_first_token_seconds") is None
    assert d.histogram_over("vllm:request_queue_time_seconds", 1.0) is None
    problems = d.as_dict()["problems"]
    assert "restarted between the two scrapes" in problems["lifetime"]


def test_another_pod_behind_the_same_url_is_told_by_its_created_series() -> None:
    # same labels, another process: no process_start_time_seconds on either page, but each
    # counter's _created differs
    drop = "process_start_time_seconds"
    before = "\n".join(ln for ln in _page("vllm-0.32-dp2-idle.txt").splitlines()
                       if drop not in ln)
    after = "\n".join(ln for ln in _page("vllm-0.32-dp2-second-load.txt").splitlines()
                      if drop not in ln).replace(
        'vllm:prompt_tokens_created{engine="0",model_name="k3-testbed"} 1.7961235432003841e+09',
        'vllm:prompt_tokens_created{engine="0",model_name="k3-testbed"} 1.7961299999000000e+09')
    assert "1.7961299999" in after
    d = Snapshot.parse(after, at=10.0) - Snapshot.parse(before, at=0.0)
    assert d.prompt_tokens() is None
    assert "vllm:prompt_tokens_created changed" in d.as_dict()["problems"]["lifetime"]


def test_another_data_parallel_rank_answering_is_told_by_its_missing_series() -> None:
    # an external-LB API server exports only its own engines: the page after the run came
    # from the one that manages engine 1 only
    after = "\n".join(ln for ln in _page("vllm-0.32-dp2-second-load.txt").splitlines()
                      if 'engine="0"' not in ln)
    d = Snapshot.parse(after, at=10.0) - snap("vllm-0.32-dp2-idle.txt")
    assert d.prompt_tokens() is None
    assert "is gone from the second" in d.as_dict()["problems"]["lifetime"]


def test_one_lifetime_is_measured_as_before() -> None:
    d = snap("vllm-0.32-dp2-second-load.txt", 10.0) - snap("vllm-0.32-dp2-idle.txt")
    assert d.lifetime_changed() is None and "lifetime" not in d.as_dict()["problems"]


def test_a_replica_still_on_the_old_kv_name_keeps_its_reading_in_a_mixed_answer() -> None:
    # a rolling upgrade seen through Prometheus: one pod exports only the old name
    # (vllm:gpu_cache_usage_perc, before the rename), the other only the new one
    t = lambda i: {"job": "vllm", "instance": i, "engine": "0", "model_name": "m"}  # noqa: E731
    s = Snapshot.from_samples([("vllm:gpu_cache_usage_perc", t("10.0.0.1:8000"), 0.99),
                               ("vllm:kv_cache_usage_perc", t("10.0.0.2:8000"), 0.20)], 0.0)
    assert s.kv_cache_usage() == 0.99
    assert sorted(s.kv_cache_usage_per_engine().values()) == [0.20, 0.99]
    # one server exporting both names (0.9.2 - 0.11): only the current one is read
    both = Snapshot.from_samples([("vllm:gpu_cache_usage_perc", t("10.0.0.1:8000"), 0.5),
                                  ("vllm:kv_cache_usage_perc", t("10.0.0.1:8000"), 0.5)], 0.0)
    assert both.kv_cache_usage() == 0.5 and both.aliased == {}


def test_a_routers_page_adds_running_and_waiting_over_its_backends() -> None:
    # vLLM production-stack's router re-exports the gauges one series per backend
    # (label server=...): 48 + 50 + 47 running, 12 + 9 + 15 waiting, not the largest
    from pytest_k3accept.observe.metrics.gauges import scan_gauges

    page = "".join(
        f'vllm:num_requests_running{{server="http://10.0.0.1{i}:8000"}} {r}\n'
        f'vllm:num_requests_waiting{{server="http://10.0.0.1{i}:8000"}} {w}\n'
        for i, (r, w) in enumerate([(48.0, 12.0), (50.0, 9.0), (47.0, 15.0)], 1))
    page = ("# TYPE vllm:num_requests_running gauge\n# TYPE vllm:num_requests_waiting gauge\n"
            + page)
    snap = Snapshot.parse(page)
    assert snap.running() == 145.0 and snap.waiting() == 36.0
    assert scan_gauges(page) == {"running": 145.0, "waiting": 36.0}
