// The coreai_torch operator library (docs/internals.md §2): registration,
// release and launch of kernel specializations for callers of the dispatcher
// (Python's torch.ops.coreai_torch, C++ through c10::Dispatcher), plus the CPU
// backend's introspection hooks.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "coreai_torch.h"
#include "cpu/target.h"
#include "specializations/launch_args.h"
#include "specializations/records_gradient.h"

namespace coreai_torch {
namespace {

std::vector<ArgSpec> tensor_specs(const std::vector<std::string>& names,
                                  c10::ArrayRef<at::ScalarType> dtypes,
                                  c10::ArrayRef<int64_t> ranks, const std::string& kernel,
                                  const char* what) {
  TORCH_CHECK_VALUE(dtypes.size() == names.size() && ranks.size() == names.size(), "kernel '",
                    kernel, "': ", names.size(), " ", what, " names but ", dtypes.size(),
                    " dtypes and ", ranks.size(), " ranks");
  std::vector<ArgSpec> out;
  for (size_t i = 0; i < names.size(); ++i) {
    out.push_back({names[i], ArgKind::Tensor, dtypes[i], ranks[i]});
  }
  return out;
}

int64_t register_kernel_op(std::string name, std::string source, std::string entry,
                           std::vector<std::string> input_names, std::string arg_kinds,
                           std::vector<at::ScalarType> input_dtypes,
                           std::vector<int64_t> input_ranks,
                           std::vector<std::string> result_names,
                           std::vector<at::ScalarType> result_dtypes,
                           std::vector<int64_t> result_ranks,
                           std::vector<std::string> thread_attrs, int64_t options) {
  TORCH_CHECK_VALUE(arg_kinds.size() == input_names.size(), "kernel '", name,
                    "': arg_kinds '", arg_kinds, "' has one character per input, but there are ",
                    input_names.size(), " input names");
  KernelSpec spec;
  spec.name = std::move(name);
  spec.source = std::move(source);
  spec.entry = std::move(entry);
  size_t next_tensor = 0;
  for (size_t i = 0; i < input_names.size(); ++i) {
    const std::optional<ArgKind> kind = arg_kind(arg_kinds[i]);
    TORCH_CHECK_VALUE(kind.has_value(), "kernel '", spec.name, "': arg_kinds must be made of ",
                      "'t', 'i', 'f', 'b', got '", arg_kinds, "'");
    ArgSpec arg{input_names[i], *kind};
    if (*kind == ArgKind::Tensor) {
      TORCH_CHECK_VALUE(next_tensor < input_dtypes.size() && next_tensor < input_ranks.size(),
                        "kernel '", spec.name, "': arg_kinds '", arg_kinds,
                        "' names more tensors than input_dtypes (", input_dtypes.size(),
                        ") and input_ranks (", input_ranks.size(), ") describe");
      arg.dtype = input_dtypes[next_tensor];
      arg.rank = input_ranks[next_tensor++];
    }
    spec.inputs.push_back(std::move(arg));
  }
  TORCH_CHECK_VALUE(next_tensor == input_dtypes.size() && next_tensor == input_ranks.size(),
                    "kernel '", spec.name, "': arg_kinds '", arg_kinds, "' has ", next_tensor,
                    " tensors, but input_dtypes has ", input_dtypes.size(),
                    " entries and input_ranks ", input_ranks.size());
  spec.results = tensor_specs(result_names, result_dtypes, result_ranks, spec.name, "result");
  spec.thread_attrs = std::move(thread_attrs);
  spec.options = options;
  return register_kernel(std::move(spec));
}

std::vector<at::Tensor> launch_meta_op(int64_t handle, at::TensorList tensors,
                                       c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid,
                                       at::IntArrayRef group, at::IntArrayRef result_shapes) {
  return launch_meta(*kernel_record(handle), tensors, scalars, grid, group, result_shapes);
}

int64_t cpu_compile_count_op() { return cpu::compile_count(); }
int64_t cpu_disk_cache_hits_op() { return cpu::disk_cache_hits(); }
int64_t cpu_loaded_libraries_op() { return cpu::loaded_libraries(); }
std::string cpu_library_path_op(int64_t handle) {
  return cpu::loaded_library_path(*kernel_record(handle));
}
std::string cpu_execution_form_op(int64_t handle) {
  return cpu::loaded_execution_form(*kernel_record(handle));
}
std::string cpu_translation_unit_op(int64_t handle) {
  return cpu::translation_unit(*kernel_record(handle));
}

// launch at the Autograd key. launch has no derivative, and without a kernel
// here a call would go through torch's boxed autograd fallback, which boxes
// and unboxes every argument (a third of a small launch from C++) and, when
// an input requires grad, lets the forward run and leaves its gradient out
// with a warning at backward. This kernel refuses such a call up front and
// passes every other one on, unboxed, to the kernel below autograd.
std::vector<at::Tensor> launch_autograd(c10::DispatchKeySet keys, int64_t handle,
                                        at::TensorList tensors,
                                        c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid,
                                        at::IntArrayRef group, at::IntArrayRef result_shapes) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].defined() && records_gradient(tensors[i])) {
      const auto record = kernel_record(handle);
      TORCH_CHECK(false, "kernel '", record->name, "': coreai_torch::launch has no derivative, ",
                  "but tensor argument ", i, " requires grad (or carries a forward-mode ",
                  "tangent). Call the kernel's op torch.ops.coreai_metal_kernels.",
                  record->name, " (or its TorchMetalKernel), which records a backward, or ",
                  "launch under at::NoGradGuard (torch.no_grad() in Python) or on detached tensors.");
    }
  }
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("coreai_torch::launch", "")
                             .typed<std::vector<at::Tensor>(
                                 int64_t, at::TensorList, c10::ArrayRef<c10::Scalar>,
                                 at::IntArrayRef, at::IntArrayRef, at::IntArrayRef)>();
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.redispatch(keys & c10::after_ADInplaceOrView_keyset, handle, tensors, scalars, grid,
                       group, result_shapes);
}

}  // namespace

