// A launch of a registered specialization: checked against its record,
// results allocated, metadata built from the record's layout, then run on the
// backend of the tensors' device (docs/internals.md §2).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <limits>

#include "coreai_torch.h"
#include "specializations/launch_args.h"

namespace coreai_torch {
namespace {

std::string dtype_name(at::ScalarType t) { return std::string(c10::getDtypeNames(t).first); }

std::array<uint32_t, 3> three_counts(const KernelRecord& r, at::IntArrayRef v, const char* what,
                                     int64_t minimum) {
  TORCH_CHECK_VALUE(v.size() == 3, "kernel '", r.name, "': ", what,
                    " must have 3 entries (x, y, z), got ", v.size(), ": ", v);
  std::array<uint32_t, 3> out{};
  for (size_t d = 0; d < 3; ++d) {
    TORCH_CHECK_VALUE(v[d] >= minimum && v[d] <= std::numeric_limits<uint32_t>::max(),
                      "kernel '", r.name, "': ", what, " entries must be in [", minimum,
                      ", 2^32 - 1] (Metal counts threads in 32 bits), got ", v);
    out[d] = static_cast<uint32_t>(v[d]);
  }
  return out;
}

void check_int32_layout(const KernelRecord& r, const std::string& name, at::IntArrayRef sizes,
                        at::IntArrayRef strides) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (size_t d = 0; d < sizes.size(); ++d) {
    TORCH_CHECK_VALUE(sizes[d] <= kMax && strides[d] <= kMax && strides[d] >= 0, "kernel '",
                      r.name, "': tensor '", name, "' has sizes ", sizes, " and strides ",
                      strides,
                      "; Metal tensor extents and strides are 32-bit, so each must be at most ",
                      kMax);
  }
}

// Writes the extents then the strides of `t` in Metal order (reversed) at `offset`.
void write_meta(std::vector<int32_t>& meta, int64_t offset, const at::Tensor& t) {
  const int64_t rank = t.dim();
  for (int64_t d = 0; d < rank; ++d) {
    meta[offset + d] = static_cast<int32_t>(t.size(rank - 1 - d));
    meta[offset + rank + d] = static_cast<int32_t>(t.stride(rank - 1 - d));
  }
}

BoundArg bind_scalar(const KernelRecord& r, const ArgSpec& arg, const c10::Scalar& s,
                     LaunchChecks checks) {
  // The messages are only built on failure: this runs on every launch.
  const bool check = checks == LaunchChecks::All;
  BoundArg a;
  switch (arg.kind) {
    case ArgKind::Int: {
      TORCH_CHECK_TYPE(!check || s.isIntegral(/*includeBool=*/false), "kernel '", r.name,
                       "': input '", arg.name, "' is an int parameter, got a ", s.type(),
                       " scalar");
      const int64_t v = s.toLong();
      TORCH_CHECK_VALUE(!check || (v >= kScalarIntMin && v <= kScalarIntMax), "kernel '", r.name,
                        "': int input '", arg.name, "' = ", v, " does not fit Metal's 32-bit int (",
                        kScalarIntMin, " .. ", kScalarIntMax, ")");
      a.kind = BoundArg::Kind::Int;
      a.int_value = static_cast<int32_t>(v);
      break;
    }
    case ArgKind::Float:
      TORCH_CHECK_TYPE(!check || s.isFloatingPoint() || s.isIntegral(/*includeBool=*/false),
                       "kernel '", r.name, "': input '", arg.name, "' is a float parameter, got a ",
                       s.type(), " scalar");
      a.kind = BoundArg::Kind::Float;
      a.float_value = static_cast<float>(s.toDouble());
      break;
    case ArgKind::Bool:
      TORCH_CHECK_TYPE(!check || s.isBoolean(), "kernel '", r.name, "': input '", arg.name,
                       "' is a bool parameter, got a ", s.type(), " scalar");
      a.kind = BoundArg::Kind::Bool;
      a.bool_value = s.toBool();
      break;
    case ArgKind::Tensor:
      TORCH_INTERNAL_ASSERT(false, "kernel '", r.name, "': a tensor bound as a scalar");
  }
  return a;
}

// A tensor whose data is not what its values are: a lazily negated or
// conjugated view (its storage holds the un-negated values) or a ZeroTensor
// (no storage at all). The kernel reads memory, so it gets the values.
at::Tensor materialized(const at::Tensor& t) {
  if (t._is_zerotensor()) return at::zeros(t.sizes(), t.options());
  if (t.is_neg() || t.is_conj()) return t.resolve_conj().resolve_neg();
  return t;
}

at::Device launch_device(at::TensorList tensors) {
  return tensors.empty() ? at::Device(at::kCPU) : tensors[0].device();
}

// Checks a launch of `r` and allocates its results on `device`; the metadata
// is built from the tensors as they are (inputs need not be contiguous).
LaunchArgs prepare(const KernelRecord& r, at::TensorList tensors,
                   c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid, at::IntArrayRef group,
                   at::IntArrayRef result_shapes, const at::Device& device, LaunchChecks checks) {
  const bool check = checks == LaunchChecks::All;
  const size_t n_scalars = r.inputs.size() - r.tensor_inputs;
  if (check) {
    TORCH_CHECK_VALUE(tensors.size() == r.tensor_inputs, "kernel '", r.name, "': expected ",
                      r.tensor_inputs, " tensor inputs, got ", tensors.size());
    TORCH_CHECK_VALUE(scalars.size() == n_scalars, "kernel '", r.name, "': expected ", n_scalars,
                      " scalar inputs, got ", scalars.size());
    int64_t rank_sum = 0;
    for (const ArgSpec& res : r.results) rank_sum += res.rank;
    TORCH_CHECK_VALUE(rank_sum == static_cast<int64_t>(result_shapes.size()), "kernel '", r.name,
                      "': result_shapes has ", result_shapes.size(),
                      " entries, but the results' ranks add up to ", rank_sum);
  }

  LaunchArgs args;
  args.grid = three_counts(r, grid, "threads_per_grid", 0);
  args.group = three_counts(r, group, "threads_per_thread_group", 1);
  const int64_t group_threads = int64_t{args.group[0]} * args.group[1] * args.group[2];
  TORCH_CHECK_VALUE(group_threads <= kMaxThreadsPerThreadgroup, "kernel '", r.name,
                    "': threads_per_thread_group ", group, " has ", group_threads,
                    " threads; a Metal threadgroup holds at most ", kMaxThreadsPerThreadgroup);

  args.args.reserve(r.inputs.size() + r.results.size());
  size_t next_tensor = 0, next_scalar = 0;
  for (const ArgSpec& arg : r.inputs) {
    if (arg.kind != ArgKind::Tensor) {
      args.args.push_back(bind_scalar(r, arg, scalars[next_scalar++], checks));
      continue;
    }
    const at::Tensor& t = tensors[next_tensor++];
    if (check) {
      TORCH_CHECK_VALUE(t.defined(), "kernel '", r.name, "': input '", arg.name,
                        "' is an undefined tensor");
      TORCH_CHECK_VALUE(t.device() == tensors[0].device(), "kernel '", r.name,
                        "': all tensors must be on one device; input '", arg.name, "' is on ",
                        t.device(), " but '", r.tensor_names[0], "' is on ",
                        tensors[0].device());
      TORCH_CHECK_TYPE(t.scalar_type() == arg.dtype, "kernel '", r.name, "': input '", arg.name,
                       "' has dtype ", dtype_name(t.scalar_type()),
                       ", but this specialization was registered for ", dtype_name(arg.dtype),
                       "; launch the specialization registered for the dtypes you pass");
      TORCH_CHECK_VALUE(t.dim() == arg.rank, "kernel '", r.name, "': input '", arg.name,
                        "' has rank ", t.dim(), " (shape ", t.sizes(),
                        "), but this specialization was registered for rank ", arg.rank,
                        "; launch the specialization registered for the ranks you pass");
    }
    check_int32_layout(r, arg.name, t.sizes(), t.strides());
    BoundArg a;
    a.kind = BoundArg::Kind::Tensor;
    a.tensor = check ? materialized(t) : t;
    args.args.push_back(std::move(a));
  }

  size_t offset = 0;
  for (const ArgSpec& res : r.results) {
    const auto shape = result_shapes.slice(offset, res.rank);
    offset += res.rank;
    for (int64_t s : shape) {
      TORCH_CHECK_VALUE(s >= 0, "kernel '", r.name, "': result '", res.name,
                        "' has a negative size in its shape ", shape);
    }
    BoundArg a;
    a.kind = BoundArg::Kind::Tensor;
    a.tensor = at::empty(shape, at::TensorOptions().dtype(res.dtype).device(device));
    check_int32_layout(r, res.name, a.tensor.sizes(), a.tensor.strides());
    args.args.push_back(std::move(a));
  }
  args.num_results = r.results.size();

  args.meta.assign(static_cast<size_t>(r.layout.length), 0);
  size_t tensor_index = 0;
  for (const BoundArg& a : args.args) {
    if (a.kind != BoundArg::Kind::Tensor) continue;
    const int64_t at_offset = r.layout.offsets[tensor_index++];
    if (at_offset >= 0) write_meta(args.meta, at_offset, a.tensor);
  }
  return args;
}

std::vector<at::Tensor> results_of(LaunchArgs& args) {
  std::vector<at::Tensor> out;
  out.reserve(args.num_results);
  for (size_t i = args.args.size() - args.num_results; i < args.args.size(); ++i) {
    out.push_back(std::move(args.args[i].tensor));
  }
  return out;
}

}  // namespace

