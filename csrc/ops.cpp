// The coreai_torch operator library (docs/internals.md §2): a registry of
// rendered kernel specializations, validation of every launch, result and
// metadata allocation, and dispatch to the CPU, CUDA or MPS backend.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "coreai_torch.h"
#include "cpu/jit.h"
#include "launch_args.h"

namespace coreai_torch {
namespace {

// The compute-kernel attributes of the Metal Shading Language that a
// metal_params entry may name (csrc/msl/coreai_msl/entry.h provides each).
constexpr const char* kThreadAttributes[] = {
    "thread_position_in_grid",
    "thread_position_in_threadgroup",
    "threadgroup_position_in_grid",
    "threads_per_grid",
    "threads_per_threadgroup",
    "threadgroups_per_grid",
    "thread_index_in_threadgroup",
    "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup",
    "threads_per_simdgroup",
    "simdgroups_per_threadgroup",
    "thread_execution_width",
    "quadgroup_index_in_threadgroup",
    "thread_index_in_quadgroup",
    "quadgroups_per_threadgroup",
    "dispatch_threads_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup",
    "dispatch_quadgroups_per_threadgroup",
    "grid_origin",
    "grid_size",
};

constexpr int64_t kMaxThreadsPerGroup = 1024;

// DESIGN.md, "Element types".
bool supported_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kHalf:
    case at::kBFloat16:
    case at::kChar:
    case at::kByte:
    case at::kShort:
    case at::kUInt16:
    case at::kInt:
    case at::kUInt32:
    case at::kLong:
    case at::kUInt64:
    case at::kBool:
      return true;
    default:
      return false;
  }
}

constexpr const char* kSupportedDtypes =
    "float32, float16, bfloat16, int8, uint8, int16, uint16, int32, uint32, int64, uint64, bool";

// ---- registry ---------------------------------------------------------------

class Registry {
 public:
  int64_t add(KernelRecord record) {
    std::string key = identity(record);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = handles_.find(key);
    if (it != handles_.end()) return it->second;
    records_.push_back(std::move(record));
    const int64_t handle = static_cast<int64_t>(records_.size());  // handles start at 1
    handles_.emplace(std::move(key), handle);
    return handle;
  }

  const KernelRecord& get(int64_t handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(handle >= 1 && handle <= static_cast<int64_t>(records_.size()),
                "coreai_torch: unknown kernel handle ", handle,
                " (handles come from coreai_torch::register_kernel in this process)");
    return records_[handle - 1];  // a deque never moves its elements
  }

 private:
  // Every field, each prefixed by its length so that no two records collide.
  static std::string identity(const KernelRecord& r) {
    std::ostringstream s;
    auto put = [&s](const std::string& v) { s << v.size() << ':' << v; };
    put(r.name);
    put(r.source);
    put(r.entry);
    put(r.arg_kinds);
    s << r.tensor_names.size() << '[';
    for (const auto& n : r.tensor_names) put(n);
    s << ']' << r.thread_attrs.size() << '[';
    for (const auto& a : r.thread_attrs) put(a);
    s << ']' << r.options;
    return s.str();
  }

  std::mutex mutex_;
  std::deque<KernelRecord> records_;
  std::unordered_map<std::string, int64_t> handles_;
};

Registry& registry() {
  static Registry r;
  return r;
}

size_t count_tensor_inputs(const KernelRecord& r) {
  return static_cast<size_t>(std::count(r.arg_kinds.begin(), r.arg_kinds.end(), 't'));
}

// ---- launch validation -------------------------------------------------------

std::string join(c10::ArrayRef<std::string> names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out.empty() ? "none" : out;
}

std::array<uint32_t, 3> three_counts(const KernelRecord& r, at::IntArrayRef v, const char* what,
                                     int64_t minimum) {
  TORCH_CHECK(v.size() == 3, "kernel '", r.name, "': ", what,
              " must have 3 entries (x, y, z), got ", v.size(), ": ", v);
  std::array<uint32_t, 3> out{};
  for (size_t d = 0; d < 3; ++d) {
    TORCH_CHECK(v[d] >= minimum && v[d] <= std::numeric_limits<uint32_t>::max(), "kernel '",
                r.name, "': ", what, " entries must be in [", minimum, ", 2^32 - 1], got ", v);
    out[d] = static_cast<uint32_t>(v[d]);
  }
  return out;
}

void check_int32_layout(const KernelRecord& r, const std::string& name, at::IntArrayRef sizes,
                        at::IntArrayRef strides) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (size_t d = 0; d < sizes.size(); ++d) {
    TORCH_CHECK(sizes[d] <= kMax && strides[d] <= kMax && strides[d] >= 0, "kernel '", r.name,
                "': tensor '", name, "' has sizes ", sizes, " and strides ", strides,
                "; Metal tensor extents and strides are 32-bit, so each must be at most ", kMax);
  }
}