TORCH_LIBRARY(coreai_torch, m) {
  m.def(
      "register_kernel(str name, str source, str entry, str[] input_names, str arg_kinds, "
      "ScalarType[] input_dtypes, int[] input_ranks, str[] result_names, "
      "ScalarType[] result_dtypes, int[] result_ranks, str[] thread_attrs, int options) -> int",
      &register_kernel_op);
  m.def("release_kernel(int handle) -> ()", &release_kernel);
  m.def(
      "launch(int handle, Tensor[] tensors, Scalar[] scalars, int[] grid, int[] group, "
      "int[] result_shapes) -> Tensor[]");
  // Test and debugging hooks of the CPU backend's JIT.
  m.def("cpu_compile_count() -> int", &cpu_compile_count_op);
  m.def("cpu_disk_cache_hits() -> int", &cpu_disk_cache_hits_op);
  m.def("cpu_loaded_libraries() -> int", &cpu_loaded_libraries_op);
  m.def("cpu_library_path(int handle) -> str", &cpu_library_path_op);
  m.def("cpu_translation_unit(int handle) -> str", &cpu_translation_unit_op);
  m.def("cpu_execution_form(int handle) -> str", &cpu_execution_form_op);
}

// One implementation serves every device: it picks the backend itself and
// names the kernel when there is none (CUDA, XPU, MPS in a Linux build, ...).
TORCH_LIBRARY_IMPL(coreai_torch, CompositeExplicitAutograd, m) { m.impl("launch", &launch); }
TORCH_LIBRARY_IMPL(coreai_torch, Meta, m) { m.impl("launch", &launch_meta_op); }
TORCH_LIBRARY_IMPL(coreai_torch, Autograd, m) { m.impl("launch", TORCH_FN(launch_autograd)); }

}  // namespace coreai_torch
