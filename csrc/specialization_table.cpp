#ifndef COREAI_TORCH_NO_PYTHON

#include "specialization_table.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "coreai_torch.h"
#include "launch_args.h"
#include "records_gradient.h"

namespace coreai_torch {
namespace {

constexpr const char* kCapsuleName = "coreai_torch.SpecializationTable";
// Launches of fewer threads take microseconds: they keep the GIL, since
// releasing and retaking it would be a sizeable share of the call. Launches
// that compile first release it too.
constexpr int64_t kReleaseGilThreads = int64_t{1} << 16;

// Tensors whose memory does not hold their values (a lazily negated or
// conjugated view, a ZeroTensor), and tensor subclasses: the dispatcher
// resolves the first kind before the op's kernel runs and hands the second to
// its Python handler, so such a call takes the op. Sparse, mkldnn and nested
// tensors have no strided memory a kernel can read: the call's checks
// (call_checks.py) refuse them.
const c10::DispatchKeySet kNeedsDispatcher{
    c10::DispatchKey::Negative, c10::DispatchKey::Conjugate,  c10::DispatchKey::ZeroTensor,
    c10::DispatchKey::Python,   c10::DispatchKey::Sparse,     c10::DispatchKey::SparseCsr,
    c10::DispatchKey::MkldnnCPU, c10::DispatchKey::NestedTensor};

// One registered specialization: what a call must match, and what it launches.
struct Entry {
  int64_t options = 0;
  std::vector<at::ScalarType> input_dtypes;  // per tensor input
  std::vector<int64_t> input_ranks;
  std::vector<int64_t> result_ranks;
  int64_t handle = 0;
  std::shared_ptr<const KernelRecord> record;
};

struct SpecializationTable {
  std::string arg_kinds;  // the kernel's signature: one ArgKind per input
  size_t n_results = 0;
  ReturnKind return_kind = ReturnKind::Tensor;
  // A deque never moves its elements, so a launch that runs without the GIL
  // keeps a valid reference while another thread adds a specialization.
  std::deque<Entry> entries;

