// The C++ kernels of a kernel's op (torch.ops.coreai_metal_kernels.<name>,
// defined by coreai_torch/kernel_op.py), registered over the kernel's table.
//
// - Autograd: a call autograd does not record (records_gradient: an input
//   requires grad with grad mode on, or carries a forward-mode tangent) goes
//   straight on to the device's kernel, as torch's own ops do; one it records
//   is handed to Python (coreai_torch/autograd.py), which records it with the
//   kernel's backward and forward-mode rule.
// - CPU, CUDA, MPS: the kernel active under the op's name runs the call: its
//   Metal source (read and checked by call_args.h, its specialization found
//   or registered in its table, launched through KernelTable::launch, as the
//   C fast path launches), or torch_defn in reference mode.
#include "python/kernel_op.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SafePyObject.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>

#include "python/kernel_table.h"
#include "specializations/records_gradient.h"

namespace coreai_torch {
namespace {

namespace py = pybind11;

constexpr const char* kCapsuleName = "coreai_torch.KernelOpKernels";

// Pushes what a Python kernel returned as the op's returns.
void push_returns(const c10::FunctionSchema& schema, py::handle out, torch::jit::Stack* stack) {
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(out, returns[0].type()));
    return;
  }
  const auto items = out.cast<py::tuple>();
  for (size_t k = 0; k < returns.size(); ++k) {
    stack->push_back(torch::jit::toIValue(items[k], returns[k].type()));
  }
}

class AutogradKernel final : public c10::OperatorKernel {
 public:
  explicit AutogradKernel(PyObject* on_grad) : on_grad_(on_grad, getPyInterpreter()) {
    Py_INCREF(on_grad);
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    const c10::FunctionSchema& schema = op.schema();
    const size_t n = schema.arguments().size();
    bool recorded = false;
    for (const c10::IValue& arg : torch::jit::last(*stack, n)) {
      if (arg.isTensor() && records_gradient(arg.toTensor())) {
        recorded = true;
        break;
      }
    }
    if (!recorded) {
      at::AutoDispatchBelowADInplaceOrView guard;
      op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
      return;
    }
    py::gil_scoped_acquire gil;
    try {
      py::tuple args(n);
      size_t i = 0;
      for (const c10::IValue& arg : torch::jit::last(*stack, n)) {
        args[i++] = torch::jit::toPyObject(arg);
      }
      torch::jit::drop(*stack, n);
      py::object out =
          py::reinterpret_borrow<py::object>(on_grad_.ptr(getPyInterpreter()))(*args);
      push_returns(schema, out, stack);
    } catch (py::error_already_set& e) {
      e.restore();
      throw python_error();
    }
  }

 private:
  c10::SafePyObject on_grad_;
};

