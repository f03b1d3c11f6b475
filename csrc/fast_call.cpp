#ifndef COREAI_TORCH_NO_PYTHON

#include "fast_call.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "coreai_torch.h"

namespace coreai_torch {
namespace {

constexpr const char* kCapsuleName = "coreai_torch.FastPath";
constexpr int64_t kMaxThreadsPerGroup = 1024;
// Launches of fewer threads take microseconds: they keep the GIL, since
// releasing and retaking it would be a sizeable share of the call.
constexpr int64_t kReleaseGilThreads = int64_t{1} << 16;

// One registered specialization: what a call must match, and what it launches.
struct FastSpecialization {
  std::vector<at::ScalarType> input_dtypes;  // per tensor input
  std::vector<int64_t> input_dims;
  std::vector<int64_t> result_ranks;
  int64_t handle = 0;
  std::vector<at::ScalarType> result_dtypes;
};

// Per kernel: the signature and the specializations of default-option calls.
struct FastPath {
  std::string arg_kinds;  // as registered: 't', 'i', 'f', 'b' per input
  size_t n_results = 0;
  int return_kind = 0;  // 0: a tensor, 1: a tuple, 2: a list
  // A deque never moves its elements, so a launch that runs without the GIL
  // keeps a valid reference while another thread adds a specialization.
  std::deque<FastSpecialization> specializations;
};

FastPath* unpack(PyObject* capsule) {
  return static_cast<FastPath*>(PyCapsule_GetPointer(capsule, kCapsuleName));
}

at::ScalarType dtype_of(const pybind11::handle& obj) {
  TORCH_CHECK_TYPE(THPDtype_Check(obj.ptr()), "expected a torch.dtype");
  return reinterpret_cast<THPDtype*>(obj.ptr())->scalar_type;
}

// A non-negative exact int that fits int64; false for anything else.
bool plain_int(PyObject* obj, int64_t& out) {
  if (!PyLong_CheckExact(obj)) return false;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0 || v < 0) return false;
  out = v;
  return true;
}

bool sequence_items(PyObject* obj, PyObject* const*& items, Py_ssize_t& size) {
  if (PyTuple_CheckExact(obj)) {
    items = &PyTuple_GET_ITEM(obj, 0);
    size = PyTuple_GET_SIZE(obj);
    return true;
  }
  if (PyList_CheckExact(obj)) {
    items = reinterpret_cast<PyListObject*>(obj)->ob_item;  // null when empty
    size = PyList_GET_SIZE(obj);
    return true;
  }
  return false;
}

// Three plain ints, each >= minimum (the general path reports anything else).
bool triple(PyObject* obj, int64_t minimum, std::array<int64_t, 3>& out) {
  PyObject* const* items = nullptr;
  Py_ssize_t size = 0;
  if (!sequence_items(obj, items, size) || size != 3) return false;
  for (int d = 0; d < 3; ++d) {
    if (!plain_int(items[d], out[d]) || out[d] < minimum) return false;
  }
  return true;
}

// Returns a new reference: the results shaped as torch_defn returns them, or
// None when the call needs the general path. Raises only for launch errors.
PyObject* fast_launch(PyObject* /*self*/, PyObject* const* argv, Py_ssize_t argc) {
  HANDLE_TH_ERRORS
  if (argc != 5) {
    PyErr_SetString(PyExc_TypeError,
                    "_fast_launch(path, inputs, grid, group, result_shapes) takes 5 arguments");
    return nullptr;
  }
  FastPath* path = unpack(argv[0]);
  if (path == nullptr) return nullptr;
  PyObject* inputs = argv[1];
  const std::string& kinds = path->arg_kinds;
  if (!PyTuple_CheckExact(inputs) || PyTuple_GET_SIZE(inputs) != static_cast<Py_ssize_t>(kinds.size())) {
    Py_RETURN_NONE;
  }
  // Modes, tracing and autograd all need the op (see _plain_eager in kernel.py).
  // So do functorch transforms (vmap, grad), which add keys to the thread's
  // included dispatch keys (autocast and plain eager add none).
  if (c10::impl::TorchDispatchModeTLS::stack_len() > 0 ||
      at::impl::PythonTorchFunctionTLS::stack_len() > 0 ||
      !(c10::impl::tls_local_dispatch_key_set().included_ - c10::default_included_set).empty()) {
    Py_RETURN_NONE;
  }
  const bool grad = at::GradMode::is_enabled();

  c10::SmallVector<at::Tensor, 8> tensors;
  c10::SmallVector<c10::Scalar, 8> scalars;
  for (size_t i = 0; i < kinds.size(); ++i) {
    PyObject* obj = PyTuple_GET_ITEM(inputs, static_cast<Py_ssize_t>(i));
    switch (kinds[i]) {
      case 't': {
        if (!THPVariable_CheckExact(obj)) Py_RETURN_NONE;
        const at::Tensor& t = THPVariable_Unpack(obj);
        if (!t.defined() || (grad && t.requires_grad()) ||
            t.key_set().has(c10::DispatchKey::Python)) {
          Py_RETURN_NONE;
        }
        const at::Device device = t.device();
        if (!(device.is_cpu() || device.is_mps() || device.is_cuda())) Py_RETURN_NONE;
        if (!tensors.empty() && device != tensors[0].device()) Py_RETURN_NONE;
        tensors.push_back(t);
        break;
      }
      case 'i': {
        if (!PyLong_CheckExact(obj)) Py_RETURN_NONE;
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow != 0 || v < std::numeric_limits<int32_t>::min() ||
            v > std::numeric_limits<int32_t>::max()) {
          Py_RETURN_NONE;
        }
        scalars.emplace_back(static_cast<int64_t>(v));
        break;
      }
      case 'f': {
        if (!PyFloat_CheckExact(obj)) Py_RETURN_NONE;
        const double v = PyFloat_AS_DOUBLE(obj);
        if (!std::isfinite(v)) Py_RETURN_NONE;
        scalars.emplace_back(v);
        break;
      }
      case 'b':
        if (obj != Py_True && obj != Py_False) Py_RETURN_NONE;
        scalars.emplace_back(obj == Py_True);
        break;
      default:
        Py_RETURN_NONE;
    }
  }