  ~SpecializationTable() {
    for (const Entry& e : entries) release_kernel(e.handle);
  }
};

SpecializationTable* unpack(PyObject* capsule) {
  return static_cast<SpecializationTable*>(PyCapsule_GetPointer(capsule, kCapsuleName));
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

// Three plain ints, each in [minimum, maximum] (the op reports anything else).
bool triple(PyObject* obj, int64_t minimum, int64_t maximum, std::array<int64_t, 3>& out) {
  PyObject* const* items = nullptr;
  Py_ssize_t size = 0;
  if (!sequence_items(obj, items, size) || size != 3) return false;
  for (int d = 0; d < 3; ++d) {
    if (!plain_int(items[d], out[d]) || out[d] < minimum || out[d] > maximum) return false;
  }
  return true;
}

// A call's arguments, checked against the kernel's signature.
struct Call {
  c10::SmallVector<at::Tensor, 8> tensors;
  c10::SmallVector<c10::Scalar, 8> scalars;
  std::array<int64_t, 3> grid{}, group{};
  c10::SmallVector<int64_t, 8> shapes;  // every result's shape, concatenated
  c10::SmallVector<int64_t, 4> ranks;   // each result's rank
};

// Reads `inputs`, `grid`, `group` and `result_shapes`; false when the call
// needs the op: a value of another type than the signature's, an int outside
// Metal's int, a float outside Metal's float (inf, nan, 1e39), a tensor the
// dispatcher must see first, a tensor that autograd records (`plain_only`),
// tensors on several devices or one without a backend, a grid or threadgroup
// out of range.
bool read_call(const SpecializationTable& table, PyObject* inputs, PyObject* grid,
               PyObject* group, PyObject* result_shapes, bool plain_only, Call& call) {
  const std::string& kinds = table.arg_kinds;
  if (!PyTuple_CheckExact(inputs) ||
      PyTuple_GET_SIZE(inputs) != static_cast<Py_ssize_t>(kinds.size())) {
    return false;
  }
  for (size_t i = 0; i < kinds.size(); ++i) {
    PyObject* obj = PyTuple_GET_ITEM(inputs, static_cast<Py_ssize_t>(i));
    switch (static_cast<ArgKind>(kinds[i])) {
      case ArgKind::Tensor: {
        if (!THPVariable_CheckExact(obj)) return false;
        const at::Tensor& t = THPVariable_Unpack(obj);
        if (!t.defined() || (plain_only && records_gradient(t)) ||
            t.key_set().has_any(kNeedsDispatcher)) {
          return false;
        }
        const at::Device device = t.device();
        if (!(device.is_cpu() || device.is_cuda() || device.is_mps())) return false;
        if (!call.tensors.empty() && device != call.tensors[0].device()) return false;
        call.tensors.push_back(t);
        break;
      }
      case ArgKind::Int: {
        if (!PyLong_CheckExact(obj)) return false;
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow != 0 || v < kScalarIntMin || v > kScalarIntMax) return false;
        call.scalars.emplace_back(static_cast<int64_t>(v));
        break;
      }
      case ArgKind::Float: {
        if (!PyFloat_CheckExact(obj)) return false;
        const double v = PyFloat_AS_DOUBLE(obj);
        // Also false for inf and nan: a value float cannot hold is refused.
        if (!(std::fabs(v) <= kScalarFloatMax)) return false;
        call.scalars.emplace_back(v);
        break;
      }
      case ArgKind::Bool:
        if (obj != Py_True && obj != Py_False) return false;
        call.scalars.emplace_back(obj == Py_True);
        break;
      default:
        return false;
    }
  }

  if (!triple(grid, 0, UINT32_MAX, call.grid) ||
      !triple(group, 1, kMaxThreadsPerThreadgroup, call.group) ||
      call.group[0] * call.group[1] * call.group[2] > kMaxThreadsPerThreadgroup) {
    return false;
  }

  PyObject* const* shapes = nullptr;
  Py_ssize_t n_shapes = 0;
  if (!sequence_items(result_shapes, shapes, n_shapes) ||
      n_shapes != static_cast<Py_ssize_t>(table.n_results)) {
    return false;
  }
  for (Py_ssize_t k = 0; k < n_shapes; ++k) {
    PyObject* const* dims = nullptr;
    Py_ssize_t rank = 0;
    if (!sequence_items(shapes[k], dims, rank)) return false;
    for (Py_ssize_t d = 0; d < rank; ++d) {
      int64_t v = 0;
      if (!plain_int(dims[d], v)) return false;
      call.shapes.push_back(v);
    }
    call.ranks.push_back(rank);
  }
  return true;
}

const Entry* find(const SpecializationTable& table, int64_t options,
                  c10::ArrayRef<at::Tensor> tensors, c10::ArrayRef<int64_t> ranks) {
  for (const Entry& e : table.entries) {
    bool match = e.options == options && std::equal(e.result_ranks.begin(), e.result_ranks.end(),
                                                    ranks.begin(), ranks.end());
    for (size_t j = 0; match && j < tensors.size(); ++j) {
      match = tensors[j].scalar_type() == e.input_dtypes[j] && tensors[j].dim() == e.input_ranks[j];
    }
    if (match) return &e;
  }
  return nullptr;
}

PyObject* shaped_results(const SpecializationTable& table, std::vector<at::Tensor> outs) {
  if (table.return_kind == ReturnKind::Tensor) return THPVariable_Wrap(std::move(outs[0]));
  const bool tuple = table.return_kind == ReturnKind::Tuple;
  const auto n = static_cast<Py_ssize_t>(outs.size());
  PyObject* result = tuple ? PyTuple_New(n) : PyList_New(n);
  if (result == nullptr) return nullptr;
  for (Py_ssize_t k = 0; k < n; ++k) {
    PyObject* item = THPVariable_Wrap(std::move(outs[k]));
    if (item == nullptr) {
      Py_DECREF(result);
      return nullptr;
    }
    if (tuple) {
      PyTuple_SET_ITEM(result, k, item);
    } else {
      PyList_SET_ITEM(result, k, item);
    }
  }
  return result;
}

// _launch / _launch_registered(table, options, inputs, grid, group, result_shapes):
// the shaped results, or None when the call needs the op (or, for a
// specialization not registered yet, a registration first).
PyObject* launch_call(PyObject* const* argv, Py_ssize_t argc, bool plain_only) {
  if (argc != 6) {
    PyErr_SetString(PyExc_TypeError,
                    "_launch(table, options, inputs, grid, group, result_shapes) takes 6 "
                    "arguments");
    return nullptr;
  }
  const SpecializationTable* table = unpack(argv[0]);
  if (table == nullptr) return nullptr;
  const long options = PyLong_AsLong(argv[1]);
  if (options == -1 && PyErr_Occurred()) return nullptr;
  // Modes, tracing and functorch transforms (vmap, grad, which add keys to
  // the thread's included dispatch keys; autocast and plain eager add none)
  // all need the op.
  if (plain_only &&
      (c10::impl::TorchDispatchModeTLS::stack_len() > 0 ||
       at::impl::PythonTorchFunctionTLS::stack_len() > 0 ||
       !(c10::impl::tls_local_dispatch_key_set().included_ - c10::default_included_set)
            .empty())) {
    Py_RETURN_NONE;
  }
  Call call;
  if (!read_call(*table, argv[2], argv[3], argv[4], argv[5], plain_only, call)) Py_RETURN_NONE;
  const Entry* entry = find(*table, options, call.tensors, call.ranks);
  if (entry == nullptr) Py_RETURN_NONE;

  std::shared_ptr<const KernelRecord> record = entry->record;  // held for the launch
  const at::Device device = call.tensors.empty() ? at::Device(at::kCPU) : call.tensors[0].device();
  // A CUDA launch only enqueues the kernel: it keeps the GIL whatever its size.
  const bool small = device.is_cuda() ||
                     static_cast<double>(call.grid[0]) * static_cast<double>(call.grid[1]) *
                             static_cast<double>(call.grid[2]) <
                         kReleaseGilThreads;
  std::vector<at::Tensor> outs;
  if (small && record->artifacts.ready(device)) {
    outs = launch_record(entry->handle, *record, call.tensors, call.scalars, call.grid,
                         call.group, call.shapes, LaunchChecks::AfterMatch);
  } else {
    pybind11::gil_scoped_release no_gil;
    outs = launch_record(entry->handle, *record, call.tensors, call.scalars, call.grid,
                         call.group, call.shapes, LaunchChecks::AfterMatch);
  }
  return shaped_results(*table, std::move(outs));
}

PyObject* launch_plain(PyObject* /*self*/, PyObject* const* argv, Py_ssize_t argc) {
  HANDLE_TH_ERRORS
  return launch_call(argv, argc, /*plain_only=*/true);
  END_HANDLE_TH_ERRORS
}

PyObject* launch_registered(PyObject* /*self*/, PyObject* const* argv, Py_ssize_t argc) {
  HANDLE_TH_ERRORS
  return launch_call(argv, argc, /*plain_only=*/false);
  END_HANDLE_TH_ERRORS
}

PyMethodDef kLaunchDefs[] = {
    {"_launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&launch_plain)),
     METH_FASTCALL,
     "_launch(table, options, inputs, grid, group, result_shapes): a plain eager call of a "
     "registered specialization, launched; None when the call needs the op."},
    {"_launch_registered",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&launch_registered)),
     METH_FASTCALL,
     "_launch_registered(table, options, inputs, grid, group, result_shapes): the op's kernel: "
     "launches a registered specialization; None when none matches."},
};

}  // namespace

