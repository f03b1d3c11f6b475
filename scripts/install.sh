#!/usr/bin/env bash
# Installs coreai_torch and what it needs on a Debian/Ubuntu machine.
#   bash scripts/install.sh          # the package, torch 2.13.0 and clang for the CPU backend
#   bash scripts/install.sh --test   # also the test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
if [[ "${1:-}" == "--test" ]]; then extras="[test]"; fi

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# The CPU backend compiles Metal kernels as C++23 with clang (15 or newer); the
# C++ tests and the benchmark harness (built by --test) need cmake.
packages=()
have_clang=""
for cxx in "${COREAI_TORCH_CXX:-}" clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++; do
  if [[ -n "$cxx" ]] && command -v "$cxx" >/dev/null 2>&1; then have_clang="$cxx"; break; fi
done
[[ -n "$have_clang" ]] || packages+=(clang-19)
[[ -n "$extras" ]] && ! command -v cmake >/dev/null 2>&1 && packages+=(cmake)
if (( ${#packages[@]} )); then
  if command -v apt-get >/dev/null 2>&1; then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  else
    echo "Missing ${packages[*]}: install clang 15 or newer (or Xcode's command line tools)" \
      "and cmake, then rerun." >&2
    exit 1
  fi
fi

python -m pip install -q "torch==2.13.0"
# --no-build-isolation: the extension must be compiled against the torch installed above.
python -m pip install -q --no-build-isolation -e ".${extras}"

# The tests compile every kernel for NVIDIA GPUs (tests/support/ptx_check.py),
# which needs NVIDIA's libdevice and ptxas but no GPU: take them from PyPI when
# no CUDA toolkit provides them.
if [[ -n "$extras" ]]; then
  cuda_root=${CUDA_HOME:-/usr/local/cuda}
  [[ -f "$cuda_root/nvvm/libdevice/libdevice.10.bc" ]] || python -m pip install -q nvidia-nvvm
  command -v ptxas >/dev/null 2>&1 || [[ -x "$cuda_root/bin/ptxas" ]] ||
    python -m pip install -q nvidia-cuda-nvcc
  # The C++ tests and the benchmark harness link one build of csrc/ (build/cpp);
  # the test run then only rebuilds what changed.
  python scripts/cpp_build.py >/dev/null
fi
