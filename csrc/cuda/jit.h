// The CUDA backend's JIT (docs/cuda.md): a registered kernel's buffer
// rendering becomes a CUDA device translation unit over the same msl/ headers
// as the CPU backend, which clang compiles to PTX; the driver turns the PTX
// into machine code for the GPU. PTX and machine code are cached on disk, the
// loaded kernel in the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "coreai_torch.h"
#include "cuda/driver.h"

namespace coreai_torch::cuda {

// One registered kernel, loaded on one GPU in one compiled form.
struct LoadedKernel {
  CUfunction function = nullptr;
  int max_threads = 0;         // threads per threadgroup it can run with
  size_t meta_entries = 0;     // int32 entries of its metadata parameter
};

// The kernel of `handle` for a launch of `group_threads` threads per group on
// `device`, whose primary context must be current. Compiled and loaded on
// first use; later calls are a table lookup. A kernel is first compiled with
// no register limit; a launch with more threads per group than that form
// allows gets a second form compiled for 1024 threads. Throws
// "MetalCompileError: ..." when the source does not compile (again on every
// later call, without recompiling).
const LoadedKernel& loaded_kernel(int64_t handle, const KernelRecord& record, int device,
                                  uint32_t group_threads);

// The translation unit compiled for `record`; `bounded`: the form for 1024
// threads per group (exposed for tests and debugging).
std::string translation_unit(const KernelRecord& record, bool bounded);

// The PTX of `record` for GPU architecture `arch` (sm_XY), from the disk cache
// or compiled. Needs no GPU: this is how CI checks that every kernel compiles
// for the GPU.
std::string ptx_for(const KernelRecord& record, const std::string& arch, bool bounded);

// Entries of the metadata buffer the rendering reads: one past the largest
// coreai_meta[k] it names, and at least 1 (internals.md §1).
size_t metadata_entries(const std::string& source);

// Counters for tests: kernel compiles run, and kernels found in the disk cache.
int64_t compile_count();
int64_t disk_cache_hits();

}  // namespace coreai_torch::cuda