PyObject* launch_plain_call(PyObject* const* argv) {
  HANDLE_TH_ERRORS
  return launch_call(argv, 6, /*plain_only=*/true);
  END_HANDLE_TH_ERRORS
}

void add_specialization_table(pybind11::module_& m) {
  namespace py = pybind11;
  m.def(
      "_specializations_new",
      [](std::string arg_kinds, size_t n_results, int return_kind) {
        TORCH_CHECK_VALUE(return_kind >= 0 && return_kind <= 2, "bad return kind ", return_kind);
        for (char c : arg_kinds) {
          TORCH_CHECK_VALUE(arg_kind(c).has_value(), "bad argument kind '", c, "'");
        }
        auto* table = new SpecializationTable{std::move(arg_kinds), n_results,
                                              static_cast<ReturnKind>(return_kind), {}};
        return py::capsule(table, kCapsuleName, [](PyObject* c) { delete unpack(c); });
      },
      py::arg("arg_kinds"), py::arg("n_results"), py::arg("return_kind"),
      "A kernel's specialization table: its arg_kinds, result count and return kind "
      "(contract.RETURN_KINDS). Releases its handles when collected.");
  m.def(
      "_specializations_add",
      [](py::capsule capsule, int64_t handle, int64_t options) {
        SpecializationTable* table = unpack(capsule.ptr());
        if (table == nullptr) throw py::error_already_set();
        std::shared_ptr<const KernelRecord> record = kernel_record(handle);
        TORCH_CHECK_VALUE(record->arg_kinds == table->arg_kinds &&
                              record->results.size() == table->n_results &&
                              record->options == options,
                          "_specializations_add: kernel '", record->name,
                          "' handle ", handle, " does not have this kernel's signature");
        Entry e;
        e.options = options;
        for (const ArgSpec& arg : record->inputs) {
          if (arg.kind != ArgKind::Tensor) continue;
          e.input_dtypes.push_back(arg.dtype);
          e.input_ranks.push_back(arg.rank);
        }
        for (const ArgSpec& res : record->results) e.result_ranks.push_back(res.rank);
        e.handle = handle;
        e.record = std::move(record);
        table->entries.push_back(std::move(e));
      },
      py::arg("table"), py::arg("handle"), py::arg("options"),
      "Adds a registered specialization; the table takes over one use of `handle`.");
  m.def(
      "_specializations_handle",
      [](py::capsule capsule, int64_t options, py::tuple inputs,
         std::vector<int64_t> result_ranks) -> py::object {
        SpecializationTable* table = unpack(capsule.ptr());
        if (table == nullptr) throw py::error_already_set();
        std::vector<at::Tensor> tensors;
        for (const auto& item : inputs) {
          if (THPVariable_Check(item.ptr())) tensors.push_back(THPVariable_Unpack(item.ptr()));
        }
        const Entry* e = find(*table, options, tensors, result_ranks);
        return e == nullptr ? py::none() : py::cast(e->handle);
      },
      py::arg("table"), py::arg("options"), py::arg("inputs"), py::arg("result_ranks"),
      "The handle of the registered specialization these inputs and result ranks select, or "
      "None.");
  for (PyMethodDef& def : kLaunchDefs) {
    m.add_object(def.ml_name,
                 py::reinterpret_steal<py::object>(PyCFunction_NewEx(&def, nullptr, nullptr)));
  }
}

}  // namespace coreai_torch

#endif  // COREAI_TORCH_NO_PYTHON
