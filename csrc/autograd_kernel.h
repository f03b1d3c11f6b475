// The C++ Autograd kernel of the per-kernel ops (autograd_kernel.cpp).
#pragma once
#ifndef COREAI_TORCH_NO_PYTHON

#include <torch/extension.h>

#include "records_gradient.h"

namespace coreai_torch {

// Adds _register_autograd_kernel to the module.
void add_autograd_kernel(pybind11::module_& m);

}  // namespace coreai_torch

#endif  // COREAI_TORCH_NO_PYTHON