std::vector<at::Tensor> launch_record(int64_t handle, const KernelRecord& r,
                                      at::TensorList tensors, c10::ArrayRef<c10::Scalar> scalars,
                                      at::IntArrayRef grid, at::IntArrayRef group,
                                      at::IntArrayRef result_shapes, LaunchChecks checks) {
  const at::Device device = launch_device(tensors);
  LaunchArgs args =
      prepare(r, tensors, scalars, grid, group, result_shapes, device, checks);
  if (device.is_meta()) return results_of(args);  // tracing: the results' metadata only
  if (device.is_cuda()) {
    cuda::run(handle, r, args);
    return results_of(args);
  }
#ifdef COREAI_TORCH_WITH_MPS
  if (device.is_mps()) {
    mps::run(handle, r, args);
    return results_of(args);
  }
#endif
  TORCH_CHECK_VALUE(device.is_cpu(), "kernel '", r.name, "': coreai_torch has no backend for ",
                    device.type(), " tensors",
#ifdef COREAI_TORCH_WITH_MPS
                    "; it runs kernels on CPU, CUDA and MPS tensors.",
#else
                    "; this build runs kernels on CPU and CUDA tensors (MPS needs a macOS build).",
#endif
                    " Move the inputs with .cpu(), or run the reference (execution_mode "
                    "'reference')");
  cpu::run(handle, r, args);
  return results_of(args);
}

std::vector<at::Tensor> launch_meta(const KernelRecord& record, at::TensorList tensors,
                                    c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid,
                                    at::IntArrayRef group, at::IntArrayRef result_shapes) {
  LaunchArgs args = prepare(record, tensors, scalars, grid, group, result_shapes,
                            at::Device(at::kMeta), LaunchChecks::All);
  return results_of(args);
}

std::vector<at::Tensor> launch(int64_t handle, at::TensorList tensors,
                               c10::ArrayRef<c10::Scalar> scalars, at::IntArrayRef grid,
                               at::IntArrayRef group, at::IntArrayRef result_shapes) {
  const std::shared_ptr<const KernelRecord> record = kernel_record(handle);
  return launch_record(handle, *record, tensors, scalars, grid, group, result_shapes,
                       LaunchChecks::All);
}

}  // namespace coreai_torch
