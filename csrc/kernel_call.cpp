// TorchMetalKernel's eager call without the cost of Python's call protocol.
//
// Calling an instance of a Python class goes through its type's tp_call,
// which packs the positional arguments into a tuple and the keywords into a
// dict before the Python __call__ runs: that took about 0.4 us, a fifth of a
// 16-element call (benchmarks/bench_cpu.py, py.launch_tiny). TorchMetalKernel
// derives from KernelCall, whose instances are called by vectorcall. A call
// that kernel.py's __call__ would hand straight to _C._launch (the object is
// the kernel active under its name, it runs in kernel mode, nothing is
// compiling or exporting, and it passes exactly the three launch keywords) is
// launched here. Every other call, and every call _launch declines, runs the
// Python __call__, which is also what torch.compile traces. The tests here and
// in __call__ must stay the same.
#ifndef COREAI_TORCH_NO_PYTHON

#include "kernel_call.h"

#include <cstddef>
#include <vector>

#include "specialization_table.h"

namespace coreai_torch {
namespace {

struct KernelCallObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
};

// What _kernel_call_install was given; held for the life of the process.
struct Installed {
  PyObject* active = nullptr;    // kernel_op.ACTIVE: kernel name -> active object
  PyObject* modes = nullptr;     // the coreai_torch.modes module, for its _mode
  PyObject* compiler = nullptr;  // torch.compiler, for its _is_compiling_flag
  PyObject* reraise = nullptr;   // errors.reraise_compile_error
};
Installed installed;

struct Names {
  PyObject *name, *execution_mode, *table, *options, *mode, *compiling, *kernel, *grid, *group,
      *shapes, *call;
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

// __call__'s test of whether a call may go straight to _launch: the object is
// active under its name, in kernel mode, and torch.compiler.is_compiling()
// (outside TorchScript, its flag) is false. Errors count as no.
bool launchable(PyObject* self) {
  Ref name(PyObject_GetAttr(self, names.name));
  Ref mode(PyObject_GetAttr(self, names.execution_mode));
  Ref compiling(PyObject_GetAttr(installed.compiler, names.compiling));
  if (name.p == nullptr || mode.p == nullptr || compiling.p == nullptr) return false;
  PyObject* active = PyDict_GetItemWithError(installed.active, name.p);
  if (active != self || compiling.p != Py_False) return false;
  Ref global(mode.p == Py_None ? PyObject_GetAttr(installed.modes, names.mode) : nullptr);
  PyObject* effective = mode.p == Py_None ? global.p : mode.p;
  return effective != nullptr && PyUnicode_Check(effective) &&
         PyUnicode_Compare(effective, names.kernel) == 0;
}

// _launch's error, as __call__ raises it: a compile failure becomes
// MetalCompileError (errors.reraise_compile_error), anything else stays.
void reraise_compile_error() {
  if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  PyObject* none = PyObject_CallOneArg(installed.reraise, value);
  if (none == nullptr) {  // raised MetalCompileError
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return;
  }
  Py_DECREF(none);
  PyErr_Restore(type, value, traceback);
}

// The results of a plain eager call; nullptr with an error set; nullptr
// without one when the Python __call__ must run.
PyObject* try_launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                     PyObject* kwnames) {
  if (installed.active == nullptr || kwnames == nullptr || PyTuple_GET_SIZE(kwnames) != 3) {
    return nullptr;
  }
  PyObject* launch[3] = {nullptr, nullptr, nullptr};  // grid, group, result shapes
  for (Py_ssize_t i = 0; i < 3; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    const int slot = same_name(key, names.grid)    ? 0
                     : same_name(key, names.group) ? 1
                     : same_name(key, names.shapes) ? 2
                                                    : -1;
    if (slot < 0 || launch[slot] != nullptr) return nullptr;
    launch[slot] = args[nargs + i];
  }
  if (!launchable(self)) {
    PyErr_Clear();
    return nullptr;
  }
  Ref table(PyObject_GetAttr(self, names.table));
  Ref options(PyObject_GetAttr(self, names.options));
  Ref inputs(PyTuple_New(nargs));
  if (table.p == nullptr || options.p == nullptr || inputs.p == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(inputs.p, i, args[i]);
  }
  PyObject* const argv[6] = {table.p, options.p, inputs.p, launch[0], launch[1], launch[2]};
  PyObject* out = launch_plain_call(argv);
  if (out == nullptr) {
    reraise_compile_error();
    return nullptr;
  }
  if (out == Py_None) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
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
  if (out != nullptr || PyErr_Occurred()) return out;
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
  names = {intern("name"),          intern("execution_mode"),
           intern("table"),         intern("options"),
           intern("_mode"),         intern("_is_compiling_flag"),
           intern("kernel"),        intern("threads_per_grid"),
           intern("threads_per_thread_group"), intern("result_shapes"),
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
      [](py::handle cls, py::dict active, py::module_ modes, py::module_ compiler,
         py::function reraise) {
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
        installed = {active.release().ptr(), modes.release().ptr(), compiler.release().ptr(),
                     reraise.release().ptr()};
      },
      py::arg("cls"), py::arg("active"), py::arg("modes"), py::arg("compiler"),
      py::arg("reraise"),
      "Makes calls of cls's instances take the vectorcall fast path, with the state its test "
      "reads: the active kernels by name, the modes module, torch.compiler and the compile "
      "error translation.");
}

}  // namespace coreai_torch

#endif  // COREAI_TORCH_NO_PYTHON
