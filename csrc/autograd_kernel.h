// The C++ Autograd kernel of the per-kernel ops (autograd_kernel.cpp), and the
// one test of whether autograd records a call, which the eager fast path
// (specialization_table.cpp) shares.
#pragma once
#ifndef COREAI_TORCH_NO_PYTHON

#include <ATen/core/grad_mode.h>
#include <torch/extension.h>

namespace coreai_torch {

// Whether a call taking `t` must be recorded by autograd: `t` requires grad
// while grad mode is on (reverse mode), or carries a forward-mode tangent
// (level 0, the one forward-AD level torch offers; undefined while forward
// grad mode is off). A call that takes such a tensor past autograd would drop
// its gradient silently.
inline bool records_gradient(const at::Tensor& t) {
  return (at::GradMode::is_enabled() && t.requires_grad()) || t._fw_grad(/*level=*/0).defined();
}

// Adds _register_autograd_kernel to the module.
void add_autograd_kernel(pybind11::module_& m);

}  // namespace coreai_torch

#endif  // COREAI_TORCH_NO_PYTHON
