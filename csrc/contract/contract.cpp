#include "contract/contract.h"

#include <cstring>

namespace coreai_torch {

std::optional<ArgKind> arg_kind(char c) {
  switch (c) {
    case 't':
      return ArgKind::Tensor;
    case 'i':
      return ArgKind::Int;
    case 'f':
      return ArgKind::Float;
    case 'b':
      return ArgKind::Bool;
    default:
      return std::nullopt;
  }
}

const std::vector<ElementType>& element_types() {
  static const std::vector<ElementType> table{
      {at::ScalarType::Float, "float", false},      {at::ScalarType::Half, "half", false},
      {at::ScalarType::BFloat16, "bfloat", false},  {at::ScalarType::Char, "int8_t", false},
      {at::ScalarType::Byte, "uint8_t", false},     {at::ScalarType::Short, "int16_t", false},
      {at::ScalarType::UInt16, "uint16_t", false},  {at::ScalarType::Int, "int", false},
      {at::ScalarType::UInt32, "uint", false},      {at::ScalarType::Long, "int64_t", true},
      {at::ScalarType::UInt64, "uint64_t", true},   {at::ScalarType::Bool, "bool", true},
  };
  return table;
}

const ElementType* element_type(at::ScalarType dtype) {
  for (const ElementType& row : element_types()) {
    if (row.dtype == dtype) return &row;
  }
  return nullptr;
}

const std::string& supported_dtype_names() {
  static const std::string names = [] {
    std::string out;
    for (const ElementType& row : element_types()) {
      // torch's spelling: float32, not Float.
      out += (out.empty() ? "" : ", ") + std::string(c10::getDtypeNames(row.dtype).first);
    }
    return out;
  }();
  return names;
}

std::string dtype_refusal(const std::string& kernel, const std::string& what,
                          at::ScalarType dtype) {
  return "kernel '" + kernel + "': " + what + " has dtype torch." +
         std::string(c10::getDtypeNames(dtype).first) +
         ", which Metal kernels cannot take. Supported dtypes: " + supported_dtype_names() +
         ". Convert it first (for example .to(torch.float32)).";
}

const std::vector<ThreadAttribute>& thread_attributes() {
  static const std::vector<ThreadAttribute> table{
      {"thread_position_in_grid", true},
      {"thread_position_in_threadgroup", true},
      {"threadgroup_position_in_grid", true},
      {"threads_per_grid", true},
      {"threads_per_threadgroup", true},
      {"threadgroups_per_grid", true},
      {"dispatch_threads_per_threadgroup", true},
      {"grid_origin", true},
      {"grid_size", true},
      {"thread_index_in_threadgroup", false},
      {"thread_index_in_simdgroup", false},
      {"thread_index_in_quadgroup", false},
      {"simdgroup_index_in_threadgroup", false},
      {"quadgroup_index_in_threadgroup", false},
      {"threads_per_simdgroup", false},
      {"simdgroups_per_threadgroup", false},
      {"quadgroups_per_threadgroup", false},
      {"thread_execution_width", false},
      {"dispatch_simdgroups_per_threadgroup", false},
      {"dispatch_quadgroups_per_threadgroup", false},
  };
  return table;
}

const ThreadAttribute* thread_attribute(const std::string& name) {
  for (const ThreadAttribute& attr : thread_attributes()) {
    if (name == attr.name) return &attr;
  }
  return nullptr;
}

MetaLayout meta_layout(c10::ArrayRef<int64_t> tensor_ranks) {
  MetaLayout layout;
  int64_t cursor = 0;
  layout.offsets.reserve(tensor_ranks.size());
  for (int64_t rank : tensor_ranks) {
    layout.offsets.push_back(rank > 0 ? cursor : -1);
    cursor += 2 * rank;
  }
  layout.length = cursor > 0 ? cursor : 1;
  return layout;
}

}  // namespace coreai_torch
