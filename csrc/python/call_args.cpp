#include "python/call_args.h"

#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <sstream>

#include "specializations/records_gradient.h"

namespace coreai_torch {
namespace {

// Tensors whose memory does not hold their values (a lazily negated or
// conjugated view, a ZeroTensor), and tensor subclasses: the dispatcher
// resolves the first kind before the op's kernel runs and hands the second to
// its Python handler, so such a call takes the op.
const c10::DispatchKeySet kNeedsDispatcher{c10::DispatchKey::Negative,
                                           c10::DispatchKey::Conjugate,
                                           c10::DispatchKey::ZeroTensor, c10::DispatchKey::Python};

std::string repr(PyObject* obj) {
  PyObject* r = PyObject_Repr(obj);
  if (r == nullptr) {
    PyErr_Clear();
    return "<unprintable>";
  }
  std::string out = PyUnicode_AsUTF8(r);
  Py_DECREF(r);
  return out;
}

std::string type_name(PyObject* obj) {
  PyObject* name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(obj)), "__name__");
  if (name == nullptr) {
    PyErr_Clear();
    return Py_TYPE(obj)->tp_name;
  }
  std::string out = PyUnicode_AsUTF8(name);
  Py_DECREF(name);
  return out;
}

// repr of `seq` made a tuple or a list (`as`), as the messages show it.
std::string repr_as(PyObject* seq, PyObject* (*as)(PyObject*)) {
  PyObject* converted = as(seq);
  if (converted == nullptr) {
    PyErr_Clear();
    return repr(seq);
  }
  std::string out = repr(converted);
  Py_DECREF(converted);
  return out;
}

std::string tuple_repr(PyObject* seq) { return repr_as(seq, PySequence_Tuple); }
std::string list_repr(PyObject* seq) { return repr_as(seq, PySequence_List); }

std::string names_repr(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out + "]";
}

// torch.SymInt, torch.SymFloat and torch.SymBool: values only a trace knows.
bool is_symbolic(PyObject* obj) {
  static PyObject* types = [] {
    PyObject* torch = PyImport_ImportModule("torch");
    PyObject* t = PyTuple_New(3);
    const char* names[] = {"SymInt", "SymFloat", "SymBool"};
    for (int i = 0; i < 3; ++i) PyTuple_SET_ITEM(t, i, PyObject_GetAttrString(torch, names[i]));
    Py_DECREF(torch);
    return t;
  }();
  const int is = PyObject_IsInstance(obj, types);
  if (is < 0) PyErr_Clear();
  return is > 0;
}

bool is_sequence(PyObject* obj) {
  if (PyTuple_CheckExact(obj) || PyList_CheckExact(obj)) return true;
  return PySequence_Check(obj) && !PyUnicode_Check(obj) && !PyBytes_Check(obj) &&
         !PyByteArray_Check(obj);
}

// len(seq) and seq[i] (a new reference, or nullptr with an error set) of a
// sequence; a tuple or list, what nearly every call passes, is read in place
// (the sequence protocol's calls were about 3% of a 16-element call).
Py_ssize_t length(PyObject* seq) {
  if (PyTuple_CheckExact(seq)) return PyTuple_GET_SIZE(seq);
  if (PyList_CheckExact(seq)) return PyList_GET_SIZE(seq);
  return PySequence_Size(seq);
}

PyObject* element_at(PyObject* seq, Py_ssize_t i) {
  PyObject* out = PyTuple_CheckExact(seq)  ? PyTuple_GET_ITEM(seq, i)
                  : PyList_CheckExact(seq) ? PyList_GET_ITEM(seq, i)
                                           : nullptr;
  if (out == nullptr) return PySequence_GetItem(seq, i);
  Py_INCREF(out);
  return out;
}

// A plain int (not a bool), and its value if it fits int64.
bool plain_int(PyObject* obj, int64_t& value, bool& overflow) {
  if (!PyLong_Check(obj) || PyBool_Check(obj)) return false;
  int over = 0;
  value = PyLong_AsLongLongAndOverflow(obj, &over);
  overflow = over != 0;
  return true;
}

