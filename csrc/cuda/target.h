// The CUDA backend's JIT (docs/cuda.md): a registered kernel's buffer
// rendering becomes a CUDA device translation unit over the same msl/ headers
// as the CPU backend, which clang compiles to PTX; the driver turns the PTX
// into machine code for the GPU. PTX and machine code are cached on disk (the
// compile pipeline's disk cache, jit/cache_dir.h), the loaded kernel in the
// record's CUDA slot.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coreai_torch.h"
#include "cuda/driver.h"

namespace coreai_torch::cuda {

// A registered kernel loaded on one GPU in one compiled form.
struct LoadedKernel {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  int max_threads = 0;  // threads per threadgroup it can run with
};

// The CUDA artifact of a record (its slot in KernelRecord::artifacts): the
// kernel loaded on each GPU that has run it. A kernel is first compiled with
// no register limit; a launch with more threads per group than that form
// allows gets a second form compiled for 1024 threads. A kernel that uses
// SIMD-group matrices has these forms twice: for launches whose SIMD-groups
// all have 32 lanes, where its matrices also keep the matrix units' layout,
// and for launches with partial SIMD-groups (coreai_msl/simdgroup_matrix.h).
// The modules are unloaded when the record goes.
class KernelModule {
 public:
  explicit KernelModule(const KernelRecord& record);
  KernelModule(const KernelModule&) = delete;
  KernelModule& operator=(const KernelModule&) = delete;
  ~KernelModule();

  // The kernel for a launch of `group_threads` threads per threadgroup on
  // `device`, whose primary context must be current; `whole_simdgroups`: no
  // SIMD-group of the launch has fewer than 32 lanes. Compiled and loaded on
  // first use; later calls read an atomic. Throws "MetalCompileError: ..."
  // when the kernel does not compile for this GPU (again on every later call).
  const LoadedKernel& kernel(const KernelRecord& record, int device, uint32_t group_threads,
                             bool whole_simdgroups) const;

  // Whether the kernel is loaded on `device` (a launch there compiles nothing).
  bool loaded_on(int device) const;

 private:
  // One GPU's kernels, by form: [1] for launches of whole SIMD-groups of a
  // kernel with SIMD-group matrices, [0] for all others. Filled under
  // `mutex_`, read through `free` without it.
  struct OnDevice {
    std::array<std::atomic<const LoadedKernel*>, 2> free{};
    std::array<LoadedKernel, 2> free_kernel;     // compiled with no register limit
    std::array<LoadedKernel, 2> bounded_kernel;  // compiled for 1024 threads per threadgroup
    std::string error;                           // a compile failure for this GPU, raised again
  };
  static constexpr int kMaxDevices = 128;  // c10 numbers devices with an int8_t

  OnDevice& on(int device) const;

  const bool matrices_;  // the source uses SIMD-group matrices
  mutable std::mutex mutex_;
  mutable std::array<std::atomic<OnDevice*>, kMaxDevices> devices_{};
  mutable std::vector<std::unique_ptr<OnDevice>> owned_;
  mutable std::vector<std::pair<int, CUmodule>> modules_;  // to unload, with their device
};

// The record's module: its slot, built on the first CUDA launch (the kernel,
// in the form for launches with or without partial SIMD-groups, compiled and
// loaded on `device`, whose primary context must be current).
const KernelModule& kernel_module(const KernelRecord& record, int device, bool whole_simdgroups);

// The translation unit compiled for `record`; `bounded`: the form for 1024
// threads per group; `whole_simdgroups`: the form for launches without partial
// SIMD-groups (exposed for tests and debugging).
std::string translation_unit(const KernelRecord& record, bool bounded, bool whole_simdgroups);

// The PTX of `record` for GPU architecture `arch` (sm_XY), from the disk cache
// or compiled. Needs no GPU: this is how CI checks that every kernel compiles
// for the GPU.
std::string ptx_for(const KernelRecord& record, const std::string& arch, bool bounded,
                    bool whole_simdgroups);

// Whether `source` uses SIMD-group matrices, whose code differs between the
// forms for whole and partial SIMD-groups (a name it spells).
bool uses_simdgroup_matrices(const std::string& source);

// Counters for tests: clang runs, PTX and machine code found in the disk
// cache, and modules loaded now.
int64_t compile_count();
int64_t disk_cache_hits();
int64_t loaded_modules();

}  // namespace coreai_torch::cuda
