// Exposes the kernel contract (contract.h) to Python as coreai_torch._C.contract.
#pragma once
#include <torch/extension.h>

namespace coreai_torch {
void add_contract(pybind11::module_& m);
}  // namespace coreai_torch