  std::array<int64_t, 3> grid{}, group{};
  if (!triple(argv[2], 0, grid) || !triple(argv[3], 1, group)) Py_RETURN_NONE;
  // Each entry is checked first so that the product cannot overflow.
  for (int64_t g : group) {
    if (g > kMaxThreadsPerGroup) Py_RETURN_NONE;
  }
  if (group[0] * group[1] * group[2] > kMaxThreadsPerGroup) Py_RETURN_NONE;

  PyObject* const* shapes = nullptr;
  Py_ssize_t n_shapes = 0;
  if (!sequence_items(argv[4], shapes, n_shapes) ||
      n_shapes != static_cast<Py_ssize_t>(path->n_results)) {
    Py_RETURN_NONE;
  }
  c10::SmallVector<int64_t, 8> flat;
  c10::SmallVector<int64_t, 4> ranks;
  for (Py_ssize_t k = 0; k < n_shapes; ++k) {
    PyObject* const* dims = nullptr;
    Py_ssize_t rank = 0;
    if (!sequence_items(shapes[k], dims, rank) || rank == 0) Py_RETURN_NONE;
    for (Py_ssize_t d = 0; d < rank; ++d) {
      int64_t v = 0;
      if (!plain_int(dims[d], v)) Py_RETURN_NONE;
      flat.push_back(v);
    }
    ranks.push_back(rank);
  }

  const FastSpecialization* spec = nullptr;
  for (const FastSpecialization& s : path->specializations) {
    bool match = std::equal(s.result_ranks.begin(), s.result_ranks.end(), ranks.begin(),
                            ranks.end());
    for (size_t j = 0; match && j < tensors.size(); ++j) {
      match = tensors[j].scalar_type() == s.input_dtypes[j] && tensors[j].dim() == s.input_dims[j];
    }
    if (match) {
      spec = &s;
      break;
    }
  }
  if (spec == nullptr) Py_RETURN_NONE;  // a new specialization: registered by the general path

