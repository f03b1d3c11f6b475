// Public C++ surface of coreai_torch: register a rendered kernel specialization
// once, then launch it by handle. docs/internals.md describes the arguments.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace coreai_torch {

// Bits of KernelRecord::options.
constexpr int64_t kOptionDebug = 1;     // CPU: bounds checks and unwritten-result report
constexpr int64_t kOptionFastMath = 2;  // MPS, CUDA: compile with fast math instead of safe math

// One rendered specialization, as registered. Immutable once registered.
struct KernelRecord {
  std::string name;    // the user's kernel name, for messages
  std::string source;  // the buffer rendering (Metal source)
  std::string entry;   // the kernel function's name in `source`
  std::string arg_kinds;  // per kernel input: 't' tensor, 'i' int, 'f' float, 'b' bool
  std::vector<std::string> tensor_names;  // tensor inputs, then results
  std::vector<std::string> thread_attrs;  // attribute of each metal_params entry
  int64_t options = 0;
};

// Returns the handle of `record`; an identical record gets the same handle.
int64_t register_kernel(KernelRecord record);

// The record behind a handle (throws for an unknown handle).
const KernelRecord& kernel_record(int64_t handle);

// Allocates the results and runs the kernel on the device of `tensors`
// (CPU, CUDA or MPS). See docs/internals.md for the meaning of each argument.
std::vector<at::Tensor> launch(
    int64_t handle,
    at::TensorList tensors,
    c10::ArrayRef<c10::Scalar> scalars,
    at::IntArrayRef grid,
    at::IntArrayRef group,
    at::IntArrayRef result_shapes,
    at::IntArrayRef result_ranks,
    c10::ArrayRef<at::ScalarType> result_dtypes);

}  // namespace coreai_torch
