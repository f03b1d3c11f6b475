// KernelCall, the base type of TorchMetalKernel (coreai_torch/kernel.py): its
// instances are called by vectorcall; a call that may launch directly is
// launched without running the Python __call__ (kernel_call.cpp).
#pragma once

#include <torch/extension.h>

namespace coreai_torch {
// Adds the type KernelCall and _kernel_call_install to the module.
void add_kernel_call(pybind11::module_& m);
}  // namespace coreai_torch
