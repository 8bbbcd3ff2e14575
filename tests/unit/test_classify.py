"""Failure classification: real vLLM 0.32 failures, documented strings of other releases and
phases, HTTP/exit-code inference, and invariance under noise (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vllm_logs
from pytest_k3accept.observe.server.classify import ADVICE, CATEGORIES, HttpObservations, classify
from pytest_k3accept.observe.server.triage.patterns import may_match, unwrap

E = "(EngineCore pid=7) ERROR 11-29 23:51:37 [core.py:1510] "
W = "(Worker pid=8) ERROR 11-29 23:51:37 [multiproc_executor.py:953] "
START = ("(APIServer pid=1) INFO 11-29 23:51:14 [api_utils.py:286] non-default args: {}\n"
         "(Worker pid=8) INFO 11-29 23:51:37 [cpu_model_runner.py:68] Starting to load model m...\n")
LOADED = "(Worker pid=8) INFO 11-29 23:51:38 [default_loader.py:501] Loading weights took 3.00 seconds\n"
INIT = ("(EngineCore pid=7) INFO 11-29 23:51:40 [core.py:402] init engine (profile, create kv "
        "cache, warmup model) took 2.20 s\n"
        "(APIServer pid=1) INFO 11-29 23:51:41 [entry.py:140] Starting vLLM server on http://h:1\n")


@pytest.mark.parametrize("log, category, quoted", [
    (vllm_logs.KV_TOO_SMALL_FOR_MAX_LEN, "kv-capacity-at-init",
     "ValueError: To serve at least one request with the model's max seq len (4096)"),
    (vllm_logs.KV_NO_BLOCKS, "kv-capacity-at-init",
     "ValueError: No available memory for the cache blocks."),
    (vllm_logs.WEIGHTS_DO_NOT_FIT, "loading",
     "DefaultCPUAllocator: can't allocate memory: you tried to allocate 32768000000 bytes"),
    (vllm_logs.HEAD16_DIES_AT_FIRST_REQUEST, "serving", "EngineCore encountered a fatal error."),
], ids=["kv-max-len", "kv-no-blocks", "huge-weights", "head16"])
def test_real_failures(log: str, category: str, quoted: str) -> None:
    cls = classify(log, exit_code=1)
    assert cls.category == category and cls.confidence == "matched"
    assert quoted in cls.evidence[0].text
    assert cls.evidence[0].lineno is not None and cls.evidence[0].at is not None
    assert not cls.evidence[0].text.startswith("("), "the vLLM prefix is not quoted"
    assert cls.advice == ADVICE[category]
    assert quoted in cls.summary()


def test_head16_quotes_the_root_cause_and_knows_init_completed() -> None:
    cls = classify(vllm_logs.HEAD16_DIES_AT_FIRST_REQUEST, exit_code=0)
    assert cls.phase == "after init, before any successful response"
    assert cls.root_cause is not None
    assert cls.root_cause.text == ("RuntimeError: Unsupported CPU attention configuration: "
                                   "head_dim=16 isa=2 kv_cache_idx=0")
    assert "root cause" in cls.summary()


def test_loading_advice_says_concurrency_will_not_help_and_is_not_capacity_evidence() -> None:
    advice = classify(vllm_logs.WEIGHTS_DO_NOT_FIT).advice
    assert "Lowering concurrency" in advice and "not capacity evidence" in advice
    assert "--max-model-len" in ADVICE["kv-capacity-at-init"]
    assert set(ADVICE) == set(CATEGORIES)


def test_healthy_server_is_none_and_warnings_are_never_evidence() -> None:
    cls = classify(vllm_logs.HEALTHY, exit_code=None)
    assert cls.category == "none" and not cls.failed and cls.evidence == ()
    # the ulimit WARNING mentions "error" and "OSError: ... Too many open files"
    assert "Too many open files" in vllm_logs.HEALTHY


def test_a_start_without_failure_or_progress_shows_before_loading() -> None:
    # only the lines a starting server prints: how far it got is shown, before loading
    for first in ("INFO 05-30 14:36:50 [__init__.py:230] Platform plugin ascend is activated",
                  "INFO 12-01 10:00:00 [__init__.py:239] Automatically detected platform cuda."):
        cls = classify(first + "\nWARNING 05-30 14:36:52 [x.py:21] something harmless\n",
                       exit_code=None)
        assert (cls.category, cls.stage) == ("none", "before-loading"), first
    # lines that are not a start's show nothing
    cls = classify("WARNING 05-30 14:36:52 [x.py:21] something harmless\n", exit_code=None)
    assert (cls.category, cls.stage, cls.phase) == ("none", "", "no startup observed")


@pytest.mark.parametrize("line, category", [
    ("RuntimeError: CUDA driver version is insufficient for CUDA runtime version", "environment"),
    ("torch.AcceleratorError: CUDA error: no kernel image is available for execution on the "
     "device", "environment"),
    ("RuntimeError: Found no NVIDIA driver on your system.", "environment"),
    ("ModuleNotFoundError: No module named 'vllm._C'", "environment"),
    ("api_server.py: error: unrecognized arguments: --bogus", "config"),
    ("vllm serve: error: argument --max-model-len: invalid int value: 'x'", "config"),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig", "config"),
    ("OSError: [Errno 98] Address already in use", "config"),
    ("ValueError: No supported config format found in org/model", "config"),
    ("No module named 'vllm'", "environment"),
    ("Failed to import torch_npu.", "environment"),
    ("nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND", "connection"),
    ("TimeoutError('No heartbeat received from MQLLMEngine')", "connection"),
    ("TypeError: AsyncEngineArgs.__init__() got an unexpected keyword argument 'x'", "config"),
    ("NotImplementedError: Pipeline parallelism is not supported yet with multiprocessing.",
     "config"),
    ("RuntimeError: Worker failed with error 'LoRA rank 32 is greater than max_lora_rank 16.', "
     "please check the stack trace above for the root cause", "config"),
    ("ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes "
     "are ('fp8e4b15', 'fp8e5')\")", "environment"),
    ("RuntimeError: oneCCL: ze_fd_manager.cpp:214 fill_device_fds: EXCEPTION: open failed: "
     "fd: -1, errno: No such file or directory", "environment"),
    ("(raylet) The node with node id: 0f2 and address: 10.0.0.51 and node name: 10.0.0.51 has "
     "been marked dead because the detector has missed too many heartbeats from it.",
     "connection"),
    ("bash: vlm: command not found", "config"),
    ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
     "that can be stored in KV cache (20000).", "kv-capacity-at-init"),
    (E + "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization",
     "loading"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
     "unhandled system error", "connection"),
    ("[rank3]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
     "connection"),
    ("RuntimeError: DeepEP all-to-all dispatch failed: timeout", "connection"),
])
def test_documented_strings_of_each_category(line: str, category: str) -> None:
    cls = classify(START + LOADED + line + "\n", exit_code=1)
    assert cls.category == category, cls
    assert cls.evidence[0].text == line.removeprefix(E)


@pytest.mark.parametrize("where, category, phase", [
    # an OOM with no line before it at all is an excerpt cut at the error: was "loading";
    # four real serving OOMs posted that way (tests/data/triage, ho-servingoom-*) made it
    # the costly wrong answer
    ("", "unknown", "not shown (no startup or serving line before it)"),
    ("args", "loading", "before weight loading"),
    ("start", "loading", "while loading weights"),
    ("loaded", "kv-capacity-at-init", "KV-cache sizing / profiling (weights loaded, init not done)"),
    ("init", "serving-oom", "after init, before any successful response"),
])
def test_the_same_oom_is_classified_by_the_phase_it_happened_in(where: str, category: str,
                                                                phase: str) -> None:
    prefix = {"": "", "args": START.splitlines(keepends=True)[0], "start": START,
              "loaded": START + LOADED, "init": START + LOADED + INIT}
    oom = W + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    cls = classify(prefix[where] + oom, exit_code=1)
    assert (cls.category, cls.phase) == (category, phase)


def test_generic_fatal_line_before_init_is_unknown_not_a_guess() -> None:
    # was "loading": a generic "see root cause above" line says nothing about memory (issue 13,
    # and real logs where the cause above is a bug, a config error or a device fault)
    cls = classify(START + E + "RuntimeError: Engine core initialization failed. See root "
                   "cause above.\n", exit_code=1)
    assert cls.category == "unknown" and cls.confidence == "inferred"
    assert "not one of the known patterns" in cls.advice


def test_decisive_line_beats_earlier_generic_one_and_earliest_decisive_wins() -> None:
    log = (START + LOADED + INIT + E + "EngineCore encountered a fatal error.\n"
           + W + "RuntimeError: NCCL error: unhandled cuda error\n"
           + W + "torch.OutOfMemoryError: CUDA out of memory.\n")
    assert classify(log).category == "serving-oom"


def test_without_log_evidence_http_and_exit_code_decide() -> None:
    after_init = START + LOADED + INIT
    http = HttpObservations(ready=True, server_errors=("500 from POST /v1/completions: x",),
                            health_status=503)
    cls = classify(after_init, http=http)
    assert cls.category == "serving" and cls.confidence == "inferred"
    assert [q.text for q in cls.evidence] == ["HTTP 500 from POST /v1/completions: x",
                                              "GET /health -> 503"]
    hostile = HttpObservations(server_errors=("500: \x1b[2J<b>\x00 Bearer abc.def",),
                               health_status=503)
    assert classify(after_init, http=hostile).evidence[0].text == \
        "HTTP 500: <b>\ufffd Bearer ***"
    # SIGKILL without out-of-memory evidence is "killed" (was "connection" after init and
    # "loading" before: neither the network nor the weights are evidenced by a kill)
    killed = classify(after_init, exit_code=-9)
    assert killed.category == "killed" and "OOM killer" in killed.evidence[-1].text
    assert classify(START, exit_code=-9).category == "killed"
    assert classify("bash: line 1: nothing\n", exit_code=127).category == "config"
    refused = classify(after_init, http=HttpObservations(connection_errors=("refused",)))
    assert refused.category == "connection"
    assert classify(after_init, exit_code=0).category == "none"


def test_only_the_latest_start_is_classified() -> None:
    log = vllm_logs.WEIGHTS_DO_NOT_FIT + vllm_logs.HEALTHY
    cls = classify(log)
    assert cls.category == "none" and "1 earlier start" in cls.notes[0]


def test_as_dict_is_plain_data() -> None:
    import json

    data = classify(vllm_logs.KV_NO_BLOCKS, exit_code=1).as_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["category"] == "kv-capacity-at-init" and data["evidence_lines"][0].startswith(
        "ValueError: No available memory for the cache blocks")


NOISE = st.lists(st.one_of(
    # random text that names no failure (Hypothesis also draws the rules' own words, e.g.
    # 'HFVALIDATIONERROR', which are evidence, not noise)
    st.text(alphabet=st.characters(codec="utf-8"), max_size=120).filter(lambda t: not may_match(t)),
    st.sampled_from([
        "(APIServer pid=1) INFO 11-29 23:49:56 [launcher.py:195] Route: /health, Methods: GET",
        "(APIServer pid=1) WARNING 11-29 23:49:29 [system_utils.py:255] failed with error "
        "`OSError: [Errno 24] Too many open files`. CUDA out of memory NCCL error",
        'INFO:     127.0.0.1:45908 - "GET /v1/models HTTP/1.1" 200 OK',
        "Loading safetensors checkpoint shards: 100% Completed | 1/1",
        "\x1b[33mWARNING\x1b[0m something odd but harmless"])), max_size=6)


@settings(max_examples=120, deadline=None)
@given(case=st.sampled_from(["KV_TOO_SMALL_FOR_MAX_LEN", "KV_NO_BLOCKS", "WEIGHTS_DO_NOT_FIT",
                             "HEAD16_DIES_AT_FIRST_REQUEST", "HEALTHY"]),
       before=NOISE, after=NOISE, seed=st.randoms(use_true_random=False))
def test_same_evidence_same_verdict_with_noise_around_it(case: str, before: list[str],
                                                         after: list[str], seed: object) -> None:
    log: str = getattr(vllm_logs, case)
    clean = classify(log, exit_code=1)
    lines = log.splitlines()
    # noise before the log, after it, and interleaved between its lines
    mixed: list[str] = list(before)
    for line in lines:
        mixed.append(line)
        if seed.random() < 0.2 and after:  # type: ignore[attr-defined]
            mixed.append(seed.choice(after))  # type: ignore[attr-defined]
    mixed += after
    noisy = classify("\n".join(mixed), exit_code=1)
    assert (noisy.category, noisy.rule) == (clean.category, clean.rule)
    assert [q.text for q in noisy.evidence[:1]] == [q.text for q in clean.evidence[:1]]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=2000), exit_code=st.one_of(st.none(), st.integers(-15, 255)))
def test_classify_never_crashes_on_arbitrary_bytes(data: bytes, exit_code: int | None) -> None:
    cls = classify(data, exit_code=exit_code)
    assert cls.category in CATEGORIES and cls.advice


def test_a_traceback_cut_before_its_message_is_serving_only_after_init() -> None:
    # round 6 (tune-4 h3-serving-xinference-v0-start-background-loop, tune-6
    # h6-serving-v091-docker-workerproc-exception-stats): the engine raised while serving, the
    # message is below the excerpt; before init the same frames say nothing about the cause
    tb = (E + "Traceback (most recent call last):\n"
          + E + '  File "/v/vllm/v1/engine/core.py", line 1, in step\n')
    served = START + LOADED + INIT + "(APIServer pid=1) INFO:     1.2.3.4:5 - \"POST /v1/chat/" \
        "completions HTTP/1.1\" 200 OK\n" + tb
    after = classify(served, ended=True)
    assert (after.category, after.rule, after.stage) == ("serving", "traceback-after-init",
                                                          "serving")
    before = classify(START + LOADED + tb, ended=True)
    assert (before.category, before.rule) == ("unknown", "log-ends-in-error")


def test_rank_prefixed_and_faulthandler_frames_are_part_of_the_failure() -> None:
    # torch's "[rank0]:" prefix (tune-6 h6-unknown-v05-bench-profile-run-frames) and CPython's
    # faulthandler stack ("line 99 in __init__", tune-6 h6-unknown-v1-ray-faulthandler-pynccl-init)
    ranked = ('[rank0]:   File "/v/vllm/worker/worker.py", line 179, in '
              'determine_num_available_blocks\n[rank0]:     self.model_runner.profile_run()\n')
    cls = classify(ranked, ended=True)
    assert (cls.category, cls.stage) == ("unknown", "kv-sizing")
    fault = ('(RayWorkerWrapper pid=3, ip=10.0.0.2)   File "/v/vllm/distributed/device_'
             'communicators/pynccl.py", line 99 in __init__\n')
    assert classify(fault, ended=True).category == "unknown"
    assert classify("  File \"x.py\", line 3, in f\n", ended=False).category == "none"


def test_hccl_is_an_interconnect_and_a_dead_ray_actor_is_no_cause() -> None:
    # tune-6 h6-conn-ascend-qwen3vl-two-node-hccl-worker-failed (vllm-ascend#3367); a dead Ray
    # actor says only that its process is gone (tune-6 h6-unknown-verl-actor-died-connection-eof)
    hccl = (E + "RuntimeError: Worker failed with error 'create_config:build/CMakeFiles/torch_npu"
            ".dir/compiler_depend.ts:148 HCCL function error: hcclCommInitRootInfoConfig(numRanks,"
            " &rootInfo, rank, config, &(comm->hcclComm_)), error code is 1\n")
    assert classify(hccl, ended=True).category == "connection"
    actor = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    died = classify(actor, ended=True)
    assert (died.category, died.rule) == ("unknown", "engine-dead")


def test_round_7_wrappers_localised_journald_and_lemonade() -> None:
    # journald prints the month with strftime's %b in the reader's locale (heldout-2
    # h3-serving-v043-journald-zh-chatglm showed "6月"); lemonade prefixes every line of the
    # servers it launches with "<date time> [Level] (Tag) " (lemonade-sdk/vllm-rocm#5)
    frame = '  File "/v/vllm/worker/worker.py", line 1, in determine_num_available_blocks'
    for prefix in ("6月 10 16:45:05 host bash[107468]: ", "Dez 01 11:12:12 gpu-node vllm[42]: ",
                   "déc. 01 11:12:12 gpu-node vllm[42]: ",
                   "2026-05-08 11:47:02.256 [Error] (Process) (EngineCore pid=2651) "):
        cls = classify(prefix + frame + "\n", ended=True)
        assert cls.stage == "kv-sizing", prefix
    # vLLM's own lines are not taken for a journald prefix
    assert unwrap("ERROR 06-12 08:59:48 async_llm_engine.py:45] x") == \
        "ERROR 06-12 08:59:48 async_llm_engine.py:45] x"


def test_tvm_ffi_segfault_banner_is_a_device_fault() -> None:
    # tvm_ffi (flashinfer's FFI) prints it from its SIGSEGV handler (backtrace.cc)
    log = START + LOADED + INIT + "!!!!!!! Segfault encountered !!!!!!!\n" \
        '  File "<unknown>", line 0, in cuMemcpyBatchAsync\n'
    cls = classify(log, ended=True)
    assert (cls.category, cls.rule) == ("serving", "device-fault")
    assert "Segfault encountered" in cls.evidence[0].text


def test_worker_busy_loop_takes_the_stage_of_the_rpc_it_runs() -> None:
    # V1's WorkerProc.worker_busy_loop runs the executor's init RPCs as well as execute_model:
    # the frame inside it decides (heldout-5 h6-unknown-v08-a10-workerproc-profile-run-frames)
    head = (W + "Traceback (most recent call last):\n"
            + W + '  File "/v/vllm/v1/executor/multiproc_executor.py", line 375, in '
            'worker_busy_loop\n' + W + "    output = func(*args, **kwargs)\n")
    profiling = head + W + '  File "/v/vllm/v1/worker/gpu_worker.py", line 157, in ' \
        'determine_available_memory\n'
    cls = classify(START + LOADED + profiling, ended=True)
    assert (cls.category, cls.stage) == ("unknown", "kv-sizing")
    # nothing recognised inside it: the loop's own stage, at the message or at the log's end
    alone = head + W + '  File "/v/vllm/v1/worker/x.py", line 9, in other\n'
    assert classify(START + LOADED + INIT + alone + W + "RuntimeError: boom\n",
                    ended=True).stage == "serving"
    assert classify(START + LOADED + INIT + alone, ended=True).stage == "serving"


def test_v0_async_engine_errors_come_from_its_background_loop() -> None:
    # V0's AsyncLLMEngine logs at ERROR only from the loop that steps requests (heldout-3
    # h4-serving-v043-async-random-sample-illegal)
    e = "ERROR 06-12 08:59:48 async_llm_engine.py:45] "
    log = (e + '  File "/v/vllm/model_executor/layers/sampler.py", line 324, in _random_sample\n'
           + e + "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    cls = classify(log, ended=True)
    assert (cls.category, cls.stage) == ("serving", "serving")


def test_init_device_is_before_loading() -> None:
    # init_device (device, memory check, distributed setup) runs before load_model
    line = "(RayWorkerWrapper pid=9) ERROR 07-01 10:00:00 worker_base.py:1] Error executing " \
        "method init_device. This might cause deadlock in distributed execution.\n"
    assert classify(line, ended=True).stage in ("before-loading", "")


def test_round_8_model_construction_frames_are_loading() -> None:
    # tune-7 h7-load-v012-llama2-70b-column-parallel-torch-empty (vLLM 0.1.2: no loader frame)
    tb = ("Traceback (most recent call last):\n"
          '  File "/v/vllm/model_executor/models/llama.py", line 201, in <listcomp>\n'
          "    LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)\n"
          '  File "/v/vllm/model_executor/parallel_utils/tensor_parallel/layers.py", line 272, '
          "in __init__\n    self.weight = Parameter(torch.empty(\n"
          "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 160.00 MiB\n")
    cls = classify(tb, ended=True)
    assert (cls.category, cls.stage) == ("loading", "loading")
    # a forward() frame of the same file is no construction
    fwd = tb.replace("in <listcomp>", "in forward").replace("in __init__", "in forward")
    assert classify(fwd, ended=True).category == "unknown"


def test_round_8_negative_kv_memory_ray_oom_tail_and_acl() -> None:
    # tune-7: vllm-omni#469, lmm-r1#71, vllm-ascend#2244
    neg = (E.replace("ERROR", "INFO") + "Available KV cache memory: -2.77 GiB\n"
           + E + "EngineCore failed to start.\n")
    assert classify(neg, ended=True).category == "kv-capacity-at-init"
    assert classify(neg.replace("-2.77", "2.77"), ended=True).category != "kv-capacity-at-init"
    ray = ("Refer to the documentation on how to address the out of memory issue: https://docs."
           "ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Set max_restarts and "
           "max_task_retries to enable retry when the task crashes due to OOM.\n")
    assert classify(ray, ended=True).category == "host-oom"
    acl = ("RuntimeError: SetPrecisionMode:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:156 "
           "NPU function error: at_npu::native::AclSetCompileopt(aclCompileOpt::ACL_PRECISION_"
           "MODE, precision_mode), error code is 500001\n"
           "[Error]: The internal ACL of the system is incorrect.\n")
    assert classify(acl, ended=True).category == "environment"


def test_round_8_gloo_timeout_old_async_callback_and_rpc_step() -> None:
    gloo = (W + "Error ignored in is_in_the_same_node: [/pytorch/third_party/gloo/gloo/transport/"
            "tcp/unbound_buffer.cc:133] Timed out waiting 1800000ms for send operation to "
            "complete\n")
    assert classify(gloo, ended=True).category == "connection"
    stats = ("INFO 09-28 06:39:29 llm_engine.py:613] Avg prompt throughput: 0.0 tokens/s, Avg "
             "generation throughput: 29.2 tokens/s, Running: 1 reqs, Swapped: 0 reqs\n")
    cb = stats + ("Exception in callback _raise_exception_on_finish(request_tracker=<vllm.engine."
                  "...x7f71353d42b0>)\n")
    cls = classify(cb, ended=True)
    assert (cls.category, cls.stage) == ("serving", "serving")
    rpc = E + "TimeoutError: RPC call to execute_model timed out.\n"
    cls = classify(rpc, ended=True)
    assert (cls.category, cls.stage) == ("connection", "serving")


def test_round_8_the_executors_own_sigkill_is_no_outside_kill() -> None:
    # tune-7 h7-unknown-v08-arctic-worker-traceback-then-self-killed: V1's executor logs this,
    # then kill_process_tree(os.getpid()); the shell prints "Killed"
    log = (START + LOADED + "CRITICAL 05-07 19:18:17 [core_client.py:359] Got fatal signal from "
           "worker processes, shutting down. See stack trace above for root cause issue.\n"
           "(VllmWorker rank=0 pid=8) Traceback (most recent call last):\nKilled\n")
    for code in (None, 137):
        assert classify(log, exit_code=code, ended=True).category == "unknown", code
    # the same "Killed" without that line is a kill from outside
    outside = START + LOADED + "Killed\n"
    assert classify(outside, ended=True).category == "killed"


def test_round_9_collector_prefixes_are_cut_where_vllms_line_starts() -> None:
    # tune-8: GKE Cloud Logging and Docker Desktop put their own stamp before vLLM's line
    frame = '  File "/v/vllm/v1/worker/gpu_model_runner.py", line 1, in _dummy_sampler_run'
    for prefix in ("INFO 2025-11-19T20:16:36.096501749Z [resource.labels.containerName: vllm] "
                   "(EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842] ",
                   "2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py:586] "):
        assert classify(prefix + frame + "\n", ended=True).stage == "kv-sizing", prefix
    # vLLM's own line is never cut, whatever it quotes
    line = "ERROR 07-09 17:59:40 [core.py:586] worker (EngineCore pid=1) said x"
    assert unwrap(line) == line


def test_round_9_wordings() -> None:
    v0 = ("INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; the rest of the "
          "memory reserved for KV Cache is -1.05GiB.\n"
          "INFO 02-26 09:54:05 executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681\n")
    assert classify(v0, ended=True).category == "kv-capacity-at-init"
    driver = E + "RuntimeError: CUDA driver error: out of memory\n"
    assert classify(START + driver, ended=True).category == "loading"
    cann = ("(RayWorkerWrapper pid=1954) [ASSERT] [CANN_VERSION : 8.1.RC1][TimeStamp : 0] "
            "gather_v3_base.h:137: Assertion `(0 <= val)' Index 4096 out of range[0 4096)!\n")
    served = START + LOADED + INIT + "INFO 06-11 13:31:07 [async_llm_engine.py:211] Added " \
        "request chatcmpl-1.\n"
    assert classify(served + cann, ended=True).category == "serving"
    hccl = ("EI0002: [PID: 13075] 2025-06-25-10:45:23.586.187 The wait execution of the Notify "
            "register times out. Reason: no Notify record from remote rank\n")
    assert classify(hccl, ended=True).category == "connection"
    inspect = ("ERROR 10-23 23:20:26 registry.py:272] Error in inspecting model architecture "
               "'LlamaForCausalLM'\nValueError: Model architectures ['LlamaForCausalLM'] are not "
               "supported for now.\n")
    assert classify(inspect, ended=True).category == "environment"


def test_round_9_stops_from_outside_are_killed() -> None:
    term = (START + LOADED + INIT + "(EngineCore pid=7) INFO 11-29 23:52:00 [core.py:1455] "
            "[shutdown] EngineCore: trigger received signal=SIGTERM\n"
            + E + "EngineDeadError: EngineCore encountered an issue.\n")
    assert classify(term, ended=True).category == "killed"
    worker = ("(Worker_DP0_TP0 pid=1387) WARNING 04-03 16:05:24 [multiproc_executor.py:866] "
              "WorkerProc was terminated\n")
    assert classify(START + worker, ended=True).category == "killed"
    ctrl_c = ("[rank0]: KeyboardInterrupt\nERROR 08-17 23:28:45 multiproc_worker_utils.py:120] "
              "Worker VllmWorkerProcess pid 1221546 died, exit code: -15\n")
    assert classify(ctrl_c, ended=True).category == "killed"


def test_round_9_the_sigterms_after_an_engines_death_are_consequences() -> None:
    # vLLM stops its other engine cores with SIGTERM once one died: the death stays the cause
    log = (START + LOADED + INIT + "(APIServer pid=1) INFO:     1.2.3.4:5 - \"POST /v1/chat/"
           "completions HTTP/1.1\" 200 OK\n"
           "(EngineCore_DP0 pid=7) ERROR 11-29 23:52:00 [core.py:1] EngineCore encountered a "
           "fatal error.\n"
           "(EngineCore_DP1 pid=9) INFO 11-29 23:52:00 [core.py:1455] [shutdown] EngineCore: "
           "trigger received signal=SIGTERM\n")
    cls = classify(log, ended=True)
    assert (cls.category, cls.rule) == ("serving", "engine-dead")


def test_round_10_wordings_and_frames() -> None:
    # tune-9: vllm#13091, vllm#25837, wtdcode/vllm-backport#94, vllm-ascend#10861, vllm-omni#3683
    ld = "/usr/bin/ld: cannot find -lcuda: No such file or directory\n"
    assert classify(START + ld, ended=True).category == "environment"
    util = ("ValueError: Free memory on device (3.22/4.0 GiB) on startup is less than desired "
            "GPU memory utilization (0.9, 3.6 GiB).\n")
    assert classify(util, ended=True).category == "config"
    step = (W + "Traceback (most recent call last):\n"
            + W + '  File "/v/vllm/v1/worker/gpu_worker.py", line 9, in execute_model\n'
            + "[rank5]:[W1 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on "
            "device 5 while trying to allocate 671088640 bytes\n")
    cls = classify(step, ended=True)
    assert (cls.category, cls.stage) == ("serving-oom", "serving")
    # V0's execute_model also runs in the profile run: it places nothing
    v0 = step.replace("/v1/worker/", "/worker/")
    assert classify(v0, ended=True).category == "unknown"
    shm = (E + '  File "/v/vllm/distributed/device_communicators/shm_broadcast.py", line 631, '
           "in timeout_ms\n" + E + "    raise TimeoutError\n")
    assert classify(START + LOADED + INIT + shm, ended=True).category == "connection"
    kill = ("[reliability][process-kill] tree-kill pid=354475 name=VLLM::EngineCore "
            "signal=SIGTERM\n")
    assert classify(START + LOADED + INIT + kill, ended=True).category == "killed"


HANDLED_BLOCK = (
    "INFO 07-03 03:19:10 [loggers.py:80] Avg prompt throughput: 9.0 tokens/s, Running: 1 reqs\n"
    "ERROR 07-03 03:19:15 [serving_chat.py:200] Error in preprocessing prompt inputs\n"
    "ERROR 07-03 03:19:15 [serving_chat.py:200] Traceback (most recent call last):\n"
    'ERROR 07-03 03:19:15 [serving_chat.py:200]   File "/v/serving_chat.py", line 183, in '
    "create_chat_completion\n"
    "ERROR 07-03 03:19:15 [serving_chat.py:200] ValueError: This model's maximum context length "
    "is 16384 tokens. However, you requested 122946 tokens.\n"
    'INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n')


def test_a_requests_handled_exception_is_no_failure_of_the_server() -> None:
    # vLLM's serving_chat catches a request's preprocessing error and answers it with a 400
    cls = classify(HANDLED_BLOCK, exit_code=None, ended=True)
    assert (cls.category, cls.stage) == ("none", "serving"), cls.summary()
    # a failure after the handled block is still read, and quoted
    dead = ("ERROR 07-03 03:19:20 [core.py:510] EngineCore encountered a fatal error.\n"
            "ERROR 07-03 03:19:20 [core.py:510] RuntimeError: CUDA error: an illegal memory "
            "access was encountered\n")
    cls = classify(HANDLED_BLOCK + dead, exit_code=None, ended=True)
    assert cls.category == "serving" and "illegal memory access" in cls.evidence[0].text
    # a line under another logger's tag ends the handled block
    other = HANDLED_BLOCK.replace(
        "ERROR 07-03 03:19:15 [serving_chat.py:200] ValueError",
        "ERROR 07-03 03:19:15 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. ValueError")
    assert classify(other, exit_code=None, ended=True).category == "serving-oom"


def test_the_phase_is_reported_only_where_a_line_shows_it() -> None:
    line = "vllm serve: error: unrecognized arguments: --bogus\n"
    # an argument error is raised only before anything is loaded: that is shown
    assert classify(line, exit_code=2).stage == "before-loading"
    # an NCCL error alone shows no stage: "not shown", never the scanner's default
    nccl = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO)\n"
    cls = classify(nccl, exit_code=1)
    assert (cls.category, cls.stage) == ("connection", ""), cls
    assert cls.phase.startswith("not shown")
    # the same error under init_device's frame, or after a start line, is before loading
    framed = ('  File "/v/vllm/worker/worker.py", line 9, in init_device\n' + nccl)
    assert classify(framed, exit_code=1).stage == "before-loading"
    started = "INFO 12-01 10:00:00 [__init__.py:239] Automatically detected platform cuda.\n"
    assert classify(started + nccl, exit_code=1).stage == "before-loading"
    # a missing kernel image is the environment at whatever stage it is hit
    late = START + LOADED + INIT + "RuntimeError: CUDA error: no kernel image is available for " \
        "execution on the device\n"
    cls = classify(late, exit_code=1)
    assert (cls.category, cls.stage) == ("environment", "after-init"), cls


def test_an_oom_after_lines_cut_from_the_log_is_not_placed() -> None:
    # a posted excerpt: the start, then "[...]", then the OOM: loading, KV sizing or serving
    # may lie in the cut; no guess (an unplaced OOM is unknown, never loading)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n"
    cut = START + "[...]\n" + oom
    cls = classify(cut, exit_code=1)
    assert (cls.category, cls.stage) == ("unknown", "unknown"), cls
    assert "cut" in cls.phase
    # the same without the cut is placed by what the log shows
    assert classify(START + oom, exit_code=1).category == "loading"
    # a cut inside the OOM's own traceback does not hide its stage: its frames place it
    framed = (START + "Traceback (most recent call last):\n"
              '  File "/v/vllm/model_executor/model_loader/loader.py", line 9, in load_model\n'
              "    model = _initialize_model(vllm_config=vllm_config)\n[...]\n" + oom)
    assert classify(framed, exit_code=1).category == "loading"
    # a cut before a KV-sizing line, then the OOM: placed after the cut by that line
    kv = START + "[...]\n" + LOADED + oom
    assert classify(kv, exit_code=1).category == "kv-capacity-at-init"


def test_a_stop_shown_only_by_the_launchers_signal_handler_is_killed() -> None:
    log = (START + LOADED + INIT +
           'INFO:     127.0.0.1:5 - "POST /v1/audio/transcriptions HTTP/1.1" 200 OK\n'
           "(APIServer pid=1) INFO 11-29 23:52:00 [launcher.py:80] Shutting down FastAPI HTTP "
           "server.\n")
    cls = classify(log, exit_code=None, ended=True)
    assert (cls.category, cls.stage) == ("killed", "serving"), cls


def test_a_placement_group_wait_is_evidence_only_past_100_s() -> None:
    # Ray's executor logs its wait for the engine's GPUs at INFO, again and again (round 16)
    def wait(s: int) -> str:
        return ("(EngineCore_DP0 pid=89) INFO 04-20 17:26:54 [ray_utils.py:267] Waiting for "
                f"creating a placement group of specs for {s} seconds. specs=[{{'GPU': 1.0}}]\n")
    short = classify(wait(10) + wait(30), exit_code=None, ended=False)
    assert short.category == "none" and short.stage == "before-loading", short.summary()
    long = classify(wait(10) + wait(150), exit_code=1, ended=True)
    assert long.category == "connection" and "150 seconds" in long.evidence[0].text
    assert long.stage == "before-loading"


def test_a_request_over_the_context_is_config_unless_handled_or_beside_a_cause() -> None:
    refused = ("ERROR 05-08 21:27:27 [serving_chat.py:198] ValueError: This model's maximum "
               "context length is 8192 tokens. However, you requested 8203 tokens.\n")
    assert classify(refused, exit_code=None, ended=True).category == "config"
    # the same refusal inside serving_chat's handled block is one request's 400: none
    assert classify(HANDLED_BLOCK, exit_code=None, ended=True).category == "none"


# round 17 (corpus README, "Round 17 rules"): each rule on lines of the shape it was read from

def test_lines_whose_breaks_were_lost_are_split_at_the_repeated_process_tag() -> None:
    from pytest_k3accept.observe.server.logread import split_lines
    tag = "(VllmWorker rank=0 pid=234357) "
    joined = (f"{tag}x = torch.frombuffer(b)"
              f"{tag}ERROR 09-26 01:47:48 [multiproc_executor.py:546] WorkerProc hit an exception."
              f"{tag}ERROR 09-26 01:47:48 [multiproc_executor.py:546] Traceback (most recent "
              f"call last):")
    pieces = [ln.text for ln in split_lines(joined)]
    assert len(pieces) == 3 and all(p.startswith(tag) for p in pieces), pieces
    assert {ln.lineno for ln in split_lines(joined)} == {1}  # one physical line
    # nested prefixes and a tag named once are not breaks
    for text in (f"{tag}{tag}INFO 09-26 01:47:48 [core.py:1] ok", f"{tag}INFO pid=1 ok"):
        assert [ln.text for ln in split_lines(text)] == [text]


def test_a_step_traceback_pasted_without_its_line_breaks_is_serving() -> None:
    tag = "(VllmWorker rank=0 pid=234357) ERROR 09-26 01:47:48 [multiproc_executor.py:546] "
    joined = "".join(tag + part for part in (
        "WorkerProc hit an exception.", "Traceback (most recent call last):",
        '  File "/vllm-workspace/vllm/vllm/v1/executor/multiproc_executor.py", line 541, in '
        "worker_busy_loop", "    output = func(*args, **kwargs)",
        '  File "/vllm-workspace/vllm-ascend/vllm_ascend/worker/worker_v1.py", line 207, in '
        "execute_model", "    get_pp_group().send_tensor_dict(output.tensors,"))
    got = classify(joined, exit_code=None, ended=True)
    assert (got.category, got.stage) == ("serving", "serving"), got.summary()


def test_a_native_libraries_error_lines_show_a_failure() -> None:
    synapse = ("[19:08:34.164951][GC                    ][error][tid:44F8A] Failed to load tpc "
               "kernel for node: TPC634, GUID: constant_bf16. Got error: GLUE_FAILED\n"
               "[19:08:34.165033][SYN_API       ][error][tid:44F8A] synGraphCompile: "
               "SYN_API_CALL failed status: 26[synFail].\n")
    assert classify(synapse, exit_code=None, ended=True).category == "unknown"
    assert classify(synapse.replace("[error]", "[info]"), exit_code=None,
                    ended=True).category == "none"


def test_the_source_line_under_a_frame_places_a_traceback_cut_after_it() -> None:
    tag = "(Worker_TP1 pid=8317) ERROR 02-03 09:24:09 [multiproc_executor.py:743] "
    head = tag + "WorkerProc failed to start.\n" + tag + "Traceback (most recent call last):\n"
    frame = (tag + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/'
             'multiproc_executor.py", line 555, in __init__\n')
    got = classify(head + frame + tag + "    self.worker.load_model()\n[...]\n", ended=True)
    assert (got.category, got.stage) == ("unknown", "loading"), got.summary()
    # a call that is not under a frame (a source line quoted in prose) places nothing
    got = classify(head + tag + "    self.worker.load_model()\n[...]\n", ended=True)
    assert got.stage != "loading", got.summary()


SLEEP_TB = ('Traceback (most recent call last):\n'
            '  File "/usr/lib/python3.10/dist-packages/vllm/entrypoints/llm.py", line 1244, in '
            'wake_up\n    self.llm_engine.wake_up()\n'
            '  File "/usr/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", line 207,'
            ' in wake_up\n    create_and_map(handle)\n')


def test_sleep_modes_wake_up_is_after_init_and_no_requests_step() -> None:
    oom = classify(SLEEP_TB + "RuntimeError: CUDA Error: out of memory at "
                   "/workspace/csrc/cumem_allocator.cpp:62\n", ended=True)
    assert (oom.category, oom.stage) == ("serving-oom", "after-init"), oom.summary()
    cut = classify(SLEEP_TB + "[...]\n", ended=True)
    assert (cut.category, cut.stage) == ("unknown", "after-init"), cut.summary()
    # the same cut traceback through a V1 step is a failure while serving
    step = SLEEP_TB.replace("entrypoints/llm.py", "v1/worker/gpu_worker.py").replace(
        "in wake_up\n    self.llm", "in execute_model\n    self.llm", 1)
    assert classify(step + "[...]\n", ended=True).category == "serving"


def test_no_device_at_all_and_ascends_available_memory() -> None:
    none = classify('  File "/x/vllm/config.py", line 484, in __init__\n'
                    '    raise RuntimeError("No supported device detected.")\n'
                    "RuntimeError: No supported device detected.\n", exit_code=1, ended=True)
    assert (none.category, none.stage) == ("environment", "before-loading"), none.summary()
    zero = classify("(Worker_TP2 pid=554) INFO 10-28 21:14:48 [worker_v1.py:259] Available "
                    "memory: 0, total memory: 65452113920\n(EngineCore_DP0 pid=415) ERROR "
                    "10-28 21:14:49 [core.py:708] EngineCore failed to start.\n", ended=True)
    # round 17 read this as unknown (the cause line cut); round 23: zero left for the KV cache
    # is the KV-capacity failure itself, as V1's negative "Available KV cache memory" is
    assert (zero.category, zero.stage) == ("kv-capacity-at-init", "kv-sizing"), zero.summary()


# round 18 (corpus README, "Round 18 rules")

def test_a_start_line_stamped_before_what_came_first_is_pasted_out_of_order() -> None:
    kv = ("(EngineCore pid=92) INFO 07-08 15:38:03 [kv_cache_utils.py:2146] GPU KV cache size: "
          "623,873 tokens\n")
    args = "(APIServer pid=1) INFO {} [api_utils.py:273] non-default args: {{'model': 'm'}}\n"
    pasted = classify(kv + args.format("07-07 19:59:04"), ended=True)
    assert (pasted.category, pasted.stage) == ("none", "kv-sizing"), pasted.summary()
    # stamped after: a restart, judged on its own (nothing shown since)
    restart = classify(kv + args.format("07-08 16:00:00"), ended=True)
    assert restart.stage == "before-loading", restart.summary()


def test_an_oom_in_the_sampler_while_the_engine_fails_to_start_is_kv_sizing() -> None:
    oom = ('  File "/x/vllm/v1/sample/ops/topk_topp_sampler.py", line 189, in apply_top_k_top_p\n'
           "    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 298.00 MiB.\n")
    start = ('  File "/x/vllm/v1/engine/utils.py", line 706, in launch_core_engines\n'
             "    wait_for_engine_startup(\n")
    got = classify(oom + start, exit_code=1, ended=True)
    assert (got.category, got.stage) == ("kv-capacity-at-init", "kv-sizing"), got.summary()
    # the same OOM with nothing about the start: loading / KV / serving cannot be told apart
    assert classify(oom, exit_code=1, ended=True).category == "unknown"


def test_a_timeout_after_shm_broadcasts_wait_is_a_connection() -> None:
    wait = ("(EngineCore_DP0 pid=1) INFO 02-03 22:42:35 [shm_broadcast.py:542] No available "
            "shared memory broadcast block found in 60 seconds. This typically happens when some "
            "processes are hanging.\n")
    died = ("(EngineCore_DP0 pid=1) ERROR 02-03 22:43:35 [core.py:968] EngineCore encountered a "
            "fatal error.\n(EngineCore_DP0 pid=1) ERROR 02-03 22:43:35 [core.py:968] "
            "TimeoutError\n")
    got = classify(wait + died, exit_code=1, ended=True)
    assert (got.category, got.stage) == ("connection", "serving"), got.summary()
    assert classify(wait + wait, ended=False).category == "none"  # an idle worker's wait


def test_a_progress_bar_that_lost_its_line_break_still_shows_its_stage() -> None:
    log = ("Memory access fault by GPU node-5 (Agent handle: 0x460e3a50) on address "
           "0x7ec4dfe0e000. Reason: Write access to a read-only page.\n"
           "Capturing CUDA graphs (decode, FULL):  88%|####      | 45/51 [00:05<00:00,  "
           "9.32it/s](Worker_TP0 pid=3098) DEBUG 02-24 02:39:34 [gpu_model_runner.py:4758] "
           "ubatch_slices: None\n")
    got = classify(log, ended=True)
    assert (got.category, got.stage) == ("unknown", "kv-sizing"), got.summary()


@pytest.mark.parametrize("line", [
    "RuntimeError: Worker failed with error 'vllm.vllm_flash_attn requires the CUDA flash "
    "attention extensions (_vllm_fa2_C or _vllm_fa3_C). On ROCm, use upstream flash_attn.'",
    "RuntimeError: Found Tesla P40 which is too old to be supported by the triton GPU "
    "compiler, which is used as the backend.",
    "NotImplementedError: Error in calling custom op rms_norm: Could not run '_C::rms_norm' "
    "with arguments from the 'CUDA' backend.",
    "WARNING 11-20 18:08:11 [_custom_ops.py:20] Failed to import from vllm._C with "
    "ImportError('libcudart.so.12: cannot open shared object file: No such file or directory')",
])
def test_builds_without_this_devices_code_are_environment(line: str) -> None:
    assert classify(line + "\n", exit_code=1, ended=True).category == "environment"


def test_an_optional_library_missing_under_vllm_c_is_no_failure() -> None:
    # vllm-ascend's release check runs fine with this warning (h16c-ascend-release-...)
    warn = ("WARNING 08-05 11:16:06 [_custom_ops.py:20] Failed to import from vllm._C with "
            "ImportError('libnuma.so.1: cannot open shared object file: No such file or "
            "directory')\n")
    assert classify(warn, ended=False).category == "none"


def test_a_kv_connectors_lost_store_and_a_crashed_container() -> None:
    lmcache = ("2026-04-17 14:52:34,143] LMCache ERROR: Put task failed for key "
               "CacheEngineKey(model_name='m'): [Errno 32] Broken pipe (remote_backend.py:220)\n")
    assert classify(lmcache, ended=True).category == "connection"
    crashed = ("16:52:53 - Waiting for pods to be Ready (timeout=900s)\n16:53:24 - Crashed "
               "container in pod: vllm-standalone-llama-3-1b-845945945-dljsw\n")
    assert classify(crashed, ended=True).category == "unknown"


@pytest.mark.parametrize("line, stage", [
    ("(EngineCore_DP0 pid=344) ERROR 02-10 19:23:35 [tpu_offload_connector.py:2498] Error "
     "gathering blocks for request cmpl-9cbf94ef9250316c-0: boom", "serving"),
    ("INFO:vllm_omni.diffusion.diffusion_engine:Generation completed successfully.", "serving"),
    ("INFO 09-30 14:31:52 habana_executor.py:87] # HPU blocks: 3184, # CPU blocks: 256",
     "kv-sizing"),
    ("Allocating TT kv caches for each layer (submesh 1):  69%|###  | 22/32", "kv-sizing"),
    ("4100606 56.57   ray::WorkerDict.actor_rollout_generate_sequences", "serving"),
    ("ERROR 07-21 16:17:42 [core.py:1197] EngineCore encountered a fatal error.", "serving"),
])
def test_round_18_stage_lines(line: str, stage: str) -> None:
    assert classify(line + "\n", ended=False).stage == stage


@pytest.mark.parametrize("frame, stage", [
    ('  File "/x/vllm/v1/worker/worker_base.py", line 320, in initialize_from_config',
     "kv-sizing"),
    ('  File "/x/tpu_inference/offload/tpu_offload_connector.py", line 2490, in start_save_kv',
     "serving"),
    ('  File "/x/ray/dag/compiled_dag_node.py", line 2515, in _execute_until', "serving"),
])
def test_round_18_frames(frame: str, stage: str) -> None:
    got = classify("Traceback (most recent call last):\n" + frame + "\n    x = f()\n"
                   "RuntimeError: NPU out of memory. Tried to allocate 52.00 MiB\n", ended=True)
    assert got.stage == stage, got.summary()


def test_a_v0_callback_wrapped_in_functools_partial_is_the_engine_loops_death() -> None:
    log = ("ERROR:asyncio:Exception in callback functools.partial(<function "
           "_raise_exception_on_finish at 0x7fd321802200>, error_callback=<bound method>)\n")
    got = classify(log, ended=True)
    assert (got.category, got.stage) == ("serving", "serving"), got.summary()


# round 19 (corpus README, "Round 19 rules")

def test_torch_devices_function_mode_alone_does_not_place_an_oom() -> None:
    # round 18 read it as loading; two collectors disagree, so no guess (round 19)
    got = classify('  File "/x/torch/utils/_device.py", line 109, in __torch_function__\n'
                   "    return func(*args, **kwargs)\ntorch.OutOfMemoryError: HIP out of memory. "
                   "Tried to allocate 1.08 GiB.\n", ended=True)
    assert (got.category, got.stage) == ("unknown", "unknown"), got.summary()


@pytest.mark.parametrize("log, category, stage", [
    # NCCL's own device allocation failing inside a V1 step
    ("vllm-decode-0:1673:9080 [0] include/alloc.h:228 NCCL WARN Cuda failure 2 'out of "
     "memory'\n(EngineCore_DP0 pid=1671)   File \"/app/vllm/vllm/v1/worker/gpu_model_runner.py\","
     " line 2329, in execute_model\n(EngineCore_DP0 pid=1671)     self.eplb_step()\n",
     "serving-oom", "serving"),
    # the TPU runtime's program allocation, no phase shown
    ("RuntimeProgramAllocationFailure: Error loading program 'jit__forward':\nAttempting to "
     "allocate 1.13G. That was not possible. There are 528.72M free.\n", "unknown", "unknown"),
    # a Marlin repack quoted without its frame
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 140.00 MiB.\n[...]\n"
     "marlin_qweight = ops.gptq_marlin_repack(b_q_weight=pack_fp8_to_int32(\n",
     "loading", "loading"),
    # a kernel's assertion after startup: the first request's step
    ("(APIServer pid=1) INFO:     Application startup complete.\n/pytorch/aten/src/ATen/native/"
     "cuda/IndexKernelUtils.cu:16: vectorized_gather_kernel: block: [42,0,0], thread: "
     "[224,0,0] Assertion `ind >=0` failed.\n", "serving", "serving"),
    # an illegal access in the KV-sizing RPC, named in the engine's source line
    ("(EngineCore_0 pid=294) ERROR 08-29 02:03:28 [core.py:700]     output = self.collective_rpc("
     "\"determine_available_memory\")\n(EngineCore_0 pid=294) ERROR 08-29 02:03:28 [core.py:700] "
     "RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was "
     "encountered\n", "unknown", "kv-sizing"),
])
def test_round_19_causes_and_stages(log: str, category: str, stage: str) -> None:
    got = classify(log, ended=True)
    assert (got.category, got.stage) == (category, stage), got.summary()


@pytest.mark.parametrize("line, category", [
    ("(Worker_DP0_EP0 pid=2823482) ERROR 10-16 17:22:56 [nixl_connector.py:815] RuntimeError: "
     "Remote NIXL agent engine ID mismatch. Expected a_dp0,received b_dp0.", "connection"),
    ("(EngineCore pid=436) ERROR 07-30 15:51:33 [base_worker.py:2123] NIXL transfer failure: "
     "transfer_exception. Marking blocks as invalid", "connection"),
    ("(Worker_DP0_TP0_EP0 pid=782865) ERROR 03-31 02:49:30 [mooncake_connector.py:547] Mooncake "
     "transfer failed for request chatcmpl-ba310df4", "connection"),
    ("(APIServer pid=1) requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: "
     "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/main/config.json", "config"),
    ("ValueError: The supplied chat template string (examples/t.jinja) appears path-like, but "
     "doesn't exist! Tried: examples/t.jinja", "config"),
])
def test_round_19_lines(line: str, category: str) -> None:
    assert classify(line + "\n", exit_code=1, ended=True).category == category


def test_an_import_warning_before_the_banner_belongs_to_that_start() -> None:
    log = ("WARNING 06-24 21:44:48 _custom_ops.py:14] Failed to import from vllm._C with "
           "ImportError('libcudart.so.12: cannot open shared object file: No such file or "
           "directory')\nINFO 06-24 21:44:54 api_server.py:177] vLLM API server version "
           "0.5.0.post1\n")
    assert classify(log, exit_code=1, ended=True).category == "environment"


def test_the_api_servers_start_lines_are_not_serving() -> None:
    init = ("(EngineCore_0 pid=1) INFO 08-19 14:58:40 [core.py:215] init engine (profile, create kv "
            "cache, warmup model) took 1.06 seconds\n(APIServer pid=2) INFO 08-19 14:58:41 "
            "[loggers.py:142] Engine 000: vllm cache_config_info with initialization after "
            "num_gpu_blocks is: 57656\n(APIServer pid=2) INFO 08-19 14:58:41 "
            "[serving_responses.py:120] Using default chat sampling params from model: {}\n")
    assert classify(init, ended=False).stage == "after-init"
    for line in ("NCCL INFO Channel 07/16 : 0 1", "DEBUG 06-12 19:58:31 [__init__.py:31] No "
                 "plugins for group vllm.platform_plugins found."):
        assert classify("spark:2528:2528 [0] " * line.startswith("NCCL") + line + "\n",
                        ended=False).stage == "before-loading"


# round 22 (corpus README, "Round 22 rules"): the decisions, each on lines of the shape it was
# read from

def test_shm_broadcasts_notice_is_no_failure_at_any_level() -> None:
    notice = ("No available shared memory broadcast block found in 60 seconds. This typically "
              "happens when some processes are hanging or doing some time-consuming work (e.g. "
              "compilation).\n")
    assert classify(notice, ended=True).category == "none"  # pasted without its INFO prefix
    # ... but a TimeoutError after it is still that wait failing
    timeout = "ERROR 02-03 22:43:35 [core.py:968] TimeoutError\n"
    assert classify(notice + timeout, exit_code=1, ended=True).category == "connection"


@pytest.mark.parametrize("line", [
    "ValueError: TT-LLama8B and TT-Llama11B do not support max_model_len greater than 32768 on "
    "N150 (received 65536). Set --max_model_len to 32768 or lower in vLLM.",
    "ERROR 06-01 13:18:12 [core.py:1341]     peft_helper.validate_legal(self.lora_config)",
    "ERROR 03-05 16:30:27 [serving.py:323] vllm.entrypoints.chat_utils.ChatTemplateResolution"
    "Error: As of transformers v4.44, default chat template is no longer allowed, so you must "
    "provide a chat template if the tokenizer does not define one.",
])
def test_configuration_met_late_claims_no_stage(line: str) -> None:
    # checked when the model, an adapter or a request meets it: config, but not "before
    # loading" (arguments and the config are checked there; these are not)
    got = classify(line + "\n", exit_code=1, ended=True)
    assert got.category == "config" and got.stage != "before-loading", got.summary()


def test_a_line_raised_only_while_loading_shows_loading() -> None:
    line = ("(EngineCore_DP0 pid=5765) ERROR 01-05 22:46:36 [gpu_model_runner.py:3797] Failed to "
            "load model - not enough GPU memory. Try lowering --gpu-memory-utilization (original "
            "error: CUDA out of memory. Tried to allocate 384.00 MiB.)\n")
    got = classify(line, exit_code=1, ended=True)
    assert (got.category, got.stage) == ("loading", "loading"), got.summary()


def test_tcpstores_rendezvous_timeout_is_a_connection_before_loading() -> None:
    line = ("torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. "
            "1/4 clients joined.\n")
    got = classify(line, exit_code=1, ended=True)
    assert (got.category, got.stage) == ("connection", "before-loading"), got.summary()


# round 23 (corpus README, "Round 23 rules"): the generic shape of an inter-process start-up
# failure (a process that waited for a named peer and gave up), and the decisions read from
# heldout-22; lines of the shapes read there and vLLM 0.32's own wordings of the same waits

@pytest.mark.parametrize("line", [
    "(EngineCore_DP1 pid=17219) RuntimeError: Did not receive response from front-end process "
    "within 5 minutes",
    "RuntimeError: Barrier timed out after 30.00 seconds",  # vllm/distributed/utils.py (0.32)
    "> gcs_rpc_client.h:552: Failed to connect to GCS within 60 seconds. GCS may have been "
    "killed.",
    "RuntimeError: Failed to start GCS.  Last 0 lines of error files:",
    "[2024-06-13 16:11:51,588 E 13261 13261] core_worker.cc:228: Failed to register worker "
    "01000000ffff to Raylet. IOError: [RayletClient] Unable to register worker with raylet.",
    "ERROR 02-09 02:31:11 engine.py:389] Ray does not allocate any GPUs on the driver node. "
    "Consider adjusting the Ray placement group or running the driver on a GPU node.",
])
def test_a_start_up_wait_for_a_peer_that_failed_is_a_connection_before_loading(line: str) -> None:
    got = classify(line + "\n", exit_code=1, ended=True)
    assert (got.category, got.stage) == ("connection", "before-loading"), got.summary()


@pytest.mark.parametrize("line", [
    "(ApiServer_0 pid=25528) TimeoutError: Timed out waiting for engines to sendinitial message "
    "on input socket.",
    # vLLM 0.32's wording, with its own advice (core_client.py)
    "TimeoutError: Timed out waiting for engine core processes to start. This is often caused by "
    "slow weight loading for large models. Waited 600s (configured by "
    "VLLM_ENGINE_READY_TIMEOUT_S).",
])
def test_the_api_servers_wait_for_its_engines_claims_no_stage(line: str) -> None:
    # the engines load their weights during that wait: connection, but not "before loading"
    got = classify(line + "\n", exit_code=1, ended=True)
    assert got.category == "connection" and got.stage != "before-loading", got.summary()


def test_ascends_worker_with_nothing_left_for_the_kv_cache_is_kv_capacity() -> None:
    line = ("(EngineCore_DP0 pid=634) INFO 11-22 10:01:28 [worker_v1.py:256] Available memory: "
            "{}, total memory: 65452113920\n")
    got = classify(line.format(0), ended=True)
    assert (got.category, got.stage) == ("kv-capacity-at-init", "kv-sizing"), got.summary()
    assert classify(line.format(-1073741824), ended=True).category == "kv-capacity-at-init"
    assert classify(line.format(21474836480), ended=True).category == "none"


def test_the_sampler_warm_up_oom_wrapped_by_a_terminal_is_kv_sizing() -> None:
    log = ("RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 \n"
           "dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` \n"
           "when initializing the engine.\n")
    got = classify(log, exit_code=1, ended=True)
    assert (got.category, got.stage) == ("kv-capacity-at-init", "kv-sizing"), got.summary()


@pytest.mark.parametrize("line", [
    "RuntimeError: Failed to load the backend extension: torch_npu. You can disable extension "
    "auto-loading with TORCH_DEVICE_BACKEND_AUTOLOAD=0.",
    "ValueError: Current node has no GPU available. current_node_resource={'CPU': 96.0}. vLLM "
    "engine cannot start without GPU. Make sure you have at least 1 GPU available in a node",
])
def test_a_device_the_process_cannot_use_is_the_environment(line: str) -> None:
    got = classify(line + "\n", exit_code=1, ended=True)
    assert (got.category, got.stage) == ("environment", "before-loading"), got.summary()


def test_a_nixl_handshake_that_failed_is_a_kv_transfer_while_serving() -> None:
    line = ("ERROR 11-22 06:57:51 [nixl_connector.py:548] Handshake with "
            "c00824be-282f-4719-9aeb-120dcb516863 failed\n")
    got = classify(line, exit_code=1, ended=True)
    assert (got.category, got.stage) == ("connection", "serving"), got.summary()


def test_the_api_server_seeing_its_engine_core_exit_is_a_death_whose_cause_is_looked_for() -> None:
    death = ("(APIServer pid=1) WARNING 08-31 03:52:31 [core_client.py:699] [shutdown] MPClient: "
             "engine core exited unexpectedly; starting cleanup\n")
    assert classify(death, ended=True).category == "unknown"  # a death, at WARNING, cause unseen
    oom = ("(EngineCore_DP0 pid=7) INFO 08-31 03:50:00 [loggers.py:123] Engine 000: Avg prompt "
           "throughput: 900.0 tokens/s\n"
           "(EngineCore_DP0 pid=7) ERROR 08-31 03:52:30 [core.py:710] torch.OutOfMemoryError: "
           "CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    assert classify(oom + death, exit_code=1, ended=True).category == "serving-oom"


def test_a_frame_after_another_logging_formats_tag_is_read() -> None:
    # "<date> <time> LEVEL <pid> [file.py:N]" (a customised vLLM logging format): the frames
    # under it show the stage as under vLLM's own prefix
    tag = "2024-08-22 13:50:25 ERROR 200507 [worker_base.py:148] "
    log = (tag + "Error executing method start_worker_execution_loop. This might cause deadlock "
           "in distributed execution.\n" + tag + "Traceback (most recent call last):\n" + tag +
           '  File "/x/vllm/spec_decode/spec_decode_worker.py", line 313, in '
           "start_worker_execution_loop\n" + tag + "    while self._run_non_driver_rank():\n")
    got = classify(log, ended=True)  # an excerpt posted without its exit status
    assert (got.category, got.stage) == ("serving", "serving"), got.summary()


def test_a_start_up_wait_gets_its_own_advice_not_the_interconnects() -> None:
    from pytest_k3accept.observe.server.classify import STARTUP_WAIT_ADVICE

    for line in ("TimeoutError: Timed out waiting for engine core processes to start. This is "
                 "often caused by slow weight loading for large models.",
                 "RuntimeError: Did not receive response from front-end process within 5 "
                 "minutes"):
        got = classify(line + "\n", exit_code=1, ended=True)
        assert got.advice == STARTUP_WAIT_ADVICE, got.advice
        assert "VLLM_ENGINE_READY_TIMEOUT_S" in got.advice and "NCCL" not in got.advice
    nccl = classify("RuntimeError: NCCL error: unhandled system error\n", exit_code=1, ended=True)
    assert nccl.category == "connection" and nccl.advice != STARTUP_WAIT_ADVICE


def test_round_24_wordings_claim_only_the_stage_their_line_shows() -> None:
    # Mooncake Store's mount of its segment runs when the connector starts: a connection
    # failure, not a request's KV transfer (those lines also show serving)
    mount = ("E0417 19:46:42.567027   481 master_client.cpp:192] Failed to mount segment due to "
             "rpc error\n")
    got = classify(mount, ended=True)
    assert (got.category, got.stage) == ("connection", ""), got.summary()
    # a file the container's user cannot write: environment, met whenever the library first
    # writes there (no stage); the shell refusing the command itself: before anything ran
    perm = "(EngineCore pid=84) PermissionError: [Errno 13] Permission denied: '/.triton'\n"
    got = classify(perm, exit_code=1, ended=True)
    assert (got.category, got.stage) == ("environment", ""), got.summary()
    shell = classify("/bin/sh: 1: vllm: Permission denied\n", exit_code=126, ended=True)
    assert (shell.category, shell.stage) == ("environment", "before-loading"), shell.summary()
    # a quantization scheme with no kernel on this GPU: config, found while the layers are
    # made (no stage claimed, unlike the dtype check before loading)
    wna16 = ("(Worker_TP2 pid=142) ERROR 12-12 21:39:58 [multiproc_executor.py:750] ValueError: "
             "Failed to find a kernel that can implement the WNA16 linear layer. Reasons: \n")
    got = classify(wna16, exit_code=1, ended=True)
    assert (got.category, got.stage) == ("config", ""), got.summary()


def test_nccl_that_does_not_load_is_evidence_only_in_its_error_line() -> None:
    # vLLM 0.4's pynccl logs the failure at ERROR with its advice, and then at INFO "It is
    # expected if you are not running on NVIDIA GPUs": on a CPU / ROCm host the INFO lines
    # alone are a healthy start
    info = ("INFO 04-23 19:58:45 pynccl_utils.py:17] Failed to import NCCL library: Failed to "
            "load NCCL library from libnccl.so.2 .\n"
            "INFO 04-23 19:58:45 pynccl_utils.py:18] It is expected if you are not running on "
            "NVIDIA GPUs.\n")
    assert classify(info, ended=True).category == "none"
    error = ("ERROR 04-23 19:58:45 pynccl.py:44] Failed to load NCCL library from libnccl.so.2 "
             ".It is expected if you are not running on NVIDIA/AMD GPUs.Otherwise, the nccl "
             "library might not exist, be corrupted or it does not support the current "
             "platform\n")
    assert classify(error + info, ended=True).category == "environment"


def test_colour_codes_as_a_pager_shows_them_are_stripped() -> None:
    # `less` without -R shows an escape as "ESC": the process tag behind it is still a tag,
    # and the frames under it place the failure
    tag = "ESC[0;36m(EngineCore_DP0 pid=52470)ESC[0;0m "
    log = (tag + "Exception in thread Thread-5 (process_input_sockets):\n" + tag +
           "Traceback (most recent call last):\n" + tag +
           '  File "/x/vllm/v1/engine/core.py", line 569, in preprocess_add_request\n' + tag +
           "    request.mm_features = self.mm_receiver_cache.get_and_update_features(\n")
    got = classify(log, ended=True)
    assert (got.category, got.stage) == ("serving", "serving"), got.summary()
    assert got.evidence[0].text.startswith("Exception in thread"), got.evidence