class DeviceKernel final : public c10::OperatorKernel {
 public:
  // `op`: the op's qualified name; `signature`: the kernel's that defined it.
  DeviceKernel(std::string op, const KernelTable& defined_by)
      : op_(std::move(op)),
        name_(op_.substr(0, op_.find('.'))),
        signature_(defined_by.signature()),
        return_kind_(defined_by.return_kind()) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/,
                  torch::jit::Stack* stack) {
    const c10::FunctionSchema& schema = op.schema();
    const size_t n = schema.arguments().size();
    py::gil_scoped_acquire gil;
    try {
      py::object out = run(torch::jit::last(*stack, n));
      torch::jit::drop(*stack, n);
      push_returns(schema, out, stack);
    } catch (py::error_already_set& e) {
      e.restore();
      throw python_error();
    }
  }

 private:
  // The op's arguments: the kernel's inputs, grid, threadgroup, then one
  // shape per result.
  py::object run(c10::ArrayRef<c10::IValue> args) {
    const FrontEnd& f = front_end();
    // Held for the call: a redefinition in another thread while this call
    // compiles or launches (without the GIL) may drop the kernel and its table.
    const py::object held = py::reinterpret_borrow<py::object>(
        PyDict_GetItemString(f.active, name_.c_str()));
    TORCH_CHECK(held, "kernel '", name_, "' has no active TorchMetalKernel");
    PyObject* kernel = held.ptr();
    KernelTable* table = table_of(kernel);
    if (table == nullptr) throw py::error_already_set();
    const CallSignature& now = table->signature();
    TORCH_CHECK_VALUE(now.inputs == signature_.inputs && now.arg_kinds == signature_.arg_kinds &&
                          now.results == signature_.results &&
                          table->return_kind() == return_kind_,
                      "kernel '", name_, "' was redefined with another signature: the op ", op_,
                      " is the earlier definition's. Call the kernel object, or its op with the "
                      "new definition's arguments.");
    const size_t n_inputs = table->signature().inputs.size();
    py::tuple inputs(n_inputs);
    for (size_t i = 0; i < n_inputs; ++i) inputs[i] = torch::jit::toPyObject(args[i]);
    py::object grid = torch::jit::toPyObject(args[n_inputs]);
    py::object group = torch::jit::toPyObject(args[n_inputs + 1]);
    py::list shapes;
    for (size_t i = n_inputs + 2; i < args.size(); ++i) shapes.append(torch::jit::toPyObject(args[i]));
    // Every mode's call is checked, as every route's is (call_args.h).
    Call call;
    read_call(table->signature(), inputs.ptr(), grid.ptr(), group.ptr(), shapes.ptr(), call);
    const bool kernel_mode = runs_kernel(kernel);
    if (PyErr_Occurred()) throw py::error_already_set();
    if (!kernel_mode) {  // reference mode (a bad mode is refused there)
      PyObject* out = PyObject_CallFunctionObjArgs(f.reference, kernel, inputs.ptr(),
                                                   shapes.ptr(), nullptr);
      if (out == nullptr) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(out);
    }
    const int64_t options = py::cast<int64_t>(py::handle(kernel).attr("options"));
    const TableEntry& entry =
        table->find_or_register(kernel, options, call, inputs.ptr(), shapes.ptr());
    PyObject* out =
        table->launch(kernel, entry, call, inputs.ptr(), grid.ptr(), group.ptr(), shapes.ptr(),
                      Route::Op);
    if (out == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(out);
  }

  std::string op_, name_;
  CallSignature signature_;
  ReturnKind return_kind_;
};

}  // namespace

void add_kernel_op(py::module_& m) {
  m.def(
      "_register_kernel_op_kernels",
      [](const std::string& ns, const std::string& name, const KernelTable& table,
         py::object on_grad) {
        auto* lib = new torch::Library(torch::Library::FRAGMENT, ns, std::nullopt, __FILE__,
                                       __LINE__);
        lib->impl(name.c_str(),
                  torch::dispatch(c10::DispatchKey::Autograd,
                                  torch::CppFunction::makeFromBoxedFunctor(
                                      std::make_unique<AutogradKernel>(on_grad.ptr()))));
        for (c10::DispatchKey key :
             {c10::DispatchKey::CPU, c10::DispatchKey::CUDA, c10::DispatchKey::MPS}) {
          lib->impl(name.c_str(),
                    torch::dispatch(key, torch::CppFunction::makeFromBoxedFunctor(
                                             std::make_unique<DeviceKernel>(name, table))));
        }
        return py::capsule(lib, kCapsuleName, [](PyObject* c) {
          delete static_cast<torch::Library*>(PyCapsule_GetPointer(c, kCapsuleName));
        });
      },
      py::arg("namespace"), py::arg("name"), py::arg("table"), py::arg("on_grad"),
      "Registers the Autograd, CPU, CUDA and MPS kernels of op namespace::name[.overload] of "
      "the kernel whose table is given: calls autograd records go to on_grad(*args), the "
      "others to the active kernel's table (refused when its signature is another). The "
      "registration lasts as long as the returned capsule.");
}

}  // namespace coreai_torch
