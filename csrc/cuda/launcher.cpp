// cuda::run: launches a validated kernel call on PyTorch's current CUDA stream
// of the tensors' device, asynchronously (no host synchronisation), with
// Metal's dispatchThreads semantics (docs/cuda.md, "Launch").
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "cuda/driver.h"
#include "cuda/target.h"
#include "specializations/launch_args.h"
#include "msl/coreai_msl/cuda_abi.h"

namespace coreai_torch::cuda {
namespace {

// CUDA's grid limits: 2^31 - 1 blocks along x, 65535 along y and z.
constexpr uint64_t kMaxGridX = (uint64_t{1} << 31) - 1;
constexpr uint64_t kMaxGridYZ = 65535;

// CUDA grid dimensions for the threadgroups of `dispatch`, folding them onto
// a two-dimensional grid when they exceed CUDA's limits (cuda_abi.h).
std::array<unsigned, 3> grid_of(const KernelRecord& record, coreai_cuda_dispatch& dispatch) {
  const uint64_t total = uint64_t{dispatch.groups[0]} * dispatch.groups[1] * dispatch.groups[2];
  if (dispatch.groups[0] <= kMaxGridX && dispatch.groups[1] <= kMaxGridYZ &&
      dispatch.groups[2] <= kMaxGridYZ) {
    dispatch.folded = 0;
    return {dispatch.groups[0], dispatch.groups[1], dispatch.groups[2]};
  }
  TORCH_CHECK(total <= kMaxGridX * kMaxGridYZ, "kernel '", record.name, "': the grid has ", total,
              " threadgroups, more than the CUDA backend can launch at once (",
              kMaxGridX * kMaxGridYZ, "); use larger threadgroups or split the launch");
  dispatch.folded = 1;
  const uint64_t x = std::min(total, kMaxGridX);
  return {static_cast<unsigned>(x), static_cast<unsigned>((total + x - 1) / x), 1};
}

// Whether every SIMD-group of the launch has 32 lanes: every threadgroup size
// that occurs (full, or cut at the grid edge along any of the dimensions) is
// a multiple of 32.
bool whole_simdgroups(const coreai_cuda_dispatch& d) {
  for (unsigned cut = 0; cut < 8; ++cut) {
    uint64_t threads = 1;
    for (int k = 0; k < 3; ++k) {
      const uint32_t edge = d.grid[k] % d.group[k];
      threads *= (cut >> k & 1) != 0 && edge != 0 ? edge : d.group[k];
    }
    if (threads % 32 != 0) return false;
  }
  return true;
}

// Whether the launch may take the form compiled for aligned tensors
// (LaunchForm::aligned_tensors, which entry_shim tells the optimizer): every
// tensor's data 16-byte aligned, and every stride but the innermost (the
// metadata's strides are in elements, in Metal order) a multiple of 16 bytes.
bool aligned_tensors(const KernelRecord& record, const LaunchArgs& args) {
  size_t tensor = 0;  // index into record.tensor_ranks and record.layout.offsets
  for (const BoundArg& a : args.args) {
    if (a.kind != BoundArg::Kind::Tensor) continue;
    if (reinterpret_cast<uintptr_t>(a.tensor.data_ptr()) % 16 != 0) return false;
    const int64_t rank = record.tensor_ranks[tensor];
    const int64_t offset = record.layout.offsets[tensor];
    const int64_t element = static_cast<int64_t>(a.tensor.element_size());
    for (int64_t d = 1; d < rank; ++d) {
      if (args.meta[offset + rank + d] * element % 16 != 0) return false;
    }
    ++tensor;
  }
  return true;
}

// The Metal threads per CUDA thread a launch asks for (LaunchForm::steps):
// groups of more than 256 threads run on blocks of 256, where the SMs still
// hold several blocks and each CUDA thread runs up to four Metal threads
// (docs/cuda.md, "Several Metal threads per CUDA thread"). Only whole
// threadgroups: each step's Metal thread then exists.
int steps_of(const coreai_cuda_dispatch& d) {
  constexpr uint32_t block = LaunchForm::kStepThreads;
  if (d.whole_groups == 0 || d.threads <= block || d.threads % block != 0) return 1;
  return static_cast<int>(std::min<uint32_t>(d.threads / block, LaunchForm::kMaxSteps));
}

}  // namespace

void run(int64_t /*handle*/, const KernelRecord& record, LaunchArgs& args) {
  TORCH_CHECK(!(record.options & kOptionDebug), "kernel '", record.name,
              "': debug mode (bounds checks and the unwritten-result report) is a feature of the "
              "CPU backend; run the kernel on CPU tensors to debug it, or set debug = False to "
              "run it on CUDA");
  // launch.cpp has checked that every tensor is on this one device.
  at::Device device(at::kCUDA);
  for (const BoundArg& a : args.args) {
    if (a.kind == BoundArg::Kind::Tensor) {
      device = a.tensor.device();
      break;
    }
  }
  TORCH_INTERNAL_ASSERT(device.is_cuda() && device.has_index(), "kernel '", record.name,
                        "': the CUDA backend got tensors on ", device);
  coreai_cuda_dispatch dispatch{};
  uint32_t threads = 1;
  for (int k = 0; k < 3; ++k) {
    dispatch.grid[k] = args.grid[k];
    dispatch.group[k] = args.group[k];
    dispatch.groups[k] = static_cast<uint32_t>((uint64_t{args.grid[k]} + args.group[k] - 1) /
                                               args.group[k]);
    threads *= args.group[k];
  }
  if (args.grid[0] == 0 || args.grid[1] == 0 || args.grid[2] == 0) return;  // nothing runs
  const std::array<unsigned, 3> grid = grid_of(record, dispatch);
  dispatch.threads = threads;
  dispatch.whole_groups = dispatch.folded == 0 && args.grid[0] % args.group[0] == 0 &&
                          args.grid[1] % args.group[1] == 0 && args.grid[2] % args.group[2] == 0;

  const c10::DeviceGuard guard(device);
  make_primary_context_current(device.index());
  LaunchForm form{whole_simdgroups(dispatch), aligned_tensors(record, args)};
  form.steps = steps_of(dispatch);
  const LoadedKernel& kernel = kernel_module(record, device.index(), threads, form)
                                   .kernel(record, device.index(), threads, form);
  TORCH_INTERNAL_ASSERT(args.meta.size() == static_cast<size_t>(record.layout.length));

  // cuLaunchKernel takes the address of each parameter's value.
  c10::SmallVector<void*, 16> pointers;
  c10::SmallVector<void*, 18> params;
  pointers.reserve(args.args.size());  // never reallocated below: params point into it
  for (BoundArg& a : args.args) {
    switch (a.kind) {
      case BoundArg::Kind::Tensor:
        pointers.push_back(a.tensor.data_ptr());
        params.push_back(&pointers.back());
        break;
      case BoundArg::Kind::Int:
        params.push_back(&a.int_value);
        break;
      case BoundArg::Kind::Float:
        params.push_back(&a.float_value);
        break;
      case BoundArg::Kind::Bool:
        params.push_back(&a.bool_value);
        break;
    }
  }
  params.push_back(args.meta.data());
  params.push_back(&dispatch);

  const c10::Stream stream = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device);
  check(driver().cuLaunchKernel(kernel.function, grid[0], grid[1], grid[2],
                                threads / static_cast<uint32_t>(kernel.steps), 1, 1, 0,
                                static_cast<CUstream>(stream.native_handle()), params.data(),
                                nullptr),
        "kernel '" + record.name + "': cuLaunchKernel");
}

}  // namespace coreai_torch::cuda
