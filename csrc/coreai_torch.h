// Public C++ surface of coreai_torch: register a rendered kernel specialization
// once, launch it by handle, release it when done. docs/internals.md §2
// describes the arguments; contract.h holds the contract's constants.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "specializations/artifact_slot.h"
#include "contract/contract.h"

namespace coreai_torch {

// One kernel input or result of a specialization.
struct ArgSpec {
  std::string name;
  ArgKind kind = ArgKind::Tensor;  // results are always tensors
  at::ScalarType dtype = at::ScalarType::Undefined;  // tensors only
  int64_t rank = 0;                                  // tensors only
};

// Everything one specialization fixes: the rendered source and entry, every
// argument's kind, dtype and rank, the thread attributes and the options.
struct KernelSpec {
  std::string name;    // the user's kernel name, for messages
  std::string source;  // the buffer rendering (Metal source)
  std::string entry;   // the kernel function's name in `source`
  std::vector<ArgSpec> inputs;            // kernel inputs, signature order
  std::vector<ArgSpec> results;           // results, signature order
  std::vector<std::string> thread_attrs;  // attribute of each metal_params entry
  int64_t options = 0;                    // kOption* bits
};

// What a backend compiled for a specialization, one slot per backend.
namespace cpu {
struct KernelLibrary;
}
namespace cuda {
class KernelModule;
}
namespace mps {
struct Pipeline;
}
struct BackendArtifacts {
  ArtifactSlot<cpu::KernelLibrary> cpu;
  ArtifactSlot<cuda::KernelModule> cuda;  // the kernel loaded on each GPU that ran it
  ArtifactSlot<mps::Pipeline> mps;        // filled in macOS builds only
  // Whether a launch on `device` finds its artifact already built.
  bool ready(const at::Device& device) const;
};

// A registered specialization: the spec, what is derived from it, and the
// backends' artifacts. Shared by the registry and every launch in flight, so
// its artifacts (a loaded library, a pipeline) go when the last user lets go.
struct KernelRecord : KernelSpec {
  explicit KernelRecord(KernelSpec spec);
  KernelRecord(const KernelRecord&) = delete;
  KernelRecord& operator=(const KernelRecord&) = delete;

  std::string arg_kinds;                  // one ArgKind character per input
  std::vector<std::string> tensor_names;  // tensor inputs, then results
  std::vector<int64_t> tensor_ranks;      // of the same tensors
  size_t tensor_inputs = 0;               // how many inputs are tensors
  MetaLayout layout;                      // the coreai_meta buffer of every launch
  mutable BackendArtifacts artifacts;
};

// Checks `spec` (ValueError/TypeError naming the kernel and the argument) and
// returns its handle; an identical spec gets the same handle. Each call counts
// one use of the handle, and release_kernel gives one back. Nothing is
// compiled here: a backend compiles on its first launch.
int64_t register_kernel(KernelSpec spec);

// Gives back one use of `handle`. When none is left, the handle is unknown
// from then on and the record goes once the launches still using it end; what
// the backends compiled for it is unloaded with it.
void release_kernel(int64_t handle);

// The record behind a handle (ValueError for an unknown or released handle).
std::shared_ptr<const KernelRecord> kernel_record(int64_t handle);

// Allocates the results and runs the kernel on the device of `tensors` (CPU,
// CUDA, or MPS in macOS builds; meta tensors only allocate). Every tensor's device,
// dtype and rank and every scalar's kind is checked against the record
// (ValueError/TypeError naming the kernel and the argument). `result_shapes`
// is every result's shape concatenated, split by the record's result ranks.
std::vector<at::Tensor> launch(int64_t handle, at::TensorList tensors,
                               c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid,
                               at::IntArrayRef group, at::IntArrayRef result_shapes);

}  // namespace coreai_torch
