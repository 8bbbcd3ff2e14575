"""Scoped host facts as users run them (pytester runs of real test files): a ``kubectl get
nodes -o json`` file as the facts source, local NVML kept out of a remote deployment's facts
unless ``--k3-local-gpu``, and the GPU selector under both its names, shown in the record.

The conftest installs the pynvml stand-in with 4 GPUs on driver 550 (this CI machine's own
GPUs, which must never decide a remote deployment's C4/C5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from test_host_markers import CONFTEST as HOST_MARKERS_CONFTEST

HOST = Path(__file__).parent.parent / "data" / "host"

#: this CI machine's own GPUs: 4 on driver 550
CONFTEST = HOST_MARKERS_CONFTEST.format(
    gpus='[StubGpu() for _ in range(4)], driver="550.54.15"')

SUITE = '''
import pytest

@pytest.mark.k3_driver(min="580")
@pytest.mark.k3_topology(gpus=16, nodes=2)
def test_env(k3_host):
    """The deployment's GPU nodes."""
'''


def setup(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_env=SUITE)


def host_evidence(pytester: pytest.Pytester) -> dict[str, Any]:
    out = json.loads((pytester.path / "evidence.json").read_text())
    host = [e for e in out["evidence"] if e["kind"] == "host"]
    assert host, out
    return {"host": host[0], "checklist": out["checklist"]}


def test_kubectl_nodes_are_the_remote_deployment(pytester: pytest.Pytester) -> None:
    setup(pytester)
    result = pytester.runpytest("--k3-host-facts", str(HOST / "kubectl-nodes-h200-gfd.json"),
                                "--k3-endpoint", "http://k3-h200-0.cluster.invalid:8000",
                                "--k3-record", "record.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    got = host_evidence(pytester)
    assert got["checklist"]["C4"] == "pass" and got["checklist"]["C5"] == "pass"
    assert "2 node(s), 16 GPU(s), driver 580.65.06, 580.95.05" in got["host"]["summary"]
    assert any("local NVML not read: the endpoint http://k3-h200-0.cluster.invalid:8000 is "
               "not on this machine" in n for n in got["host"]["data"]["notes"])
    record = json.loads((pytester.path / "record.json").read_text())
    assert record["session"]["settings"]["local_gpu"] is False


def test_local_gpu_flag_adds_this_machine_and_it_fails_c4(pytester: pytest.Pytester) -> None:
    setup(pytester)
    result = pytester.runpytest("--k3-host-facts", str(HOST / "kubectl-nodes-h200-gfd.json"),
                                "--k3-endpoint", "http://k3-h200-0.cluster.invalid:8000",
                                "--k3-local-gpu", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected host driver >= 580.65.06*550.54.15 on*"])


def test_older_gfd_labels_fail_c4_in_full(pytester: pytest.Pytester) -> None:
    setup(pytester)
    result = pytester.runpytest("--k3-host-facts", str(HOST / "kubectl-nodes-older-gfd.json"),
                                "--k3-endpoint", "http://gpu-node-h100-3.invalid:8000",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ENVIRONMENT FAILURE (C4*expected host driver >= 580.65.06 "
                                 "(R580 as CUDA 13.x needs it), actual 570.124.06 on "
                                 "gpu-node-h100-3*"])


@pytest.mark.parametrize("option", ["--k3-gpu-selector", "--k3-prometheus-selector"])
def test_gpu_selector_under_both_names_is_in_the_record(pytester: pytest.Pytester,
                                                        option: str) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(option, 'namespace="k3",pod=~"vllm-.*"', "--k3-record",
                                "record.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    record = json.loads((pytester.path / "record.json").read_text())
    assert record["session"]["settings"]["gpu_selector"] == 'namespace="k3",pod=~"vllm-.*"'


def test_bad_gpu_selector_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--k3-gpu-selector", "k3", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--k3-gpu-selector: not a PromQL label selector: 'k3'*"])
    helped = pytester.runpytest("--help")
    helped.stdout.fnmatch_lines(["*--k3-gpu-selector=MATCHERS*", "*--k3-local-gpu*"])
