"""Every case of the real-log corpus (``tests/data/triage/cases.jsonl``) is a test: its
category, and its phase (stage) where the case labels one. Cases the classifier gets wrong
today are listed in :data:`KNOWN_MISSES` with the reason; they are strict xfails, so a rule
that starts getting one right must move it out of the list (and the benchmark says so)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_k3accept.observe.server.classify import CATEGORIES, classify
from pytest_k3accept.observe.server.triage.patterns import STAGES

CORPUS = Path(__file__).resolve().parents[1] / "data" / "triage" / "cases.jsonl"
SPLITS = ("tune", "tune-2", "tune-3", "tune-4", "tune-5", "tune-6", "tune-7", "tune-8",
          "tune-9", "heldout-2", "heldout-3", "heldout-4", "heldout-5",
          "heldout-9", "heldout-11", "heldout-12", "heldout-13",
          "heldout-14", "heldout-15", "heldout-16", "heldout-17",
          "heldout-18", "heldout-19", "heldout-20", "heldout-21",
          "heldout-22", "heldout-23", "heldout-24", "heldout-25")  # see the corpus README
CASES: list[dict[str, Any]] = [json.loads(line) for line in CORPUS.read_text("utf-8").splitlines()
                               if line.strip()]

#: id -> why the classifier's answer differs from the label (each an honest limit, not a bug)
KNOWN_MISSES = {
    # heldout-2 (what remains after the excerpt-only labels of round 6, corpus README)
    "h3-none-v050-404-wrong-endpoint": "category right; phase: the stats lines read as serving, "
                                       "labelled after-init (only 404s were answered)",
    # batch 3 (tune-5 and heldout-3), as round 4 first read them
    "h4-serving-kv-offloading-swap-blocks-segfault": "the fault is read (tvm_ffi's 'Segfault "
                                                     "encountered'), but only native frames "
                                                     "(swap_blocks_batch) show it was serving",
    # batch 5 (heldout-5), as round 6 first read it
    "h6-unknown-v03-capture-model-segfault": "category right; phase: faulthandler's frames "
                                             "(capture_model) are not read for the stage",
    "h6-serving-xpu-llm-scaler-worker-died-busy-loop": "category right; phase: run_busy_loop "
                                                       "reads as serving, labelled after-init "
                                                       "(only /health was answered)",
    # batch 7 (tune-7), after round 8
    "h7-cfg-v05-llamamodel-sentence-transformer-arch-jupyter": "category right; phase: Jupyter "
                                                               "quotes vLLM's source ('logger."
                                                               "info(\"Loading model weights "
                                                               "took'), read as that event",
    "h7-hostoom-v012-backport-marlin-repack-kernel-oom-kill": "category right; phase: the kill "
                                                              "follows 'Loading weights took' "
                                                              "(V1 logs it before processing "
                                                              "the weights), read as loaded",
    # batch 8 (tune-8), after round 9
    "h8-serving-triton-ray-v0-task-finished-execute-model-cut": "category right; phase: 'Task "
                                                                "finished unexpectedly' shows "
                                                                "after-init, the serving frames "
                                                                "are V0's ambiguous execute_model",
    # batch 10 (heldout-9): the phases round 10 got wrong at first contact (its five category
    # misses were read for round 11 and are right since)
    "h10-conn-v04-tritonserver-background-loop-nccl-watchdog": "category right; phase: "
                                                               "after-init, labelled serving "
                                                               "(Triton's 'Error generating "
                                                               "stream' behind its prefix)",
    "h10-serving-v064-h100-tp8-engine-process-died": "category right; phase: after-init (a 500 "
                                                     "written as a Markdown link), labelled "
                                                     "serving",
    "h10-none-tpu-jax-qwen3-init-memory-statistics": "category right; phase: no stage read "
                                                     "from the JAX memory statistics, labelled "
                                                     "kv-sizing",
    # batch 11 (heldout-11), first read by round 11, its misses read for round 12
    "h11-serving-v1-ms-swift-rollout-enginedead": "category right; phase: after-init (the "
                                                  "EngineDeadError), labelled serving",
    # the phase is reported only where a line shows it (round 13): these two excerpts' stage
    # was the scanner's default before, read by nothing in them
    "h7-conn-v1-pynccl-init-all-reduce-unhandled-cuda-collapsed": "category right; phase: "
                                                                  "not shown (a log collapsed "
                                                                  "into long lines), labelled "
                                                                  "before-loading",
    "h7-conn-v08-docker-tp-gloo-send-timeout-fatal-signal": "category right; phase: not shown "
                                                            "(gloo's send timeout in "
                                                            "is_in_the_same_node, no frame), "
                                                            "labelled before-loading",
    # batch 12 (heldout-12), first read by round 12, its misses read for round 13
    "h12b-ascend-a3-pd-dp-engines-shm-broadcast-waits": "INFO-level 'No available shared "
                                                        "memory broadcast block' waits: not "
                                                        "read as a failure (three earlier "
                                                        "cases of that shape are labelled "
                                                        "none; the label is kept as written)",
    "h12b-ascend-hccl-allreduce-socket-timeout-grpo": "category right; phase: the GRPO "
                                                      "generate frames not read, labelled "
                                                      "serving",
    # batch 14 (heldout-14), as round 14 first read it; round 15 read its misses
    "h14b-k8s-pod-prefix-v064-graceful-shutdown-after-200-restart": (
        "a graceful shutdown behind a pod-name prefix: not read as a stop"),
    "h14a-sfr-embedding-mistral-load-model-trace": (
        "category right; phase: load_model frames behind the engine's own not read as loading"),
    "h14b-llama-swap-ttl-stop-vllm-docker-graceful-shutdown": (
        "category right; phase: the 200s before the stop not read as serving"),
    # batch 15 (heldout-15), as round 15 first read it; round 16 read its misses and kept
    # these (corpus README, "Round 16 rules": why each has no rule)
    "h15b-verl-npu-tp2-workerproc-exception-hccl-cut": "first contact: serving, labelled "
                                                       "unknown",
    "h15b-ascend-dp-ray-qwen3-235b-shm-broadcast-hang": "first contact: none, labelled "
                                                        "connection",
    "h15c-openrlhf-raylet-worker-died-after-sleep-wake": (
        "first contact: category right; phase not shown, labelled after-init"),
    "h15c-k8s-cpu-image-v1-not-supported-device-cpu": (
        "first contact: config, labelled environment"),
    "h15d-mi308-deepseek-v3-v1-worker-busy-loop-after-kv-cut": (
        "first contact: serving, labelled unknown"),
    "h15d-v0-2023-offline-54k-prompts-stuck-after-gpu-blocks": (
        "first contact: category right; phase kv-sizing, labelled after-init"),
    "h15d-roll-qwenvl-ray-actor-died-sigkill-candidates": (
        "first contact: unknown, labelled killed"),
    "h15d-ascend-ms-swift-grpo-internvl3-validate-inputs-cut": (
        "first contact: category right; phase not shown, labelled serving"),
    # batch 17 (heldout-17), as round 17 first read it; round 18 read its misses and kept
    # these (corpus README, "Round 18 rules": why each has no rule)
    "h17c-unknown-mineru-enginecore-died-unexpectedly": (
        "first contact: serving, labelled unknown"),
    "h17c-connection-msswift-vllm-batch-nccl-heartbeat": (
        "first contact: category right; phase not shown, labelled serving"),
    # round 18's rule that read torch.device's __torch_function__ frame as loading was dropped
    # in round 19: another collector read that frame alone as showing no phase
    # (h18b-unknown-rocm-strix-halo-...), and unknown is the answer that advises nothing
    "h17b-loading-ascend-omni-wan22-a14b-workerinit": (
        "round 19: unknown, labelled loading (the torch.device frame alone is not read)"),
    # batch 18 (heldout-18), as round 18 first read it; round 19 read its misses and kept
    # this one (corpus README, "Round 19 rules")
    "h18a-servingoom-8xa100-qwen25-72b-lmeval-get-logprobs": (
        "first contact: unknown, labelled serving-oom"),
    # batch 19 (heldout-19), as round 19 first read it; round 20 read its misses and kept
    # this one (corpus README, "Round 20 rules")
    "h19b-killed-rayllm-aviary-vllm-rayworker-force-killed-by-gcs": (
        "round 20: category right; phase after-init, labelled serving (no line of the excerpt "
        "shows a request: the error surfacing on one is the thread's)"),
    # batch 20 (heldout-20), as round 20 first read it; round 21 read its misses and kept
    # these two (corpus README, "Round 21 rules")
    "h20b-unknown-ascend-omni-minimax-h3-segfault-loading": (
        "round 21: category right; phase kv-sizing from 'Model loading took' (the collector "
        "labelled loading with a doubt: that line says one stage's weights were loaded ~3 min "
        "before the error)"),
    "h20d-serving-gfx906-chat-template-preprocess": (
        "round 21: none, labelled serving; 'Error in preprocessing prompt inputs' is a request "
        "the API server rejected and answered (HANDLED), labelled none in h12b and h13b; the "
        "corpus's convention is kept"),
    # batch 21 (heldout-21), as round 21 first read it; round 22 read its misses and kept
    # these two (corpus README, "Round 22 rules")
    "h21b-serving-xpu-arc-logits-gather": (
        "round 22: unknown, labelled serving; the excerpt shows V1's end-of-KV-sizing worker "
        "lines, a cut, and a traceback through logits_processor 21 minutes later: the label "
        "rests on that gap, no line shows a request"),
    "h21c-unknown-nixl-handshake-keyerror": (
        "round 22: serving, labelled unknown (no phase); a KeyError in the KV connector's "
        "block_size_ratio_from_engine_id under worker_busy_loop: a KV transfer runs for a "
        "request, so the answer places it after init"),
    # batch 22 (heldout-22), as round 22 first read it; round 23 read its misses (17: 14
    # categories, 3 phases) and kept these six (corpus README, "Round 23 rules")
    "h22a-serving-oom-lmmr1-wakeup-cumem": (
        "round 23: category right; phase after-init, labelled serving: the OOM is in sleep "
        "mode's wake_up, which an RL loop also calls before its first rollout"),
    "h22b-serving-ascend950-vector-core-timeout": (
        "round 23: category right; phase after-init, labelled serving: the only request line "
        "is a 500 answer, which round 19 reads as after-init (a dead engine answers 500 too)"),
    "h22c-none-ray-placement-wait-gpu-seen-as-tpu": (
        "round 23: connection, labelled none; Ray's placement-group wait for 150 s is the "
        "cluster short of what the engine asked for (round 16: 100 s or more)"),
    "h22d-connection-lmeval-dp8-placement-group-wait": (
        "round 23: none, labelled connection; the same wait for 30 s is a slow start by round "
        "16's bound (the '[repeated 8x across cluster]' is one wait per DP rank, not longer)"),
    "h22c-unknown-ray-compiled-dag-fatal-2node": (
        "round 23: connection (serving), labelled unknown; the traceback is in Ray compiled "
        "graph's channel code (round 13: a failure of the channel itself), its message cut"),
    "h22d-unknown-localai-vllm-import-traceback": (
        "round 23: category right; phase not shown, labelled before-loading: the frames are "
        "vllm/__init__.py's imports ('<module>'), which the frame rules do not read"),
    # batches 23 and 24 (heldout-23, heldout-24), as round 23 first met them; round 24 read
    # their misses (28: 22 categories, 6 phases) and kept these five (corpus README, "Round
    # 24 rules")
    "h23c-serving-arctic-suffix-structured-output": (
        "round 24: category right; phase serving, labelled after-init: the step that failed "
        "stepped the first request (its frames are a request's step), none had completed"),
    "h23c-serving-gptoss-mxfp4-a6000-first-request": (
        "round 24: category right; phase serving, labelled after-init: the same first "
        "request's step"),
    "h24c-unknown-openrlhf-llmengine-no-model-executor": (
        "round 24: category right; phase before-loading, labelled after-init: OpenRLHF's "
        "actor names its weight-sync group's set-up init_process_group, torch's name for the "
        "process groups made before the weights"),
    "h24c-serving-rlfactory-workerdict-died-rollout": (
        "round 24: unknown, labelled serving: Ray's actor death names verl's rollout loop, "
        "not a vLLM line; no line of the excerpt shows the engine serving"),
    "h24c-serving-verl-qwen2-sampler-frames-long-prompt": (
        "round 24: unknown, labelled serving: a cut traceback through V0's execute_model, "
        "which also runs in the profile run (unplaced since round 14)"),
    # batch 25 (heldout-25), collected while round 24 was written and measured with it: held
    # out, never read for a rule (the reasons are the answers)
    "h25a-connection-ray-node-no-gpu-t4-pp4": (
        "first contact: environment, labelled connection"),
    "h25a-unknown-ray-dp2-too-many-pgs-npu": (
        "first contact: category right; phase not shown, labelled before-loading"),
    "h25b-connection-ascend-multinode-c10d-socket-timeout": (
        "first contact: none, labelled connection"),
    "h25b-unknown-spyre-plugin-vllm081-boot": (
        "first contact: category right; phase not shown, labelled before-loading"),
    "h25c-environment-triton-vllm-backend-stat-loggers-typeerror": (
        "first contact: unknown, labelled environment"),
    "h25c-connection-dynamo-nixl-ucx-reg-mr-bad-address": (
        "first contact: category right; phase not shown, labelled kv-sizing"),
    "h25c-connection-trl-vllm-serve-pynccl-unhandled-cuda-error": (
        "first contact: category right; phase before-loading, labelled after-init"),
    "h25c-unknown-llmd-pd-decode-pod-vllm-shutdown": (
        "first contact: none, labelled unknown"),
    "h25c-serving-skyrl-wake-up-after-checkpoint": (
        "first contact: unknown, labelled serving"),
    "h25c-serving-nemorl-vllm-wake-up-unhandled-error": (
        "first contact: unknown, labelled serving"),
    "h25c-connection-verl-rollout-tp16-nccl-watchdog-timeout": (
        "first contact: none, labelled connection"),
    "h25c-environment-openrlhf-llmrayactor-device-lt-num-gpus": (
        "first contact: unknown, labelled environment"),
    "h25c-killed-dynamo-prefill-worker-terminated-after-hang": (
        "first contact: unknown, labelled killed"),
    "h25d-unknown-qwen3-32b-v1-l20-after-kv-size": (
        "first contact: serving, labelled unknown"),
    "h25d-serving-qwen3-32b-100k-illegal-access": (
        "first contact: unknown, labelled serving"),
    "h25d-kv-capacity-at-init-dsv3-4090-sampler-sort": (
        "first contact: unknown, labelled kv-capacity-at-init"),
    "h25d-environment-kimi-k27-sm120-triton-smem": (
        "first contact: unknown, labelled environment"),
}


def _param(case: dict[str, Any]) -> Any:
    marks = [pytest.mark.xfail(reason=KNOWN_MISSES[case["id"]], strict=True)] \
        if case["id"] in KNOWN_MISSES else []
    return pytest.param(case, id=case["id"], marks=marks)


def test_corpus_is_well_formed() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)) and len(CASES) >= 90
    for c in CASES:
        assert c["expected"] in CATEGORIES and c["split"] in SPLITS
        assert c["thread_cause"] in CATEGORIES  # what the thread concluded (corpus README)
        assert c["source"].startswith("https://") and c["why"] and c["log"].strip()
        assert c["phase"] is None or c["phase"] in STAGES
    assert set(KNOWN_MISSES) <= set(ids)
    assert {c["expected"] for c in CASES} == set(CATEGORIES), "every category has a real case"


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_case(case: dict[str, Any]) -> None:
    cls = classify(case["log"], exit_code=case["exit_code"], ended=True)
    assert cls.category == case["expected"], (cls.summary(), case["why"])
    if case["phase"]:
        assert cls.stage == case["phase"], cls.phase
    if cls.failed:
        assert cls.evidence, "a failure quotes its evidence"


def test_the_message_is_quoted_rather_than_the_frame_that_raised_it() -> None:
    # found by tests/live/test_lifecycle.py on vLLM 0.32: the traceback's
    # "_check_enough_kv_cache_memory(" line came first and was quoted instead of the ValueError
    for case in CASES:
        if "_check_enough_kv_cache_memory" in case["log"] and "max seq len" in case["log"]:
            cls = classify(case["log"], exit_code=case["exit_code"], ended=True)
            assert "max seq len" in cls.evidence[0].text, case["id"]


def test_quiet_evidence_is_an_abi_mismatch_not_a_missing_module() -> None:
    # round 5: vllm._C built for another torch is evidence although vLLM logs it at WARNING
    # (h4-env-v05-import-c-undefined-symbol); a build without the module (TPU, some ROCm images)
    # logs the same warning with ModuleNotFoundError and runs: no failure
    warn = "WARNING 06-13 11:42:20 _custom_ops.py:11] Failed to import from vllm._C with "
    abi = warn + "ImportError('/x/vllm/_C.abi3.so: undefined symbol: _ZN5torch7Library')"
    missing = warn + "ModuleNotFoundError(\"No module named 'vllm._C'\")"
    assert classify(abi, ended=True).category == "environment"
    assert classify(missing, ended=True).category == "none"


AGREEMENT = CORPUS.parent / "agreement.jsonl"


def _bench_triage() -> Any:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "triage.py"
    spec = importlib.util.spec_from_file_location("k3_bench_triage", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_agreement_study_relabels_corpus_cases_with_known_labels() -> None:
    # corpus README, "How far two readers agree": two blind readers' labels of 160 cases
    rows = [json.loads(x) for x in AGREEMENT.read_text("utf-8").splitlines() if x.strip()]
    ids = {c["id"]: c for c in CASES}
    assert len(rows) == 160 and len({r["id"] for r in rows}) == 160
    for r in rows:
        assert r["id"] in ids and ids[r["id"]]["split"].startswith("heldout-")
        for who in ("a", "b"):
            assert r[f"reader_{who}"] in CATEGORIES and r[f"why_{who}"]
            assert r[f"phase_{who}"] is None or r[f"phase_{who}"] in STAGES


def test_agreement_counts_each_pair_and_the_majority(tmp_path: Path) -> None:
    bench = _bench_triage()
    loud = "ERROR torch.OutOfMemoryError: CUDA out of memory.\n"
    cases = [{"id": f"c{i}", "split": "heldout-30", "expected": exp, "exit_code": None,
              "log": loud if exp == "serving-oom" else "INFO ok\n"}
             for i, exp in enumerate(["none", "none", "config", "serving-oom"])]
    study = [("none", "none"), ("none", "config"), ("environment", "environment"),
             ("serving-oom", "loading")]
    corpus, agree = tmp_path / "cases.jsonl", tmp_path / "agreement.jsonl"
    corpus.write_text("".join(json.dumps(c) + "\n" for c in cases))
    agree.write_text("".join(json.dumps({"id": f"c{i}", "reader_a": a, "reader_b": b})
                             + "\n" for i, (a, b) in enumerate(study)))
    out = "\n".join(bench.agreement(corpus, agree))
    assert "reader A      vs reader B  2/4 (50 %)" in out
    assert "reader A      vs collector 3/4 (75 %)" in out
    assert "reader B      vs collector 1/4 (25 %)" in out
    # a majority in every case (none, none, environment, serving-oom); the collector's in 3
    assert "a majority of the three labels: 4/4 cases; agreeing with it: collector 3/4" in out
    assert "all three labels the same: 1/4 cases" in out
    # reader B's "loading" for the collector's "serving-oom": the split the verdict rests on
    assert "labels are confused between loading, kv-capacity-at-init, serving-oom: 1" in out
    assert bench._kappa([("x", "x"), ("y", "y")]) == 1.0
    assert bench._kappa([("x", "y"), ("y", "x")]) < 0


def test_the_readme_quotes_the_agreement_the_study_gives() -> None:
    bench = _bench_triage()
    out = "\n".join(bench.agreement(CORPUS))
    readme = (CORPUS.parents[3] / "README.md").read_text("utf-8")
    for who in ("reader A      vs collector", "reader B      vs collector",
                "reader A      vs reader B "):
        line = next(x for x in out.splitlines() if who in x)
        assert re.search(r"\d+/\d+ \(\d+ %\)", line)[0] in readme, line  # "146/160 (91 %)"
