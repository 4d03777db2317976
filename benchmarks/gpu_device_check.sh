#!/usr/bin/env bash
# Every GPU check in one prepared run, for a machine lent for a few minutes (docs/gpu-validation.md).
#
#   bash benchmarks/gpu_device_check.sh [OUTDIR]        # OUTDIR defaults to $OUT if set, else out/gpu
#
# Uses musaenv from this checkout (PYTHONPATH), not an install. Wheels in .whl/ (e.g. gymnasium for a machine
# without it) are installed into /tmp/site first. Writes versions.txt, gpu_selfcheck.json, selfcheck.log and
# pytest_gpu.log to OUTDIR; each step has its own time limit so a hang in one still leaves the others' logs.
# The limits (350 s + 230 s, the selfcheck's first step a sandboxed CUDA context) keep the whole run under 10 minutes.
# Exit status: 0 when every step ran and pytest passed, else the first failing step's status.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-out/gpu}}"
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 3
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export MUSAENV_CACHE_DIR="${MUSAENV_CACHE_DIR:-/tmp/musaenv-gpu-cache}"  # shared by both steps: built once

{
    date -u +%Y-%m-%dT%H:%MZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
        "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())'
    python3 -c 'import triton; print("triton", triton.__version__)'
    nvcc --version | tail -n 2
    nproc
} 2>&1 | tee "$out/versions.txt"

status=0
timeout "${SELFCHECK_TIMEOUT_S:-350}" python3 benchmarks/gpu_selfcheck.py --out "$out/gpu_selfcheck.json" 2>&1 \
    | tee "$out/selfcheck.log" || status=$?
timeout "${PYTEST_TIMEOUT_S:-230}" python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 \
    | tee "$out/pytest_gpu.log"
rc=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && status=$rc
echo "gpu_device_check: selfcheck+pytest status $status (logs in $out)"
exit "$status"
