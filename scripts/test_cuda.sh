#!/usr/bin/env bash
# Builds the extension and runs the CUDA backend's tests, the demo and the CUDA
# benchmarks on a machine with an NVIDIA GPU (docs/cuda.md, "Running the GPU suite").
#   bash scripts/test_cuda.sh [LOG_DIR]
# Environment: COREAI_TORCH_CXX (the clang++ to compile kernels with, if not on
# PATH), PYTHON (default python3), STEP_TIMEOUT (seconds per step, default 300).
# Each step's output goes to LOG_DIR/<step>.log; the summary lines are printed.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:-/tmp/coreai_torch_cuda_logs}
mkdir -p "$logs"
py=${PYTHON:-python3}
limit=${STEP_TIMEOUT:-300}
export PYTHONUNBUFFERED=1
# The extension is built in place: benchmarks/ scripts import it from here.
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
status=0

step() {  # step NAME COMMAND...: runs COMMAND with a time limit, logs it, keeps going
  local name=$1
  shift
  local start=$SECONDS
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - start)) s"
  grep -E "passed|failed|error|Error|skipped" "$logs/$name.log" | tail -n 3
  [[ $rc -eq 0 ]] || status=1
}

step build "$py" setup.py -q build_ext --inplace
step check "$py" -m coreai_torch check
step backend "$py" -m pytest -q -rs tests/cuda/test_cuda_backend.py
# The eager suite in device mode: every kernel call also runs on the GPU and
# must agree with the CPU backend (tests/kernel_testing.py).
step suite env COREAI_TORCH_TEST_DEVICE=cuda "$py" -m pytest -q -rs \
  tests/test_opcheck.py tests/cpu/test_msl_kernels.py tests/cpu/test_launch_dispatch.py \
  tests/cpu/test_launch_sync.py tests/cpu/test_launch_frontend.py
step msl env COREAI_TORCH_TEST_DEVICE=cuda "$py" -m pytest -q -rs tests/msl
step demo "$py" -m coreai_torch demo
step bench "$py" benchmarks/bench_cuda.py
exit $status
