// What the CUDA backend compiles kernels with: the CPU backend's clang, run in
// CUDA device mode for NVPTX, and libdevice, NVIDIA's math library as LLVM
// bitcode (docs/cuda.md, "Toolchain").
#pragma once

#include <string>
#include <vector>

#include "jit/compiler.h"

namespace coreai_torch::cuda {

struct Toolchain {
  jit::Compiler compiler;      // clang (jit::find_compiler), as for the CPU backend
  std::string libdevice;       // path of libdevice.10.bc
  std::string libdevice_identity;  // path, size and modification time: part of cache keys
};

// The toolchain, searched once per process. Throws a c10::Error naming
// `kernel`, each place searched and how to install what is missing.
const Toolchain& toolchain(const std::string& kernel);

// Where libdevice.10.bc is, in this order: $COREAI_TORCH_LIBDEVICE (the file,
// or a directory holding it; when set it must exist), $CUDA_HOME and
// $CUDA_PATH (nvvm/libdevice/), /usr/local/cuda/nvvm/libdevice/, then the
// Python packages installed beside torch: nvidia-nvvm (nvidia/cu13/nvvm/
// libdevice/), nvidia-cuda-nvcc-cu12 (nvidia/cuda_nvcc/nvvm/libdevice/) and
// Triton (triton/backends/nvidia/lib/). Empty if none; `tried` lists what was
// looked at.
std::string find_libdevice(std::string* tried);

// The clang target for a GPU of compute capability major.minor: sm_XY, capped
// at the newest architecture the backend compiles for (sm_90); the driver
// compiles the PTX of an older architecture for newer GPUs.
std::string gpu_arch(int major, int minor);

// The flags every kernel (and the prelude's precompiled header) is compiled
// with for `arch`, before the output and input names.
std::vector<std::string> device_compile_flags(const Toolchain& tc, const std::string& arch,
                                              bool fast_math);

// The flags that compile a kernel's optimized LLVM IR (what
// device_compile_flags give with -emit-llvm) to PTX for `arch`, code
// generation only, before the output and input names: unchanged, the IR
// gives the PTX that a direct compile of the source gives.
std::vector<std::string> ir_compile_flags(const std::string& arch, bool fast_math);

}  // namespace coreai_torch::cuda
