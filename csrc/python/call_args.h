// The arguments of one kernel call from Python, read and checked once.
//
// Every route a call can take reads its arguments here: the C fast path
// (kernel_call.cpp), the op's device kernels and its fake kernel
// (kernel_op.cpp); the C++ API's launch by handle checks the same limits
// (contract.h) on values it is handed typed. Each refusal is a TypeError or
// ValueError that names the kernel and the argument and says what was
// expected and what was given. Values only a trace knows (SymInt, SymFloat)
// are left unchecked and mark the call symbolic: tracing checks them once
// the values exist.
#pragma once

#include <torch/extension.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/util/SmallVector.h>

#include "contract/contract.h"

namespace coreai_torch {

// What a kernel's calls are checked against: its names and argument kinds.
struct CallSignature {
  std::string kernel;
  std::vector<std::string> inputs;   // input names, torch_defn's parameter order
  std::string arg_kinds;             // one ArgKind per input
  std::vector<std::string> results;  // result names
};

struct Call {
  c10::SmallVector<at::Tensor, 8> tensors;
  c10::SmallVector<c10::Scalar, 8> scalars;
  std::array<int64_t, 3> grid{}, group{};
  c10::SmallVector<int64_t, 8> shapes;  // every result's shape, concatenated
  c10::SmallVector<int64_t, 4> ranks;   // each result's rank
  // Values only a trace knows (SymInt, SymFloat): left to the trace.
  bool symbolic = false;
  // Tensors the op must see first: ones autograd records, subclasses (a
  // FakeTensor, a Parameter), lazily negated or conjugated views.
  bool needs_dispatcher = false;
};

// Reads `inputs` (a tuple), `grid`, `group` and `result_shapes` of a call of
// `signature` into `call`; throws c10::TypeError / c10::ValueError for what
// the kernel cannot take.
void read_call(const CallSignature& signature, PyObject* inputs, PyObject* grid, PyObject* group,
               PyObject* result_shapes, Call& call);

}  // namespace coreai_torch
