#!/usr/bin/env bash
# The MPS backend's run on a Mac, in one command (docs/mps.md, "Running on a Mac"):
#   bash scripts/test_mps.sh LOG_DIR [STEP...]
# Needs an Apple-silicon Mac with macOS 26, Xcode 26 or its command line tools,
# and a Python with torch 2.13 and this package's test extras installed
# (docs/mps.md says how). Steps (default: all, in this order):
#   machine  the Mac, the SDK, the Python (and the SDK it was built against), torch
#   build    the extension in place, and scripts/mps_compile_probe.mm twice: for
#            this SDK, and recorded as built against the macOS 15 SDK
#   probes   scripts/mps_probes.py: one line per assumption docs/mps.md lists
#   mps      tests/mps with COREAI_TORCH_REQUIRE_MPS=1 (a GPU that cannot run
#            Metal 4 kernels fails instead of skipping), every test's outcome
#   suite    the eager suite and the kernel corpora in device mode on mps: each
#            kernel call also runs on the GPU and must agree with the CPU
#            backend, and the tests' own checks judge the GPU's results against
#            torch_defn and hand-computed values
#   demo     python -m coreai_torch demo (on mps too)
#   bench    benchmarks/bench_mps.py, then benchmarks/run_all.py
# Environment: PYTHON (default python3); JOBS (pytest workers for the suite
# when pytest-xdist is installed, default: cores / 2).
# Each step's output goes to LOG_DIR/<step>.log; LOG_DIR/summary.txt gathers
# what to paste into an issue; every file is also packed into LOG_DIR/logs.tar.gz.
# Written for the bash 3.2 that macOS ships (empty arrays are expanded as
# ${a[@]+"${a[@]}"}, which `set -u` accepts there).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
logs=${1:?usage: test_mps.sh LOG_DIR [STEP...]}
shift
steps=${*:-machine build probes mps suite demo bench}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
py=${PYTHON:-python3}
cores=$(sysctl -n hw.ncpu 2>/dev/null || getconf _NPROCESSORS_ONLN)
jobs=${JOBS:-$((cores / 2))}
export PYTHONUNBUFFERED=1
# The extension is built in place; the tests, probes and benchmarks import it from here.
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MAX_JOBS=${MAX_JOBS:-$cores}
probe=$logs/mps_compile_probe
old_sdk_probe=$logs/mps_compile_probe_sdk15
status=0

summary() { echo "$*" | tee -a "$logs/summary.txt"; }
# shellcheck disable=SC2317  # called by the EXIT trap
pack() { tar -czf "$logs/logs.tar.gz" -C "$logs" --exclude logs.tar.gz . 2>/dev/null; }
trap pack EXIT

# with_limit SECONDS COMMAND...: COMMAND, ended by SIGALRM after SECONDS (macOS
# has no timeout(1); perl ships with it).
with_limit() { perl -e 'alarm shift; exec @ARGV or die "cannot run $ARGV[0]: $!\n"' "$@"; }

note() {  # note NAME RC START: the step's result, and the lines of its log that matter
  summary "== $1: exit $2, $((SECONDS - $3)) s"
  # (probe lines, P<n> ..., are gathered whole by the probes step)
  grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|Error|error:" "$logs/$1.log" | grep -vE "^P[0-9]" |
    tail -n 12 | tee -a "$logs/summary.txt"
  [[ $2 -eq 0 ]] || status=1
  return "$2"
}

run() {  # run NAME LIMIT COMMAND...: runs COMMAND with a time limit, logs it, keeps going
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  with_limit "$limit" "$@" >"$logs/$name.log" 2>&1
  note "$name" $? "$start"
}

machine() {
  sw_vers
  echo "arch: $(uname -m), $(sysctl -n machdep.cpu.brand_string 2>/dev/null), $cores cores"
  echo "SDK: $(xcrun --show-sdk-version 2>&1), $(xcrun clang --version 2>&1 | head -n 1)"
  local exe
  exe=$("$py" -c 'import os, sys; print(os.path.realpath(sys.executable))')
  echo "python: $exe"
  # The SDK the Python was built against decides what macOS shows the process
  # (docs/mps.md, point 7).
  vtool -show-build "$exe" 2>&1 | grep -E "platform|minos|sdk"
  "$py" -c 'import platform, sys, torch
print("python", platform.python_version(), "| torch", torch.__version__,
      "| mps built", torch.backends.mps.is_built(), "| mps available", torch.backends.mps.is_available())'
  git log -1 --format='commit %H (%cs)' 2>/dev/null
  git status --short 2>/dev/null | head -n 20
}