// Appends the extents then the strides of `t` in Metal order (reversed).
void append_meta(std::vector<int32_t>& meta, const at::Tensor& t) {
  for (int64_t d = t.dim() - 1; d >= 0; --d) meta.push_back(static_cast<int32_t>(t.size(d)));
  for (int64_t d = t.dim() - 1; d >= 0; --d) meta.push_back(static_cast<int32_t>(t.stride(d)));
}

BoundArg bind_scalar(const KernelRecord& r, char kind, const c10::Scalar& s, size_t input) {
  // The messages are only built on failure: this runs on every launch.
  BoundArg a;
  switch (kind) {
    case 'i': {
      TORCH_CHECK(s.isIntegral(/*includeBool=*/false), "kernel '", r.name, "': scalar input ",
                  input, " is an int parameter, got ", s.type());
      const int64_t v = s.toLong();
      TORCH_CHECK(v >= std::numeric_limits<int32_t>::min() &&
                      v <= std::numeric_limits<int32_t>::max(),
                  "kernel '", r.name, "': scalar input ", input, " = ", v,
                  " does not fit Metal's 32-bit int");
      a.kind = BoundArg::Kind::Int;
      a.int_value = static_cast<int32_t>(v);
      break;
    }
    case 'f':
      TORCH_CHECK(s.isFloatingPoint() || s.isIntegral(/*includeBool=*/false), "kernel '", r.name,
                  "': scalar input ", input, " is a float parameter, got ", s.type());
      a.kind = BoundArg::Kind::Float;
      a.float_value = static_cast<float>(s.toDouble());
      break;
    case 'b':
      TORCH_CHECK(s.isBoolean(), "kernel '", r.name, "': scalar input ", input,
                  " is a bool parameter, got ", s.type());
      a.kind = BoundArg::Kind::Bool;
      a.bool_value = s.toBool();
      break;
    default:
      TORCH_CHECK(false, "kernel '", r.name, "': bad argument kind '", kind, "'");
  }
  return a;
}

