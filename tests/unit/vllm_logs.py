"""Excerpts of real vLLM 0.32.0 (CPU build) server logs, captured on the testbed on 2026-11-29.

Lines are verbatim (long configuration lines are cut at 200 characters); only lines between
the ones that matter were left out. Used by the timeline and classification unit tests.
"""

HEALTHY = """\
(APIServer pid=12711) INFO 11-29 23:49:29 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=12711) INFO 11-29 23:49:29 [api_utils.py:286] non-default args: {'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', 'host': '127.0.0.1', 'port': 43461, 'model': '/root/.cach
(APIServer pid=12711) WARNING 11-29 23:49:29 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n
(EngineCore pid=12782) INFO 11-29 23:49:38 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/root/.cache/pytest-k3accept/models/tiny-8449dedaf865', speculative_config=None, tok
(Worker pid=12875) INFO 11-29 23:49:48 [cpu_model_runner.py:68] Starting to load model /root/.cache/pytest-k3accept/models/tiny-8449dedaf865...
Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]
Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 213.90it/s]
(Worker pid=12875) INFO 11-29 23:49:49 [default_loader.py:501] Loading weights took 0.01 seconds
(Worker pid=12875) INFO 11-29 23:49:50 [cpu_worker.py:260] Explicitly set (1.0/11.09) GiB for KV cache on node 0.
(EngineCore pid=12782) INFO 11-29 23:49:50 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 2,048 tokens per request: 512.00x
(EngineCore pid=12782) INFO 11-29 23:49:54 [core.py:402] init engine (profile, create kv cache, warmup model) took 4.72 s
(APIServer pid=12711) INFO 11-29 23:49:56 [entry.py:140] Starting vLLM server on http://127.0.0.1:43461
(APIServer pid=12711) INFO 11-29 23:49:56 [launcher.py:195] Route: /health, Methods: GET
INFO:     Started server process [12711]
INFO:     Application startup complete.
INFO:     127.0.0.1:55230 - "GET /v1/models HTTP/1.1" 200 OK
INFO:     127.0.0.1:55244 - "POST /v1/chat/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:55258 - "GET /health HTTP/1.1" 200 OK
"""

HEAD16_DIES_AT_FIRST_REQUEST = """\
(APIServer pid=11266) INFO 11-29 23:48:44 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=11266) INFO 11-29 23:48:44 [api_utils.py:286] non-default args: {'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', 'host': '127.0.0.1', 'port': 43795, 'model': '/root/.cach
(APIServer pid=11266) WARNING 11-29 23:48:44 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n
(EngineCore pid=11944) INFO 11-29 23:48:58 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/root/.cache/pytest-k3accept/models/head16-8449dedaf865', speculative_config=None, t
(Worker pid=12316) INFO 11-29 23:49:10 [cpu_model_runner.py:68] Starting to load model /root/.cache/pytest-k3accept/models/head16-8449dedaf865...
Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]
Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 365.10it/s]
(Worker pid=12316) INFO 11-29 23:49:11 [default_loader.py:501] Loading weights took 0.00 seconds
(Worker pid=12316) INFO 11-29 23:49:11 [cpu_worker.py:260] Explicitly set (1.0/10.84) GiB for KV cache on node 0.
(EngineCore pid=11944) INFO 11-29 23:49:11 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 2,048 tokens per request: 512.00x
(EngineCore pid=11944) INFO 11-29 23:49:14 [core.py:402] init engine (profile, create kv cache, warmup model) took 2.20 s
(APIServer pid=11266) INFO 11-29 23:49:16 [entry.py:140] Starting vLLM server on http://127.0.0.1:43795
(APIServer pid=11266) INFO 11-29 23:49:16 [launcher.py:195] Route: /health, Methods: GET
INFO:     Started server process [11266]
INFO:     Application startup complete.
INFO:     127.0.0.1:45908 - "GET /v1/models HTTP/1.1" 200 OK
(Worker pid=12316) ERROR 11-29 23:49:17 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=12316) ERROR 11-29 23:49:17 [multiproc_executor.py:1063] RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0
(Worker pid=12316) ERROR 11-29 23:49:17 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=12316) ERROR 11-29 23:49:17 [multiproc_executor.py:1063] RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0
(EngineCore pid=11944) ERROR 11-29 23:49:17 [core.py:1512] EngineCore encountered a fatal error.
(EngineCore pid=11944) ERROR 11-29 23:49:17 [core.py:1512] Traceback (most recent call last):
(EngineCore pid=11944) ERROR 11-29 23:49:17 [core.py:1512]     raise self._exception
(EngineCore pid=11944) ERROR 11-29 23:49:17 [core.py:1512]     raise RuntimeError(
(EngineCore pid=11944) ERROR 11-29 23:49:17 [core.py:1512] RuntimeError: Worker failed with error 'Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0', please check the stack trace above for the root cause
(APIServer pid=11266) ERROR 11-29 23:49:17 [async_llm.py:906] Traceback (most recent call last):
(APIServer pid=11266) ERROR 11-29 23:49:17 [async_llm.py:906]     raise self._format_exception(outputs) from None
(APIServer pid=11266) ERROR 11-29 23:49:17 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
INFO:     127.0.0.1:45922 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error
INFO:     127.0.0.1:45934 - "GET /health HTTP/1.1" 503 Service Unavailable
"""