build_probes() {
  xcrun clang++ -std=c++20 -fobjc-arc -Wall -Wextra -Icsrc scripts/mps_compile_probe.mm \
    -framework Metal -framework Foundation -o "$probe" || return 1
  # The same program, its load command saying it was built against the macOS
  # 15 SDK (re-signed: arm64 runs only signed code).
  vtool -set-build-version macos 11.0 15.0 -replace -output "$old_sdk_probe" "$probe" &&
    codesign --force --sign - "$old_sdk_probe" &&
    vtool -show-build "$old_sdk_probe"
}

# Tests whose outcome settles a point of docs/mps.md (the others are probes).
point_tests=(
  "test_rank_zero_results_and_empty_inputs|1 rank-0 result through set/get on the GPU"
  "test_mps_matches_cpu_backend_and_reference\[tiled_matmul|2 body at function scope with threadgroup memory"
  "test_empty_views_pass_metals_api_validation|3 empty views under MTL_DEBUG_LAYER=1"
  "test_compile_error_names_the_kernel_and_the_line_and_is_remembered|4 Metal's compile failure remembered"
  "test_released_kernels_leave_the_pipeline_cache|5 released pipelines erased"
  "test_mps_matches_cpu_backend_and_reference\[broadcast_and_overlapping|6 broadcast and overlapping inputs"
)

# The eager suite in device mode, and pytest-xdist's options.
# shellcheck source=scripts/device_suite.sh
. scripts/device_suite.sh

summary "coreai_torch MPS run, $(date -u '+%Y-%m-%d %H:%M UTC'), steps: $steps"
for step in $steps; do
  case $step in
    machine)
      start=$SECONDS
      machine >"$logs/machine.log" 2>&1
      note machine $? "$start"
      cat "$logs/machine.log" >>"$logs/summary.txt"
      ;;
    build)
      run build 900 "$py" setup.py -q build_ext --inplace || exit 1
      start=$SECONDS
      build_probes >"$logs/compile_probe.log" 2>&1
      note compile_probe $? "$start"
      ;;
    probes)
      old=()
      [[ -x $old_sdk_probe ]] && old=(--old-sdk-probe "$old_sdk_probe")
      run probes 900 "$py" scripts/mps_probes.py "$logs/probe_sources" --probe "$probe" \
        ${old[@]+"${old[@]}"}
      grep -E "^P[0-9]" "$logs/probes.log" >>"$logs/summary.txt"
      ;;
    mps)
      run mps 1200 env COREAI_TORCH_REQUIRE_MPS=1 "$py" -m pytest -rA -p no:cacheprovider tests/mps
      summary "-- points settled by tests/mps:"
      for entry in "${point_tests[@]}"; do
        outcome=$(grep -E "^(PASSED|FAILED|ERROR|SKIPPED).*${entry%%|*}" "$logs/mps.log" |
          cut -d' ' -f1 | sort -u | tr '\n' ' ')
        summary "P${entry#*|}: ${outcome:-not run}"
      done
      ;;
    suite)
      run suite 2400 env COREAI_TORCH_TEST_DEVICE=mps "$py" -m pytest -q -rs -p no:cacheprovider \
        ${xdist[@]+"${xdist[@]}"} "${suite[@]}"
      ;;
    demo) run demo 900 "$py" -m coreai_torch demo --out "$logs/demo_assets" ;;
    bench)
      run bench_mps 1800 "$py" benchmarks/bench_mps.py --json "$logs/bench_mps.json" &&
        grep -E "^(Machine|\|)" "$logs/bench_mps.log" >>"$logs/summary.txt"
      run bench_all 2400 "$py" benchmarks/run_all.py --json "$logs/bench_all.json"
      ;;
    *) summary "unknown step $step" && status=1 ;;
  esac
done
summary "== overall: exit $status"
exit $status
