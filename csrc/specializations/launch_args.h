// What a backend receives for one launch: everything already validated,
// results already allocated, metadata already built (docs/internals.md).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <vector>

#include "coreai_torch.h"

namespace coreai_torch {

// One kernel parameter in signature order (inputs, then results).
struct BoundArg {
  enum class Kind : uint8_t { Tensor, Int, Float, Bool };
  Kind kind;
  at::Tensor tensor;      // Kind::Tensor (inputs and results)
  int32_t int_value = 0;  // Kind::Int   (Metal `int`, 4 bytes)
  float float_value = 0;  // Kind::Float (Metal `float`, 4 bytes)
  bool bool_value = false;  // Kind::Bool (Metal `bool`, 1 byte)
};

struct LaunchArgs {
  std::vector<BoundArg> args;  // kernel inputs then results, signature order
  std::vector<int32_t> meta;   // the coreai_meta buffer (never empty)
  std::array<uint32_t, 3> grid;   // threads per grid
  std::array<uint32_t, 3> group;  // threads per threadgroup
  size_t num_results = 0;         // the last num_results args are the results
};

// What launch_record checks before running: everything (a launch through the
// op or the C++ API), or only what matching a registered specialization has
// not already established (the Python fast path, specializations.cpp, which
// has matched every tensor's device, dtype and rank, every scalar's kind and
// the grid and threadgroup before it calls).
enum class LaunchChecks { All, AfterMatch };

// Checks a launch of `record` (see `checks`), allocates its results, builds its
// metadata and runs it on the backend of the tensors' device.
std::vector<at::Tensor> launch_record(int64_t handle, const KernelRecord& record,
                                      at::TensorList tensors, c10::ArrayRef<c10::Scalar> scalars,
                                      at::IntArrayRef grid, at::IntArrayRef group,
                                      at::IntArrayRef result_shapes, LaunchChecks checks);

// The results of a launch of `record` as meta tensors (for tracing), after
// every check a launch makes.
std::vector<at::Tensor> launch_meta(const KernelRecord& record, at::TensorList tensors,
                                    c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid,
                                    at::IntArrayRef group, at::IntArrayRef result_shapes);

namespace cpu {
// Runs `args` on the CPU backend (csrc/cpu/). Compiles on first use.
void run(int64_t handle, const KernelRecord& record, LaunchArgs& args);
}  // namespace cpu

namespace cuda {
// Launches `args` on the current CUDA stream of the tensors' device
// (csrc/cuda/), without waiting for it. Compiles on first use.
void run(int64_t handle, const KernelRecord& record, LaunchArgs& args);
// Whether `module` (a record's CUDA artifact) is loaded on CUDA device `device`.
bool loaded_on(const KernelModule& module, int device);
}  // namespace cuda

#ifdef COREAI_TORCH_WITH_MPS
namespace mps {
// Encodes `args` on the current MPS stream (csrc/mps/). Compiles on first use.
void run(int64_t handle, const KernelRecord& record, LaunchArgs& args);
}  // namespace mps
#endif

}  // namespace coreai_torch
