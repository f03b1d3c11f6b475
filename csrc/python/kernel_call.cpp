// TorchMetalKernel's call: the C fast path, and the one hand-off to Python.
//
// Calling an instance of a Python class goes through its type's tp_call,
// which packs the positional arguments into a tuple and the keywords into a
// dict before a Python __call__ runs: that took about a fifth of a 16-element
// call. TorchMetalKernel derives from KernelCall, whose instances are called
// by vectorcall. The call's arguments are read and checked here
// (call_args.h: a bad argument is refused here, on every route); a call that
// may launch directly (below) and selects a registered specialization is
// launched. Every other call goes to the Python __call__, the slow path, which
// takes the kernel's op (and which torch.compile traces).
#include "python/kernel_call.h"

#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/Exceptions.h>

#include <cstddef>
#include <vector>

#include "python/kernel_table.h"

namespace coreai_torch {
namespace {

struct KernelCallObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
};

struct Names {
  PyObject *name, *options, *compiling, *grid, *group, *shapes, *call;
};
Names names;

// An owned reference, released at the end of the scope.
struct Ref {
  PyObject* p;
  explicit Ref(PyObject* obj) : p(obj) {}
  ~Ref() { Py_XDECREF(p); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
};

bool same_name(PyObject* key, PyObject* name) {
  return key == name || (PyUnicode_Check(key) && PyUnicode_Compare(key, name) == 0);
}

// The one definition of "may launch directly": the object is the kernel
// active under its name, it runs its Metal source, nothing compiles or traces
// (torch.compiler's flag; dispatch and torch-function modes; functorch
// transforms, which add keys to the thread's included dispatch keys), and the
// call's arguments are plain (call_args.h). Errors count as no.
bool may_launch_directly(PyObject* self, const Call& call) {
  if (call.symbolic || call.needs_dispatcher) return false;
  if (c10::impl::TorchDispatchModeTLS::stack_len() > 0 ||
      at::impl::PythonTorchFunctionTLS::stack_len() > 0 ||
      !(c10::impl::tls_local_dispatch_key_set().included_ - c10::default_included_set).empty()) {
    return false;
  }
  const FrontEnd& f = front_end();
  Ref name(PyObject_GetAttr(self, names.name));
  Ref compiling(PyObject_GetAttr(f.compiler, names.compiling));
  if (name.p == nullptr || compiling.p == nullptr) return false;
  if (PyDict_GetItemWithError(f.active, name.p) != self || compiling.p != Py_False) return false;
  return runs_kernel(self);
}

// _launch's error, as __call__ raises it: a compile failure becomes
// MetalCompileError (errors.reraise_compile_error), anything else stays.
void reraise_compile_error() {
  if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  PyObject* none = PyObject_CallOneArg(front_end().reraise, value);
  if (none == nullptr) {  // raised MetalCompileError
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return;
  }
  Py_DECREF(none);
  PyErr_Restore(type, value, traceback);
}

// The results of a call launched here; nullptr with an error set; nullptr
// without one when the Python __call__ must run.
PyObject* try_launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                     PyObject* kwnames) {
  if (front_end().active == nullptr || kwnames == nullptr || PyTuple_GET_SIZE(kwnames) != 3) {
    return nullptr;
  }
  PyObject* launch[3] = {nullptr, nullptr, nullptr};  // grid, group, result shapes
  for (Py_ssize_t i = 0; i < 3; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    const int slot = same_name(key, names.grid)     ? 0
                     : same_name(key, names.group)  ? 1
                     : same_name(key, names.shapes) ? 2
                                                    : -1;
    if (slot < 0 || launch[slot] != nullptr) return nullptr;
    launch[slot] = args[nargs + i];
  }
  KernelTable* table = table_of(self);
  Ref options(PyObject_GetAttr(self, names.options));
  Ref inputs(PyTuple_New(nargs));
  if (table == nullptr || options.p == nullptr || inputs.p == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(inputs.p, i, args[i]);
  }
  HANDLE_TH_ERRORS
  Call call;
  read_call(table->signature(), inputs.p, launch[0], launch[1], launch[2], call);
  if (!may_launch_directly(self, call)) {
    PyErr_Clear();
    return nullptr;
  }
  const TableEntry* entry = table->find(PyLong_AsLongLong(options.p), call);
  if (entry == nullptr) return nullptr;
  return table->launch(self, *entry, call, inputs.p, launch[0], launch[1], launch[2],
                       Route::Direct);
  END_HANDLE_TH_ERRORS
}

// The Python __call__ of the object's class, with the same arguments.
PyObject* call_python(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Ref call(PyObject_GetAttr(reinterpret_cast<PyObject*>(Py_TYPE(self)), names.call));
  if (call.p == nullptr) return nullptr;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargsf & PY_VECTORCALL_ARGUMENTS_OFFSET) {
    // The caller lets us borrow the slot before args: self goes there.
    PyObject** with_self = const_cast<PyObject**>(args) - 1;
    PyObject* saved = with_self[0];
    with_self[0] = self;
    PyObject* out = PyObject_Vectorcall(call.p, with_self, nargs + 1, kwnames);
    with_self[0] = saved;
    return out;
  }
  const Py_ssize_t total = nargs + (kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames));
  std::vector<PyObject*> with_self(static_cast<size_t>(total) + 1);
  with_self[0] = self;
  for (Py_ssize_t i = 0; i < total; ++i) with_self[i + 1] = args[i];
  return PyObject_Vectorcall(call.p, with_self.data(), nargs + 1, kwnames);
}