// threads_per_grid (minimum 0) or threads_per_thread_group (minimum 1).
void read_triple(const CallSignature& s, const char* label, PyObject* value, int64_t minimum,
                 std::array<int64_t, 3>& out, Call& call) {
  TORCH_CHECK_VALUE(is_sequence(value), "kernel '", s.kernel, "': ", label,
                    " must be a 3-tuple of ints, got ", repr(value), ".");
  const Py_ssize_t n = length(value);
  TORCH_CHECK_VALUE(n == 3, "kernel '", s.kernel, "': ", label, " must be a 3-tuple, got ", n,
                    " elements: ", repr(value), ".");
  bool concrete = true;
  for (Py_ssize_t d = 0; d < 3; ++d) {
    PyObject* item = element_at(value, d);
    int64_t v = 0;
    bool overflow = false;
    const bool is_int = item != nullptr && plain_int(item, v, overflow);
    const bool symbolic = item != nullptr && !is_int && is_symbolic(item);
    Py_XDECREF(item);
    TORCH_CHECK_VALUE(is_int || symbolic, "kernel '", s.kernel, "': ", label,
                      " must hold ints, got ", repr(value), ".");
    if (symbolic) {
      concrete = false;
      call.symbolic = true;
      continue;
    }
    TORCH_CHECK_VALUE(!overflow && v >= minimum && v <= kMaxGridThreads, "kernel '", s.kernel,
                      "': ", label, " entries must be in [", minimum,
                      ", 2^32 - 1] (Metal counts threads in 32 bits), got ", tuple_repr(value),
                      ".");
    out[d] = v;
  }
  if (minimum == 1 && concrete) {
    const int64_t threads = out[0] * out[1] * out[2];
    TORCH_CHECK_VALUE(threads <= kMaxThreadsPerThreadgroup, "kernel '", s.kernel, "': ", label,
                      " ", tuple_repr(value), " has ", threads,
                      " threads; a threadgroup holds at most ", kMaxThreadsPerThreadgroup, ".");
  }
}

void read_shapes(const CallSignature& s, PyObject* value, Call& call) {
  TORCH_CHECK_VALUE(is_sequence(value), "kernel '", s.kernel,
                    "': result_shapes must be a list with one shape per result ",
                    names_repr(s.results), ", got ", repr(value), ".");
  const Py_ssize_t n = length(value);
  TORCH_CHECK_VALUE(n == static_cast<Py_ssize_t>(s.results.size()), "kernel '", s.kernel,
                    "': result_shapes must contain one shape per result name; expected ",
                    s.results.size(), " (for ", names_repr(s.results), "), got ", n, ".");
  for (Py_ssize_t r = 0; r < n; ++r) {
    const std::string& name = s.results[r];
    PyObject* shape = element_at(value, r);
    TORCH_CHECK_VALUE(shape != nullptr && is_sequence(shape), "kernel '", s.kernel,
                      "': result_shapes entry for '", name, "' must be a list of ints, got ",
                      shape ? repr(shape) : std::string("?"), ".");
    const Py_ssize_t rank = length(shape);
    for (Py_ssize_t d = 0; d < rank; ++d) {
      PyObject* item = element_at(shape, d);
      int64_t v = 0;
      bool overflow = false;
      const bool is_int = item != nullptr && plain_int(item, v, overflow);
      const bool symbolic = item != nullptr && !is_int && is_symbolic(item);
      Py_XDECREF(item);
      if (!is_int && !symbolic) {
        const std::string shown = repr(shape);
        Py_DECREF(shape);
        TORCH_CHECK_VALUE(false, "kernel '", s.kernel, "': result_shapes entry for '", name,
                          "' must hold ints, got ", shown, ".");
      }
      if (symbolic) {
        call.symbolic = true;
        continue;
      }
      if (v < 0 || overflow) {
        const std::string shown = list_repr(shape);
        Py_DECREF(shape);
        TORCH_CHECK_VALUE(false, "kernel '", s.kernel, "': result '", name,
                          "' has a negative dimension in shape ", shown, ".");
      }
      call.shapes.push_back(v);
    }
    if (rank > kMaxRank) {
      const std::string shown = list_repr(shape);
      Py_DECREF(shape);
      TORCH_CHECK_VALUE(false, "kernel '", s.kernel, "': result '", name, "' has rank ", rank,
                        " (shape ", shown, "); Metal tensors have rank ", kMaxRank, " at most.");
    }
    Py_DECREF(shape);
    call.ranks.push_back(rank);
  }
}