// Validates a launch and allocates its results on `device`; the metadata
// buffer is built from the tensors as they are (inputs need not be contiguous).
LaunchArgs prepare(const KernelRecord& r, at::TensorList tensors,
                   c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid, at::IntArrayRef group,
                   at::IntArrayRef result_shapes, at::IntArrayRef result_ranks,
                   c10::ArrayRef<at::ScalarType> result_dtypes, const at::Device& device) {
  const size_t n_tensors = count_tensor_inputs(r);
  const size_t n_scalars = r.arg_kinds.size() - n_tensors;
  const size_t n_results = r.tensor_names.size() - n_tensors;
  c10::ArrayRef<std::string> input_names(r.tensor_names.data(), n_tensors);
  c10::ArrayRef<std::string> result_names(r.tensor_names.data() + n_tensors, n_results);
  TORCH_CHECK(tensors.size() == n_tensors, "kernel '", r.name, "': expected ", n_tensors,
              " tensor inputs (", join(input_names), "), got ", tensors.size());
  TORCH_CHECK(scalars.size() == n_scalars, "kernel '", r.name, "': expected ", n_scalars,
              " scalar inputs, got ", scalars.size());
  TORCH_CHECK(result_ranks.size() == n_results && result_dtypes.size() == n_results, "kernel '",
              r.name, "': expected a rank and a dtype for each of the ", n_results, " results (",
              join(result_names), "), got ", result_ranks.size(), " ranks and ",
              result_dtypes.size(), " dtypes");
  int64_t rank_sum = 0;
  for (int64_t rank : result_ranks) {
    TORCH_CHECK(rank >= 0, "kernel '", r.name, "': result ranks must be >= 0, got ", result_ranks);
    rank_sum += rank;
  }
  TORCH_CHECK(rank_sum == static_cast<int64_t>(result_shapes.size()), "kernel '", r.name,
              "': result_shapes has ", result_shapes.size(),
              " entries but result_ranks ", result_ranks, " add up to ", rank_sum);

  LaunchArgs args;
  args.grid = three_counts(r, grid, "threads_per_grid", 0);
  args.group = three_counts(r, group, "threads_per_thread_group", 1);
  const int64_t group_threads = int64_t{args.group[0]} * args.group[1] * args.group[2];
  TORCH_CHECK(group_threads <= kMaxThreadsPerGroup, "kernel '", r.name,
              "': threads_per_thread_group ", group, " has ", group_threads,
              " threads; a Metal threadgroup holds at most ", kMaxThreadsPerGroup);

  args.args.reserve(r.arg_kinds.size() + n_results);
  size_t next_tensor = 0, next_scalar = 0;
  for (size_t i = 0; i < r.arg_kinds.size(); ++i) {
    const char kind = r.arg_kinds[i];
    if (kind != 't') {
      args.args.push_back(bind_scalar(r, kind, scalars[next_scalar++], i));
      continue;
    }
    const std::string& name = input_names[next_tensor];
    const at::Tensor& t = tensors[next_tensor++];
    TORCH_CHECK(t.defined(), "kernel '", r.name, "': input '", name, "' is an undefined tensor");
    TORCH_CHECK_TYPE(supported_dtype(t.scalar_type()), "kernel '", r.name, "': input '", name,
                     "' has dtype ", t.scalar_type(),
                     ", which Metal kernels cannot take. Supported: ", kSupportedDtypes);
    TORCH_CHECK(t.device() == tensors[0].device(), "kernel '", r.name,
                "': all tensors must be on one device; input '", name, "' is on ", t.device(),
                " but '", input_names[0], "' is on ", tensors[0].device());
    check_int32_layout(r, name, t.sizes(), t.strides());
    BoundArg a;
    a.kind = BoundArg::Kind::Tensor;
    a.tensor = t;
    args.args.push_back(std::move(a));
  }

  size_t offset = 0;
  for (size_t k = 0; k < n_results; ++k) {
    const auto shape = result_shapes.slice(offset, result_ranks[k]);
    offset += result_ranks[k];
    for (int64_t s : shape) {
      TORCH_CHECK(s >= 0, "kernel '", r.name, "': result '", result_names[k],
                  "' has a negative size in its shape ", shape);
    }
    TORCH_CHECK_TYPE(supported_dtype(result_dtypes[k]), "kernel '", r.name, "': result '",
                     result_names[k], "' has dtype ", result_dtypes[k],
                     ", which Metal kernels cannot produce. Supported: ", kSupportedDtypes);
    BoundArg a;
    a.kind = BoundArg::Kind::Tensor;
    a.tensor = at::empty(shape, at::TensorOptions().dtype(result_dtypes[k]).device(device));
    check_int32_layout(r, result_names[k], a.tensor.sizes(), a.tensor.strides());
    args.args.push_back(std::move(a));
  }
  args.num_results = n_results;

  for (const BoundArg& a : args.args) {
    if (a.kind == BoundArg::Kind::Tensor && a.tensor.dim() > 0) append_meta(args.meta, a.tensor);
  }
  if (args.meta.empty()) args.meta.push_back(0);  // the parameter exists regardless
  return args;
}

at::Device launch_device(at::TensorList tensors) {
  return tensors.empty() ? at::Device(at::kCPU) : tensors[0].device();
}

std::vector<at::Tensor> results_of(LaunchArgs& args) {
  std::vector<at::Tensor> out;
  out.reserve(args.num_results);
  for (size_t i = args.args.size() - args.num_results; i < args.args.size(); ++i) {
    out.push_back(std::move(args.args[i].tensor));
  }
  return out;
}

// ---- operator implementations ----------------------------------------------

int64_t register_kernel_op(std::string name, std::string source, std::string entry,
                           std::string arg_kinds, std::vector<std::string> tensor_names,
                           std::vector<std::string> thread_attrs, int64_t options) {
  KernelRecord r;
  r.name = std::move(name);
  r.source = std::move(source);
  r.entry = std::move(entry);
  r.arg_kinds = std::move(arg_kinds);
  r.tensor_names = std::move(tensor_names);
  r.thread_attrs = std::move(thread_attrs);
  r.options = options;
  return register_kernel(std::move(r));
}

std::vector<at::Tensor> launch_meta(int64_t handle, at::TensorList tensors,
                                    c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid,
                                    at::IntArrayRef group, at::IntArrayRef result_shapes,
                                    at::IntArrayRef result_ranks,
                                    c10::ArrayRef<at::ScalarType> result_dtypes) {
  const KernelRecord& r = kernel_record(handle);
  LaunchArgs args = prepare(r, tensors, scalars, grid, group, result_shapes, result_ranks,
                            result_dtypes, at::Device(at::kMeta));
  return results_of(args);
}

int64_t cpu_compile_count_op() { return cpu::compile_count(); }
int64_t cpu_disk_cache_hits_op() { return cpu::disk_cache_hits(); }
std::string cpu_translation_unit_op(int64_t handle) {
  return cpu::translation_unit(kernel_record(handle));
}

}  // namespace

