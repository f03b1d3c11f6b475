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

// Which compiled form of a kernel a launch takes (docs/cuda.md, "Launch
// forms"). Each fact lets the compiler prove more; the launcher checks both
// per launch.
struct LaunchForm {
  // No SIMD-group of the launch has fewer than 32 lanes. Changes the code of
  // kernels that use SIMD-group matrices only (their matrices keep the matrix
  // units' layout); for the others it is ignored.
  bool whole_simdgroups = false;
  // Every tensor's data starts at a 16-byte boundary and each of its strides
  // but the innermost spans a multiple of 16 bytes, so a vector access whose
  // address is built from them is proven aligned and needs no run-time test.
  bool aligned_tensors = false;
  // Metal threads per CUDA thread (1 to kMaxSteps): the steps form of a
  // kernel with barriers (cpu::cuda_steps_form), whose block holds
  // threadgroup size / steps CUDA threads. The launcher asks for it where
  // every block is a whole threadgroup of more than kStepThreads threads, a
  // multiple of kStepThreads; the module keeps 1 for kernels the form
  // refuses.
  int steps = 1;

  static constexpr int kMaxSteps = 4;
  static constexpr uint32_t kStepThreads = 256;  // CUDA threads per block in the steps form
  static constexpr int kCount = 4 * kMaxSteps;
  int index() const {
    return (steps - 1) * 4 + (whole_simdgroups ? 2 : 0) + (aligned_tensors ? 1 : 0);
  }
  // The steps of the form with index() `index`.
  static int steps_of_index(int index) { return index / 4 + 1; }
};

// A registered kernel loaded on one GPU in one compiled form.
struct LoadedKernel {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  int max_threads = 0;  // CUDA threads per block it can run with
  int steps = 1;        // Metal threads per CUDA thread (LaunchForm::steps)
};

// The CUDA artifact of a record (its slot in KernelRecord::artifacts): the
// kernel loaded on each GPU that has run it. A kernel is first compiled with
// no register limit; a launch with more threads per group than that form
// allows gets a second form compiled for 1024 threads. Each LaunchForm a
// launch asks for has these two of its own. The modules are unloaded when the
// record goes.
class KernelModule {
 public:
  explicit KernelModule(const KernelRecord& record);
  KernelModule(const KernelModule&) = delete;
  KernelModule& operator=(const KernelModule&) = delete;
  ~KernelModule();

  // The kernel for a launch of `group_threads` threads per threadgroup on
  // `device`, whose primary context must be current, in the form `form`
  // (with one step where the kernel has no steps form). Compiled and loaded
  // on first use; later calls read an atomic. Throws
  // "MetalCompileError: ..." when the kernel does not compile for this GPU
  // (again on every later call).
  const LoadedKernel& kernel(const KernelRecord& record, int device, uint32_t group_threads,
                             LaunchForm form) const;

  // Whether the kernel is loaded on `device` (a launch there compiles nothing).
  bool loaded_on(int device) const;

  // The LaunchForm::steps of the forms loaded on `device`, in increasing
  // order (for tests: which form a launch took).
  std::vector<int> loaded_steps(int device) const;

 private:
  // One GPU's kernels, by LaunchForm::index(). Filled under `mutex_`, read
  // through `free` without it.
  struct OnDevice {
    std::array<std::atomic<const LoadedKernel*>, LaunchForm::kCount> free{};
    std::array<LoadedKernel, LaunchForm::kCount> free_kernel;     // no register limit
    std::array<LoadedKernel, LaunchForm::kCount> bounded_kernel;  // for 1024 threads per group
    std::string error;                           // a compile failure for this GPU, raised again
  };
  static constexpr int kMaxDevices = 128;  // c10 numbers devices with an int8_t

  OnDevice& on(int device) const;

  const bool matrices_;  // the source uses SIMD-group matrices
  const bool steps_;     // the kernel has a steps form (and COREAI_TORCH_CUDA_STEPS is not 0)
  mutable std::mutex mutex_;
  mutable std::array<std::atomic<OnDevice*>, kMaxDevices> devices_{};
  mutable std::vector<std::unique_ptr<OnDevice>> owned_;
  mutable std::vector<std::pair<int, CUmodule>> modules_;  // to unload, with their device
};

// The record's module: its slot, built on the first CUDA launch (the kernel,
// in the form `form` for `group_threads` threads per threadgroup, compiled
// and loaded on `device`, whose primary context must be current).
const KernelModule& kernel_module(const KernelRecord& record, int device, uint32_t group_threads,
                                  LaunchForm form);

// Why `record` keeps one Metal thread per CUDA thread, or empty where it has
// a steps form (LaunchForm::steps); for tests and the form log.
std::string no_steps_reason(const KernelRecord& record);

// The translation unit compiled for `record`; `bounded`: the form for 1024
// threads per group (exposed for tests and debugging).
std::string translation_unit(const KernelRecord& record, bool bounded, LaunchForm form);

// The PTX of `record` for GPU architecture `arch` (sm_XY), from the disk cache
// or compiled. Needs no GPU: this is how CI checks that every kernel compiles
// for the GPU.
std::string ptx_for(const KernelRecord& record, const std::string& arch, bool bounded,
                    LaunchForm form);

// Whether `source` uses SIMD-group matrices, whose code differs between the
// forms for whole and partial SIMD-groups (a name it spells).
bool uses_simdgroup_matrices(const std::string& source);

// Counters for tests: clang runs, PTX and machine code found in the disk
// cache, and modules loaded now.
int64_t compile_count();
int64_t disk_cache_hits();
int64_t loaded_modules();

}  // namespace coreai_torch::cuda