KV_TOO_SMALL_FOR_MAX_LEN = """\
(APIServer pid=14076) INFO 11-29 23:51:14 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=14076) INFO 11-29 23:51:14 [api_utils.py:286] non-default args: {'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', 'host': '127.0.0.1', 'port': 44147, 'model': '/root/.cach
(APIServer pid=14076) WARNING 11-29 23:51:14 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n
(EngineCore pid=14285) INFO 11-29 23:51:27 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/root/.cache/pytest-k3accept/models/tiny-8449dedaf865', speculative_config=None, tok
(Worker pid=14411) INFO 11-29 23:51:37 [cpu_model_runner.py:68] Starting to load model /root/.cache/pytest-k3accept/models/tiny-8449dedaf865...
Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]
Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 313.03it/s]
(Worker pid=14411) INFO 11-29 23:51:37 [default_loader.py:501] Loading weights took 0.00 seconds
(Worker pid=14411) INFO 11-29 23:51:37 [cpu_worker.py:260] Explicitly set (0.0/13.34) GiB for KV cache on node 0.
(EngineCore pid=14285) ERROR 11-29 23:51:37 [core.py:1510] Traceback (most recent call last):
(EngineCore pid=14285) ERROR 11-29 23:51:37 [core.py:1510]     raise ValueError(
(EngineCore pid=14285) ERROR 11-29 23:51:37 [core.py:1510] ValueError: To serve at least one request with the model's max seq len (4096), (0.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.0 GiB). Based on the available memory, the estimated maximum model length is 768. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.
(EngineCore pid=14285) ERROR 11-29 23:51:40 [multiproc_executor.py:315] Worker proc VllmWorker-0 died unexpectedly (exit code: None), shutting down executor.
Traceback (most recent call last):
    raise e
    raise ValueError(
ValueError: To serve at least one request with the model's max seq len (4096), (0.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.0 GiB). Based on the available memory, the estimated maximum model length is 768. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.
Traceback (most recent call last):
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}
"""

KV_NO_BLOCKS = """\
(APIServer pid=9331) INFO 11-29 23:47:28 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=9331) INFO 11-29 23:47:28 [api_utils.py:286] non-default args: {'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', 'host': '127.0.0.1', 'port': 59285, 'model': '/root/.cache
(APIServer pid=9331) WARNING 11-29 23:47:28 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n
(EngineCore pid=9881) INFO 11-29 23:47:47 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/root/.cache/pytest-k3accept/models/tiny-8449dedaf865', speculative_config=None, toke
(Worker pid=10764) INFO 11-29 23:48:12 [cpu_model_runner.py:68] Starting to load model /root/.cache/pytest-k3accept/models/tiny-8449dedaf865...
Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]
Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 148.75it/s]
(Worker pid=10764) INFO 11-29 23:48:12 [default_loader.py:501] Loading weights took 0.01 seconds
(Worker pid=10764) INFO 11-29 23:48:14 [cpu_worker.py:260] Explicitly set (0.0/10.84) GiB for KV cache on node 0.
(EngineCore pid=9881) ERROR 11-29 23:48:14 [core.py:1510] Traceback (most recent call last):
(EngineCore pid=9881) ERROR 11-29 23:48:14 [core.py:1510]     raise ValueError(
(EngineCore pid=9881) ERROR 11-29 23:48:14 [core.py:1510] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.
(EngineCore pid=9881) ERROR 11-29 23:48:19 [multiproc_executor.py:315] Worker proc VllmWorker-0 died unexpectedly (exit code: None), shutting down executor.
Traceback (most recent call last):
    raise e
    raise ValueError(
ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.
Traceback (most recent call last):
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

WEIGHTS_DO_NOT_FIT = """\
(APIServer pid=13539) INFO 11-29 23:50:28 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=13539) INFO 11-29 23:50:28 [api_utils.py:286] non-default args: {'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', 'host': '127.0.0.1', 'port': 42677, 'model': '/root/.cach
(APIServer pid=13539) WARNING 11-29 23:50:28 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n
(EngineCore pid=13699) INFO 11-29 23:50:36 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/root/.cache/pytest-k3accept/models/huge-8449dedaf865', speculative_config=None, tok
(Worker pid=13779) INFO 11-29 23:50:52 [cpu_model_runner.py:68] Starting to load model /root/.cache/pytest-k3accept/models/huge-8449dedaf865...
(Worker pid=13779) ERROR 11-29 23:50:52 [multiproc_executor.py:953] Traceback (most recent call last):
(Worker pid=13779) ERROR 11-29 23:50:52 [multiproc_executor.py:953] RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 32768000000 bytes. Error code 12 (Cannot allocate memory)
(EngineCore pid=13699) ERROR 11-29 23:50:55 [core.py:1510] Traceback (most recent call last):
(EngineCore pid=13699) ERROR 11-29 23:50:55 [core.py:1510]     raise e from None
Traceback (most recent call last):
    raise e
    raise e from None
Traceback (most recent call last):
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}
"""
