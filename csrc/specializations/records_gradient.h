// The one test of whether autograd records a call, shared by the per-kernel
// ops' Autograd kernel (python/kernel_op.cpp), the eager fast path
// (python/call_args.cpp) and the launch op's Autograd kernel (ops.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>

namespace coreai_torch {

// Whether a call taking `t` must be recorded by autograd: `t` requires grad
// while grad mode is on (reverse mode), or carries a forward-mode tangent
// (level 0, the one forward-AD level torch offers; undefined while forward
// grad mode is off). A call that takes such a tensor past autograd would drop
// its gradient silently.
inline bool records_gradient(const at::Tensor& t) {
  return (at::GradMode::is_enabled() && t.requires_grad()) || t._fw_grad(/*level=*/0).defined();
}

}  // namespace coreai_torch
