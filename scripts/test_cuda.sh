#!/usr/bin/env bash
# Builds the extension and runs the CUDA backend's tests, the demo, the CUDA
# benchmarks and a profile on a machine with an NVIDIA GPU (docs/cuda.md,
# "Running the GPU suite").
#   bash scripts/test_cuda.sh LOG_DIR [STEP...]
# Steps (default: all, in this order): build smoke check tests bench demo profile.
# "tests" runs the backend's tests, the eager suite in device mode and the
# tests/msl programs on the GPU side by side (they share the GPU; the
# benchmarks run alone afterwards).
# Environment: COREAI_TORCH_CXX (the clang++ to compile kernels with, if not on
# PATH); CLANG_DEBS (a folder of Debian clang packages to unpack into
# /tmp/clang and use, for a machine without clang); CC and CXX for building the
# extension (use the GCC torch was built with); PYTHON (default python3); JOBS
# (pytest workers, default: cores / 2); BUDGET_S (seconds for all steps
# together: each step's time limit is cut to what is left).
# Each step's output goes to LOG_DIR/<step>.log, its summary to the terminal
# and to LOG_DIR/summary.txt; the benchmark rows to LOG_DIR/bench.json; at the
# end every log is also packed into LOG_DIR/logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:?usage: test_cuda.sh LOG_DIR [STEP...]}
shift
steps=${*:-build smoke check tests bench demo profile}
mkdir -p "$logs"
py=${PYTHON:-python3}
jobs=${JOBS:-$(($(nproc) / 2))}
export PYTHONUNBUFFERED=1
# The extension is built in place: benchmarks/ scripts import it from here.
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
budget=${BUDGET_S:-0}
status=0

summary() { echo "$*" | tee -a "$logs/summary.txt"; }
pack() { tar -czf "$logs/logs.tar.gz" -C "$logs" --exclude logs.tar.gz . 2>/dev/null; }
trap pack EXIT

if [[ -n "${CLANG_DEBS:-}" ]]; then
  for deb in "$CLANG_DEBS"/*.deb; do dpkg -x "$deb" /tmp/clang; done
  export LD_LIBRARY_PATH=/tmp/clang/usr/lib/x86_64-linux-gnu:/tmp/clang/usr/lib/llvm-19/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export COREAI_TORCH_CXX=/tmp/clang/usr/lib/llvm-19/bin/clang++
fi

run() {  # run NAME LIMIT COMMAND...: runs COMMAND with a time limit, logs it, keeps going
  local name=$1 limit=$2
  shift 2
  if ((budget > 0)); then
    local left=$((budget - SECONDS - 10))
    ((left < limit)) && limit=$left
    if ((limit <= 0)); then
      summary "== $name: not run, the time budget is spent"
      status=1
      return 1
    fi
  fi
  local start=$SECONDS
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  summary "== $name: exit $rc, $((SECONDS - start)) s"
  grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|Error|error:" "$logs/$name.log" | tail -n 12 |
    tee -a "$logs/summary.txt"
  [[ $rc -eq 0 ]] || status=1
  return $rc
}

# The eager suite in device mode, and pytest-xdist's options.
# shellcheck source=scripts/device_suite.sh
. scripts/device_suite.sh

for step in $steps; do
  case $step in
    build) run build 300 "$py" setup.py -q build_ext --inplace || exit 1 ;;
    smoke)
      # Registration crossing into libtorch, a CPU and a CUDA launch.
      run smoke 120 "$py" -c "import torch; from coreai_torch.examples import custom_add as k
x = torch.arange(4.0); c = dict(threads_per_grid=(4, 1, 1), threads_per_thread_group=(4, 1, 1), result_shapes=[[4]])
print(k(x, x, **c), k(x.cuda(), x.cuda(), **c))" || exit 1
      ;;
    check) run check 120 "$py" -m coreai_torch check ;;
    tests)
      run msl 400 env COREAI_TORCH_TEST_DEVICE=cuda "$py" -m pytest -q -rs -p no:cacheprovider \
        "${xdist[@]}" tests/msl &
      msl=$!
      run backend 400 "$py" -m pytest -q -rs -p no:cacheprovider tests/cuda/test_cuda_backend.py \
        tests/cuda/test_steps_form.py \
        tests/cuda/test_cuda_devices.py &
      backend=$!
      run suite 400 env COREAI_TORCH_TEST_DEVICE=cuda "$py" -m pytest -q -rs -p no:cacheprovider \
        "${xdist[@]}" "${suite[@]}"
      wait $msl || status=1
      wait $backend || status=1
      ;;
    bench) run bench 300 "$py" benchmarks/bench_cuda.py --json "$logs/bench.json" ;;
    demo) run demo 120 "$py" -m coreai_torch demo ;;
    profile)
      # Nsight Compute on one launch of each benchmark kernel and of its CUDA
      # C++ twin (docs/cuda.md, "Where the time goes").
      run profile 180 ncu --clock-control none --target-processes all \
        --kernel-name 'regex:^(coreai_cuda_kernel|add|add_vec4|softmax|rms_norm)$' \
        --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy \
        --section InstructionStats --section WarpStateStats --section SchedulerStats \
        "$py" benchmarks/bench_cuda.py --profile
      ;;
    *) summary "unknown step $step" && status=1 ;;
  esac
done
exit $status
