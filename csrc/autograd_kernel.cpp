// The Autograd kernel of a per-kernel op (coreai_torch/kernel_op.py), in C++
// so that a call autograd does not record costs no trip through Python: it
// goes straight on to the device's kernel, as torch's own ops do. A call that
// autograd records (records_gradient: an input requires grad with grad mode
// on, or carries a forward-mode tangent) is handed to the Python function given
// at registration (coreai_torch/autograd.py), which records it with the
// kernel's backward and forward-mode rule.
#ifndef COREAI_TORCH_NO_PYTHON

#include "autograd_kernel.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SafePyObject.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>

namespace coreai_torch {
namespace {

constexpr const char* kCapsuleName = "coreai_torch.AutogradKernel";

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
    pybind11::gil_scoped_acquire gil;
    pybind11::tuple args(n);
    size_t i = 0;
    for (const c10::IValue& arg : torch::jit::last(*stack, n)) args[i++] = torch::jit::toPyObject(arg);
    torch::jit::drop(*stack, n);
    pybind11::object out =
        pybind11::reinterpret_borrow<pybind11::object>(on_grad_.ptr(getPyInterpreter()))(*args);
    const auto& returns = schema.returns();
    if (returns.size() == 1) {
      stack->push_back(torch::jit::toIValue(out, returns[0].type()));
      return;
    }
    const auto items = out.cast<pybind11::tuple>();
    for (size_t k = 0; k < returns.size(); ++k) {
      stack->push_back(torch::jit::toIValue(items[k], returns[k].type()));
    }
  }

 private:
  c10::SafePyObject on_grad_;
};

}  // namespace

void add_autograd_kernel(pybind11::module_& m) {
  namespace py = pybind11;
  m.def(
      "_register_autograd_kernel",
      [](const std::string& ns, const std::string& name, py::object on_grad) {
        auto* lib = new torch::Library(torch::Library::FRAGMENT, ns, std::nullopt, __FILE__,
                                       __LINE__);
        lib->impl(name.c_str(),
                  torch::dispatch(c10::DispatchKey::Autograd,
                                  torch::CppFunction::makeFromBoxedFunctor(
                                      std::make_unique<AutogradKernel>(on_grad.ptr()))));
        return py::capsule(lib, kCapsuleName, [](PyObject* c) {
          delete static_cast<torch::Library*>(PyCapsule_GetPointer(c, kCapsuleName));
        });
      },
      py::arg("namespace"), py::arg("name"), py::arg("on_grad"),
      "Registers the Autograd kernel of op namespace::name; calls that autograd records go to "
      "on_grad(*args). The registration lasts as long as the returned capsule.");
}

}  // namespace coreai_torch

#endif  // COREAI_TORCH_NO_PYTHON
