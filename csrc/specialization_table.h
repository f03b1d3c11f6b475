// A TorchMetalKernel's specializations, and its eager calls from Python
// (coreai_torch/kernel.py). The table holds the kernel's registered handles
// (one use each, given back when the kernel object is collected) and launches
// a call that matches one of them straight from C++, without the dispatcher's
// boxing of coreai_torch::launch's list arguments. A call it cannot take
// returns None and the Python front end takes the op, which raises every
// documented error.
#pragma once
#ifndef COREAI_TORCH_NO_PYTHON

#include <torch/extension.h>

namespace coreai_torch {
// Adds _specializations_new, _specializations_add, _specializations_handle,
// _launch and _launch_registered to the module.
void add_specialization_table(pybind11::module_& m);

// What _launch(table, options, inputs, grid, group, result_shapes) returns for
// these six arguments: the shaped results (new reference), None when the call
// needs the op, or nullptr with a Python error set.
PyObject* launch_plain_call(PyObject* const* argv);
}  // namespace coreai_torch

#endif  // COREAI_TORCH_NO_PYTHON
