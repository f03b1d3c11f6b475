# shellcheck shell=bash
# Sourced by scripts/test_cuda.sh and scripts/test_mps.sh, which set `py` and
# `jobs`: the eager suite a GPU run executes in device mode
# (tests/support/kernel_testing.py; every kernel call also runs on the GPU and
# must agree with the CPU backend), and pytest-xdist's options when it is
# installed.
# shellcheck disable=SC2034  # both are read by the scripts that source this
suite=(tests/test_opcheck.py tests/cpu/test_msl_kernels.py tests/corpus
  tests/cpu/test_launch_dispatch.py tests/cpu/test_launch_sync.py
  tests/cpu/test_launch_frontend.py tests/cpu/test_launch_fibers.py tests/test_ranks_and_views.py
  tests/cpu/test_simd_divergence.py tests/test_autograd_training.py)
xdist=()
if "$py" -c "import xdist" 2>/dev/null; then xdist=(-n "$jobs"); fi
