// coreai_torch._C.contract: the contract's facts (contract.h) for the Python
// front end, which reads them here rather than keeping a copy.
#include "python/contract_module.h"

#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>

#include "contract/contract.h"

namespace coreai_torch {
namespace {

namespace py = pybind11;

py::object dtype_object(at::ScalarType t) {
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t)));
}

}  // namespace

void add_contract(py::module_& m) {
  py::module_ c = m.def_submodule(
      "contract", "The facts of the kernel contract (csrc/contract.h), each defined once.");
  c.attr("OP_NAMESPACE") = kOpNamespace;
  c.attr("COMPILE_ERROR_MARKER") = kCompileErrorMarker;
  c.attr("MAX_THREADS_PER_THREADGROUP") = kMaxThreadsPerThreadgroup;
  c.attr("MAX_RANK") = kMaxRank;
  c.attr("MAX_GRID_THREADS") = kMaxGridThreads;
  c.attr("MAX_PARAMETERS") = kMaxParameters;
  c.attr("MAX_THREADGROUP_MEMORY_BYTES") = kMaxThreadgroupMemoryBytes;
  c.attr("OPTION_DEBUG") = kOptionDebug;
  c.attr("OPTION_FAST_MATH") = kOptionFastMath;
  py::tuple return_kinds(std::size(kReturnKindNames));
  for (size_t i = 0; i < std::size(kReturnKindNames); ++i) return_kinds[i] = kReturnKindNames[i];
  c.attr("RETURN_KINDS") = return_kinds;  // index = the code the C++ side uses

  c.attr("TENSOR_KIND") = std::string(1, static_cast<char>(ArgKind::Tensor));
  py::dict scalar_kinds;  // Python annotation (= Metal type) -> argument kind
  for (const ScalarKind& s : kScalarKinds) {
    scalar_kinds[s.type] = std::string(1, static_cast<char>(s.kind));
  }
  c.attr("SCALAR_KINDS") = scalar_kinds;
  c.attr("SCALAR_INT_MIN") = kScalarIntMin;
  c.attr("SCALAR_INT_MAX") = kScalarIntMax;
  c.attr("SCALAR_FLOAT_MAX") = kScalarFloatMax;

  py::dict metal_types;
  py::list strided_view;
  for (const ElementType& row : element_types()) {
    metal_types[dtype_object(row.dtype)] = row.metal;
    if (row.strided_view) strided_view.append(dtype_object(row.dtype));
  }
  c.attr("METAL_TYPES") = metal_types;
  c.attr("STRIDED_VIEW_DTYPES") = py::frozenset(strided_view);
  py::dict narrowing;
  for (const Narrowing& n : kCoreAINarrowing) narrowing[dtype_object(n.from)] = dtype_object(n.to);
  c.attr("COREAI_NARROWING") = narrowing;

  py::tuple vector_types(std::size(kVectorAttributeTypes));
  for (size_t i = 0; i < std::size(kVectorAttributeTypes); ++i) {
    vector_types[i] = kVectorAttributeTypes[i];
  }
  py::tuple scalar_types(std::size(kScalarAttributeTypes));
  for (size_t i = 0; i < std::size(kScalarAttributeTypes); ++i) {
    scalar_types[i] = kScalarAttributeTypes[i];
  }
  py::dict attributes;  // attribute -> the types it may be declared with
  for (const ThreadAttribute& a : thread_attributes()) {
    attributes[a.name] = a.vector ? vector_types : scalar_types;
  }
  c.attr("THREAD_ATTRIBUTES") = attributes;
  py::list exclusive;
  for (const auto& pair : kExclusiveThreadAttributes) {
    exclusive.append(py::make_tuple(pair[0], pair[1]));
  }
  c.attr("EXCLUSIVE_THREAD_ATTRIBUTES") = py::tuple(exclusive);

  c.def(
      "refuse_dtype",
      [](const std::string& kernel, const std::string& what, py::handle dtype) {
        TORCH_CHECK_TYPE(false, dtype_refusal(kernel, what,
                                              reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type));
      },
      py::arg("kernel"), py::arg("what"), py::arg("dtype"),
      "Raises the TypeError for `what` (\"input 'x'\") of `kernel` having `dtype`, which no "
      "Metal kernel takes.");
  c.def(
      "meta_layout",
      [](std::vector<int64_t> tensor_ranks) {
        MetaLayout layout = meta_layout(tensor_ranks);
        return py::make_tuple(layout.offsets, layout.length);
      },
      py::arg("tensor_ranks"),
      "(offsets, length) of the coreai_meta buffer for tensors of these ranks (inputs, then "
      "results): each tensor's first entry (-1 for rank 0) and the buffer's length.");
}

}  // namespace coreai_torch