PyObject* kernel_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                            PyObject* kwnames) {
  PyObject* out = try_launch(self, args, PyVectorcall_NARGS(nargsf), kwnames);
  if (out != nullptr || PyErr_Occurred()) {
    if (out == nullptr) reraise_compile_error();
    return out;
  }
  return call_python(self, args, nargsf, kwnames);
}

PyObject* kernel_call_new(PyTypeObject* type, PyObject* /*args*/, PyObject* /*kwargs*/) {
  PyObject* self = type->tp_alloc(type, 0);
  if (self != nullptr) reinterpret_cast<KernelCallObject*>(self)->vectorcall = kernel_vectorcall;
  return self;
}

PyTypeObject kernel_call_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* intern(const char* s) { return PyUnicode_InternFromString(s); }

}  // namespace

void add_kernel_call(pybind11::module_& m) {
  namespace py = pybind11;
  names = {intern("name"),
           intern("options"),
           intern("_is_compiling_flag"),
           intern("threads_per_grid"),
           intern("threads_per_thread_group"),
           intern("result_shapes"),
           intern("__call__")};
  PyTypeObject& t = kernel_call_type;
  t.tp_name = "coreai_torch._C.KernelCall";
  t.tp_doc = "Base of TorchMetalKernel: its instances are called by vectorcall (kernel_call.cpp).";
  t.tp_basicsize = sizeof(KernelCallObject);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_vectorcall_offset = offsetof(KernelCallObject, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_new = kernel_call_new;
  if (PyType_Ready(&t) < 0) throw py::error_already_set();
  Py_INCREF(&t);
  m.attr("KernelCall") = py::handle(reinterpret_cast<PyObject*>(&t));
  m.def(
      "_kernel_call_install",
      [](py::handle cls) {
        TORCH_CHECK_TYPE(PyType_Check(cls.ptr()) &&
                             PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls.ptr()),
                                              &kernel_call_type),
                         "_kernel_call_install takes a subclass of KernelCall");
        // A class with a Python __call__ keeps tp_call (which runs it) but,
        // before Python 3.12, does not inherit vectorcall: give it back.
        auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
        type->tp_vectorcall_offset = offsetof(KernelCallObject, vectorcall);
        type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
        PyType_Modified(type);
      },
      py::arg("cls"), "Makes calls of cls's instances take the vectorcall fast path.");
}

}  // namespace coreai_torch