  std::vector<at::Tensor> outs;
  if (static_cast<double>(grid[0]) * static_cast<double>(grid[1]) * static_cast<double>(grid[2]) <
      kReleaseGilThreads) {
    outs = launch(spec->handle, tensors, scalars, grid, group, flat, ranks, spec->result_dtypes);
  } else {
    pybind11::gil_scoped_release no_gil;
    outs = launch(spec->handle, tensors, scalars, grid, group, flat, ranks, spec->result_dtypes);
  }
  if (path->return_kind == 0) return THPVariable_Wrap(std::move(outs[0]));
  PyObject* result = path->return_kind == 1 ? PyTuple_New(static_cast<Py_ssize_t>(outs.size()))
                                            : PyList_New(static_cast<Py_ssize_t>(outs.size()));
  if (result == nullptr) return nullptr;
  for (size_t k = 0; k < outs.size(); ++k) {
    PyObject* item = THPVariable_Wrap(std::move(outs[k]));
    if (item == nullptr) {
      Py_DECREF(result);
      return nullptr;
    }
    if (path->return_kind == 1) {
      PyTuple_SET_ITEM(result, static_cast<Py_ssize_t>(k), item);
    } else {
      PyList_SET_ITEM(result, static_cast<Py_ssize_t>(k), item);
    }
  }
  return result;
  END_HANDLE_TH_ERRORS
}

PyMethodDef kFastLaunchDef = {
    "_fast_launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_launch)),
    METH_FASTCALL,
    "_fast_launch(path, inputs, grid, group, result_shapes): the launched results, or None "
    "when the call needs the general path."};

}  // namespace

void add_fast_call(pybind11::module_& m) {
  namespace py = pybind11;
  m.def(
      "_fast_path_new",
      [](std::string arg_kinds, size_t n_results, int return_kind) {
        TORCH_CHECK(return_kind >= 0 && return_kind <= 2, "bad return kind ", return_kind);
        auto* path = new FastPath{std::move(arg_kinds), n_results, return_kind, {}};
        return py::capsule(path, kCapsuleName,
                           [](PyObject* c) { delete unpack(c); });
      },
      py::arg("arg_kinds"), py::arg("n_results"), py::arg("return_kind"),
      "A kernel's fast-path state: its arg_kinds, result count and return kind "
      "(0 tensor, 1 tuple, 2 list).");
  m.def(
      "_fast_path_add",
      [](py::capsule capsule, py::list input_dtypes, std::vector<int64_t> input_dims,
         std::vector<int64_t> result_ranks, int64_t handle, py::list result_dtypes) {
        FastPath* path = unpack(capsule.ptr());
        if (path == nullptr) throw py::error_already_set();
        FastSpecialization s;
        for (const auto& d : input_dtypes) s.input_dtypes.push_back(dtype_of(d));
        for (const auto& d : result_dtypes) s.result_dtypes.push_back(dtype_of(d));
        const size_t n_tensors = static_cast<size_t>(
            std::count(path->arg_kinds.begin(), path->arg_kinds.end(), 't'));
        TORCH_CHECK(s.input_dtypes.size() == n_tensors && input_dims.size() == n_tensors &&
                        result_ranks.size() == path->n_results &&
                        s.result_dtypes.size() == path->n_results,
                    "_fast_path_add: argument counts do not match the kernel's signature");
        s.input_dims = std::move(input_dims);
        s.result_ranks = std::move(result_ranks);
        s.handle = handle;
        path->specializations.push_back(std::move(s));
      },
      "Lets later default-option calls of this specialization launch `handle` directly.");
  m.add_object("_fast_launch",
               py::reinterpret_steal<py::object>(PyCFunction_NewEx(&kFastLaunchDef, nullptr,
                                                                    nullptr)));
}

}  // namespace coreai_torch

#endif  // COREAI_TORCH_NO_PYTHON