// ---- public C++ API (coreai_torch.h) -------------------------------------------

int64_t register_kernel(KernelRecord record) {
  const std::string& name = record.name;
  TORCH_CHECK(!record.entry.empty(), "kernel '", name, "': the entry name is empty");
  for (char kind : record.arg_kinds) {
    TORCH_CHECK(kind == 't' || kind == 'i' || kind == 'f' || kind == 'b', "kernel '", name,
                "': arg_kinds must be made of 't', 'i', 'f', 'b', got '", record.arg_kinds, "'");
  }
  TORCH_CHECK(record.tensor_names.size() >= count_tensor_inputs(record), "kernel '", name,
              "': arg_kinds '", record.arg_kinds, "' has ", count_tensor_inputs(record),
              " tensors but tensor_names has only ", record.tensor_names.size(), " names");
  for (size_t i = 0; i < record.thread_attrs.size(); ++i) {
    const std::string& attr = record.thread_attrs[i];
    const bool known = std::any_of(std::begin(kThreadAttributes), std::end(kThreadAttributes),
                                   [&](const char* a) { return attr == a; });
    if (!known) {
      std::string all;
      for (const char* a : kThreadAttributes) all += std::string(all.empty() ? "" : ", ") + a;
      TORCH_CHECK(false, "kernel '", name, "': metal_params entry ", i,
                  " has the unknown thread attribute '", attr, "'. Known attributes: ", all);
    }
  }
  TORCH_CHECK((record.options & ~(kOptionDebug | kOptionFastMath)) == 0, "kernel '", name,
              "': unknown option bits in ", record.options);
  return registry().add(std::move(record));
}

const KernelRecord& kernel_record(int64_t handle) { return registry().get(handle); }

std::vector<at::Tensor> launch(int64_t handle, at::TensorList tensors,
                               c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid,
                               at::IntArrayRef group, at::IntArrayRef result_shapes,
                               at::IntArrayRef result_ranks,
                               c10::ArrayRef<at::ScalarType> result_dtypes) {
  const KernelRecord& r = kernel_record(handle);
  const at::Device device = launch_device(tensors);
  if (device.is_meta()) {
    return launch_meta(handle, tensors, scalars, grid, group, result_shapes, result_ranks,
                       result_dtypes);
  }
  TORCH_CHECK(device.is_cpu() || device.is_mps() || device.is_cuda(), "kernel '", r.name,
              "': coreai_torch has no backend for ", device.type(),
              " tensors; it runs kernels on CPU, CUDA and MPS tensors. Move the inputs with "
              ".cpu().");
#ifndef COREAI_TORCH_WITH_MPS
  TORCH_CHECK(!device.is_mps(), "kernel '", r.name,
              "': this build of coreai_torch has no MPS backend (it is built on macOS only); "
              "move the inputs to the CPU with .cpu() or install a macOS build");
#endif
  LaunchArgs args =
      prepare(r, tensors, scalars, grid, group, result_shapes, result_ranks, result_dtypes, device);
#ifdef COREAI_TORCH_WITH_MPS
  if (device.is_mps()) {
    mps::run(handle, r, args);
    return results_of(args);
  }
#endif
  if (device.is_cuda()) {
    cuda::run(handle, r, args);
    return results_of(args);
  }
  cpu::run(handle, r, args);
  return results_of(args);
}

TORCH_LIBRARY(coreai_torch, m) {
  m.def(
      "register_kernel(str name, str source, str entry, str arg_kinds, str[] tensor_names, "
      "str[] thread_attrs, int options) -> int",
      &register_kernel_op);
  m.def(
      "launch(int handle, Tensor[] tensors, Scalar[] scalars, int[] grid, int[] group, "
      "int[] result_shapes, int[] result_ranks, ScalarType[] result_dtypes) -> Tensor[]");
  // Test and debugging hooks of the CPU backend's JIT.
  m.def("cpu_compile_count() -> int", &cpu_compile_count_op);
  m.def("cpu_disk_cache_hits() -> int", &cpu_disk_cache_hits_op);
  m.def("cpu_translation_unit(int handle) -> str", &cpu_translation_unit_op);
}

// One implementation serves every device: it picks the backend itself and
// names the kernel when there is none (CUDA, XPU, MPS in a Linux build, ...).
TORCH_LIBRARY_IMPL(coreai_torch, CompositeExplicitAutograd, m) { m.impl("launch", &launch); }
TORCH_LIBRARY_IMPL(coreai_torch, Meta, m) { m.impl("launch", &launch_meta); }

}  // namespace coreai_torch
