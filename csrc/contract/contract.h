// The facts of the kernel contract that more than one piece of code needs,
// each written once. C++ uses them directly; the Python front end reads them
// from coreai_torch._C.contract (python_contract.cpp), never from a copy.
// docs/internals.md describes the contract as a whole.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace coreai_torch {

// The namespace of the per-kernel ops: torch.ops.coreai_metal_kernels.<name>.
inline constexpr const char* kOpNamespace = "coreai_metal_kernels";

// A backend's compile failure starts its message with this marker; the Python
// front end re-raises such an error as coreai_torch.MetalCompileError.
inline constexpr const char* kCompileErrorMarker = "MetalCompileError: ";
inline bool is_compile_error(const std::string& message) {
  return message.rfind(kCompileErrorMarker, 0) == 0;
}

// Metal: a threadgroup holds at most 1024 threads.
inline constexpr int64_t kMaxThreadsPerThreadgroup = 1024;
// Metal: tensors have rank 16 at most (MTL_TENSOR_MAX_RANK).
inline constexpr int64_t kMaxRank = 16;
// Metal counts the threads of a grid dimension in 32 bits.
inline constexpr int64_t kMaxGridThreads = std::numeric_limits<uint32_t>::max();
// Metal binds at most 31 buffers; a Core AI metal4_kernel counts every kernel
// parameter (inputs, results, thread attributes) against that limit.
inline constexpr int64_t kMaxParameters = 31;
// Metal: a kernel's threadgroup memory is at most 32 KiB (the Metal feature set
// tables, "Maximum total threadgroup memory allocation", every Apple GPU family).
inline constexpr int64_t kMaxThreadgroupMemoryBytes = 32 * 1024;

// Registration options (bits).
inline constexpr int64_t kOptionDebug = 1;     // CPU: the checks of debug mode (docs/cpu.md)
inline constexpr int64_t kOptionFastMath = 2;  // MPS, CUDA: fast math instead of safe math
inline constexpr int64_t kKnownOptions = kOptionDebug | kOptionFastMath;

// How torch_defn returns its results, as the op returns them (code = value).
enum class ReturnKind : int { Tensor = 0, Tuple = 1, List = 2 };
inline constexpr const char* kReturnKindNames[] = {"tensor", "tuple", "list"};

// What a kernel input is. Scalars are Metal `int`, `float` and `bool`, passed
// by value as `constant T&`; Metal's `int` is 32 bits.
enum class ArgKind : char { Tensor = 't', Int = 'i', Float = 'f', Bool = 'b' };
struct ScalarKind {
  ArgKind kind;
  const char* type;  // the Python annotation and the Metal type: they are spelled alike
};
inline constexpr ScalarKind kScalarKinds[] = {
    {ArgKind::Int, "int"}, {ArgKind::Float, "float"}, {ArgKind::Bool, "bool"}};
inline constexpr int64_t kScalarIntMin = std::numeric_limits<int32_t>::min();
inline constexpr int64_t kScalarIntMax = std::numeric_limits<int32_t>::max();
// A float scalar must be finite as Metal's 32-bit float: a larger one would
// reach the kernel as inf, which a converted model cannot bake as a literal.
inline constexpr double kScalarFloatMax = std::numeric_limits<float>::max();
// The argument kind of a character; nullopt for any other character.
std::optional<ArgKind> arg_kind(char c);

// Element types (DESIGN.md, "Element types"): every dtype a kernel tensor may
// have, its Metal type, and how the two renderings treat it.
struct ElementType {
  at::ScalarType dtype;
  const char* metal;  // Metal type name in the buffer (eager) rendering
  // MTLTensorDataType has no such element type, so the buffer rendering views
  // tensors of it through the project's strided view (coreai_msl/strided_view.h)
  // rather than a Metal tensor.
  bool strided_view;
};
const std::vector<ElementType>& element_types();
// The row of `dtype`; nullptr for a dtype kernels cannot take.
const ElementType* element_type(at::ScalarType dtype);
// "float32, float16, ..." for messages.
const std::string& supported_dtype_names();

// The TypeError message for a tensor of `dtype`, which no Metal kernel takes
// (`what`: "input 'x'", "result 'out'").
std::string dtype_refusal(const std::string& kernel, const std::string& what,
                          at::ScalarType dtype);

// A converted (Core AI) program computes in 32 bits: these dtypes are narrowed
// on the way in, and the Core AI rendering declares such tensors with the
// narrowed type (an int64 tensor is `int` there, `int64_t` eagerly).
struct Narrowing {
  at::ScalarType from, to;
};
inline constexpr Narrowing kCoreAINarrowing[] = {
    {at::ScalarType::Long, at::ScalarType::Int}, {at::ScalarType::Double, at::ScalarType::Float}};

// The compute-kernel thread attributes of the Metal Shading Language a
// metal_params entry may name, and the types each may be declared with.
struct ThreadAttribute {
  const char* name;
  bool vector;  // declared as uint/ushort or their 2- and 3-vectors; else uint/ushort only
};
const std::vector<ThreadAttribute>& thread_attributes();
const ThreadAttribute* thread_attribute(const std::string& name);
inline constexpr const char* kVectorAttributeTypes[] = {"uint",   "uint2",   "uint3",
                                                         "ushort", "ushort2", "ushort3"};
inline constexpr const char* kScalarAttributeTypes[] = {"uint", "ushort"};
// Pairs of attributes that one kernel may not both declare (Metal refuses them).
inline constexpr const char* kExclusiveThreadAttributes[][2] = {
    {"thread_execution_width", "threads_per_simdgroup"}};

// The coreai_meta buffer of the buffer rendering: for every tensor parameter
// of rank >= 1, inputs then results in signature order, its R extents then its
// R strides (elements), each in Metal order (torch's reversed). Rank-0 tensors
// have no entries. A launch with none still binds one entry.
struct MetaLayout {
  std::vector<int64_t> offsets;  // per tensor parameter: its first entry, -1 for rank 0
  int64_t length = 1;            // entries in the buffer (at least 1)
};
MetaLayout meta_layout(c10::ArrayRef<int64_t> tensor_ranks);

}  // namespace coreai_torch
