// The C++ kernels of each kernel's op (kernel_op.cpp).
#pragma once

#include <torch/extension.h>

namespace coreai_torch {
// Adds _register_kernel_op_kernels to the module.
void add_kernel_op(pybind11::module_& m);
}  // namespace coreai_torch
