// The eager fast path of TorchMetalKernel.__call__ (coreai_torch/kernel.py):
// a plain call on CPU, CUDA or MPS tensors of an already registered specialization
// is checked and launched here, without the dispatcher's boxing of the eight
// list arguments of coreai_torch::launch. Anything else returns None and the
// Python front end takes its general path, which raises every documented error.
#pragma once
#ifndef COREAI_TORCH_NO_PYTHON

#include <torch/extension.h>

namespace coreai_torch {
// Adds _fast_path_new, _fast_path_add and _fast_launch to the module.
void add_fast_call(pybind11::module_& m);
}  // namespace coreai_torch

#endif  // COREAI_TORCH_NO_PYTHON