void read_scalar(const CallSignature& s, const std::string& name, ArgKind kind, PyObject* value,
                 Call& call) {
  const char* expected = kind == ArgKind::Int ? "int" : kind == ArgKind::Float ? "float" : "bool";
  TORCH_CHECK_TYPE(!THPVariable_Check(value), "kernel '", s.kernel, "': input '", name,
                   "' is declared ", expected, " in torch_defn, got a tensor; pass a Python ",
                   expected, ".");
  if (is_symbolic(value)) {
    call.symbolic = true;
    call.scalars.emplace_back(int64_t{0});  // a placeholder: symbolic calls are not launched
    return;
  }
  const bool is_bool = PyBool_Check(value);
  const bool is_int = PyLong_Check(value) && !is_bool;
  const bool ok = kind == ArgKind::Bool    ? is_bool
                  : kind == ArgKind::Int   ? is_int
                                           : is_int || PyFloat_Check(value);
  TORCH_CHECK_TYPE(ok, "kernel '", s.kernel, "': input '", name, "' is declared ", expected,
                   " in torch_defn, got ", type_name(value), " ", repr(value), ".");
  if (kind == ArgKind::Bool) {
    call.scalars.emplace_back(value == Py_True);
    return;
  }
  if (kind == ArgKind::Int) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    TORCH_CHECK_VALUE(overflow == 0 && v >= kScalarIntMin && v <= kScalarIntMax, "kernel '",
                      s.kernel, "': int input '", name, "' = ", repr(value),
                      " does not fit Metal's 32-bit int (", kScalarIntMin, " .. ", kScalarIntMax,
                      ").");
    call.scalars.emplace_back(static_cast<int64_t>(v));
    return;
  }
  const double v = PyFloat_AsDouble(value);  // an int too large for a double: inf
  if (v == -1.0 && PyErr_Occurred()) PyErr_Clear();
  if (!(std::fabs(v) <= kScalarFloatMax)) {
    PyObject* limit = PyFloat_FromDouble(kScalarFloatMax);
    const std::string shown = repr(limit);
    Py_DECREF(limit);
    const bool infinite = PyFloat_Check(value) && !std::isfinite(PyFloat_AS_DOUBLE(value));
    TORCH_CHECK_VALUE(false, "kernel '", s.kernel, "': float input '", name, "' = ", repr(value),
                      " ", infinite ? "is not finite" : "does not fit Metal's 32-bit float",
                      " (|value| <= ", shown,
                      "); converted models bake scalars as literals, which cannot be inf or nan.");
  }
  call.scalars.emplace_back(v);
}

void read_tensor(const CallSignature& s, const std::string& name, PyObject* value,
                 const std::string*& first, Call& call) {
  TORCH_CHECK_TYPE(THPVariable_Check(value), "kernel '", s.kernel, "': input '", name,
                   "' is declared torch.Tensor in torch_defn, got ", type_name(value), " ",
                   repr(value), ".");
  const at::Tensor& t = THPVariable_Unpack(value);
  TORCH_CHECK_TYPE(!t.is_nested(), "kernel '", s.kernel, "': input '", name,
                   "' is a nested tensor, which has no one shape a kernel can index; call the "
                   "kernel on each component (tensor.unbind()) or on a padded tensor "
                   "(torch.nested.to_padded_tensor).");
  if (t.layout() != at::kStrided) {
    PyObject* layout = PyObject_GetAttrString(value, "layout");
    const std::string shown = layout ? repr(layout) : std::string("?");
    Py_XDECREF(layout);
    TORCH_CHECK_TYPE(false, "kernel '", s.kernel, "': input '", name, "' has layout ", shown,
                     ", but kernels read dense strided tensors; pass tensor.to_dense().");
  }
  if (!call.tensors.empty()) {
    TORCH_CHECK_VALUE(t.device() == call.tensors[0].device(), "kernel '", s.kernel,
                      "': all tensors must be on one device; input '", *first, "' is on ",
                      call.tensors[0].device(), " but '", name, "' is on ", t.device(), ".");
  } else {
    first = &name;
  }
  TORCH_CHECK_TYPE(element_type(t.scalar_type()) != nullptr,
                   dtype_refusal(s.kernel, "input '" + name + "'", t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() <= kMaxRank, "kernel '", s.kernel, "': input '", name, "' has rank ",
                    t.dim(), "; Metal tensors have rank ", kMaxRank,
                    " at most. Reshape it first.");
  if (!THPVariable_CheckExact(value) || records_gradient(t) ||
      t.key_set().has_any(kNeedsDispatcher)) {
    call.needs_dispatcher = true;
  }
  call.tensors.push_back(t);
}

}  // namespace

void read_call(const CallSignature& s, PyObject* inputs, PyObject* grid, PyObject* group,
               PyObject* result_shapes, Call& call) {
  read_triple(s, "threads_per_grid", grid, 0, call.grid, call);
  read_triple(s, "threads_per_thread_group", group, 1, call.group, call);
  read_shapes(s, result_shapes, call);
  const Py_ssize_t n = PyTuple_GET_SIZE(inputs);
  TORCH_CHECK_TYPE(n == static_cast<Py_ssize_t>(s.inputs.size()), "kernel '", s.kernel,
                   "' takes ", s.inputs.size(), " inputs ", names_repr(s.inputs), ", got ", n,
                   ".");
  const std::string* first = nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* value = PyTuple_GET_ITEM(inputs, i);
    const auto kind = static_cast<ArgKind>(s.arg_kinds[static_cast<size_t>(i)]);
    if (kind == ArgKind::Tensor) {
      read_tensor(s, s.inputs[i], value, first, call);
    } else {
      read_scalar(s, s.inputs[i], kind, value, call);
    }
  }
}

}  // namespace coreai_torch
