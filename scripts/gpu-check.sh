#!/usr/bin/env bash
# GPU check of pytest-k3accept: run on a machine WITH an NVIDIA GPU, from a checkout.
#
#   scripts/gpu-check.sh            # results under $OUT (or a temp dir)
#
# 1. installs the plugin from this checkout (pip --no-deps --no-build-isolation, no network;
#    wheels in .whl/ are installed first when present, for machines without a registry);
# 2. runs `k3accept collect` (facts file);
# 3. runs scripts/gpu_check_test.py: the environment markers (k3_driver, k3_cuda,
#    k3_topology) on the collected facts, and k3_gpu while torch allocates and frees
#    K3_GPU_CHECK_GIB GiB (default 8); the reported peak must match the allocation;
# 4. prints a summary. Exit status 0 only when every step passed (--k3-require: unknown facts
#    fail, never skip). Takes well under 4 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
OUT_DIR=${OUT:-$(mktemp -d)}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 K3_GPU_CHECK_OUT="$OUT_DIR"
status=0
say() { printf '\n== %s\n' "$*"; }

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | head -5
"$PY" -c 'import sys; print("python", sys.version.split()[0], sys.executable)'

say "install"
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/k3site .whl/*.whl && export PYTHONPATH=/tmp/k3site${PYTHONPATH:+:$PYTHONPATH}
fi
if "$PY" -c 'import torch' 2>/dev/null; then
  "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
elif [ "${K3_GPU_CHECK_INSTALL_TORCH:-1}" = 1 ]; then
  "$PY" -m pip install -q torch || echo "torch is not importable and could not be installed"
fi
K3=("$PY" -m pytest_k3accept.cli)
if "$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$OUT_DIR/pip.log" 2>&1; then
  echo "installed pytest-k3accept from this checkout (editable, --no-deps)"
  K3BIN="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")/k3accept"
  [ -x "$K3BIN" ] && K3=("$K3BIN")
else
  echo "pip install -e . failed (see pip.log); using the checkout on PYTHONPATH"
fi
# the checkout first on the path either way; other pytest plugins of this image stay out
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
"$PY" - <<'PY'
import importlib
missing = [m for m in ("pytest", "pytest_asyncio", "httpx", "httpx_aiohttp", "aiohttp",
                       "prometheus_client", "pynvml", "pytest_html", "pytest_metadata")
           if importlib.util.find_spec(m) is None]
print("dependencies missing:", ", ".join(missing) if missing else "none")
PY

say "k3accept collect"
if "${K3[@]}" collect --out "$OUT_DIR/node.json"; then
  "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ('node','gpu_available','gpu_error','driver_version','cuda_driver_version','cuda_runtime','cuda_runtime_source','torch_version')}, indent=1)); print('gpus:', [(g['name'], g['memory_total_bytes'], g['nvlink_active']) for g in d['gpus']])" "$OUT_DIR/node.json"
else
  echo "collect FAILED"; status=1
fi

say "pytest: environment markers + k3_gpu peak"
"$PY" -m pytest scripts/gpu_check_test.py -p pytest_k3accept.plugin --noconftest -p no:cacheprovider \
  -o addopts= -o asyncio_default_fixture_loop_scope=function -rA -v \
  --k3-require --k3-host-facts "$OUT_DIR/node.json" --k3-gpu-interval 0.2 \
  --junitxml "$OUT_DIR/junit.xml" \
  2>&1 | tee "$OUT_DIR/pytest.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

say "summary"
"$PY" - "$OUT_DIR/gpu-check.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except OSError:
    sys.exit("no results file: the pytest step did not get far (see pytest.log)")
print("host:", r.get("host"))
t = r.get("telemetry")
if t:
    g = 2 ** 30
    print(f"GPU {t['gpu']}: allocated {t['alloc_bytes'] / g:.3f} GiB; peak - baseline "
          f"{t['peak_minus_baseline_bytes'] / g:.3f} GiB (tolerance {t['tolerance_bytes'] / g:.3f})"
          f"; after free {(t['after_free_bytes'] - t['baseline_bytes']) / g:+.3f} GiB; "
          f"headroom {t['headroom']:.2%}; {t['samples']} samples, {t['samples_while_held']} "
          f"while held, every {t['interval_s']} s")
    print(t["describe"])
PY
[ $? -eq 0 ] || status=1
echo "elapsed: $(( $(date +%s) - START )) s; results in $OUT_DIR"
[ $status -eq 0 ] && echo "GPU CHECK: PASS" || echo "GPU CHECK: FAIL"
exit $status
