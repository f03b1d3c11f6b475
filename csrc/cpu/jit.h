// The CPU backend's JIT: a registered kernel's buffer rendering becomes a
// translation unit (docs/internals.md §3), which clang++ compiles into a shared
// library that is cached on disk and loaded into the process.
#pragma once

#include <cstdint>
#include <string>

#include "coreai_torch.h"
#include "msl/coreai_msl/cpu_abi.h"

namespace coreai_torch::cpu {

// A loaded kernel library. Lives until the process exits.
struct KernelLibrary {
  coreai_cpu_kernel_run_group_fn run_group = nullptr;
  coreai_cpu_kernel_run_thread_fn run_thread = nullptr;
  bool fibers = false;  // the body synchronises threads: run it in fiber mode
  std::string path;     // the cached shared library
};

// The library of `handle`, compiled or loaded on first use; later calls are a
// table lookup. Throws c10::Error "MetalCompileError: ..." when the source does
// not compile (again on every later call, without recompiling).
const KernelLibrary& kernel_library(int64_t handle, const KernelRecord& record);

// The translation unit compiled for `record` (exposed for tests and debugging).
std::string translation_unit(const KernelRecord& record);

// The directory of cached kernel libraries: $COREAI_TORCH_CACHE_DIR, else
// $XDG_CACHE_HOME/coreai_torch, else ~/.cache/coreai_torch. Created 0700.
std::string cache_directory();

// The directory holding coreai_msl.h: $COREAI_TORCH_MSL_DIR, else msl/ next
// to the loaded _C library (an installed wheel), else the source tree's.
std::string msl_directory();

// The start of every compile failure's message (coreai_torch/errors.py).
inline constexpr const char* kCompileErrorMarker = "MetalCompileError: ";

// Cache helpers shared with the CUDA backend's JIT (csrc/cuda/jit.cpp).
// A digest of every file under the msl directory (part of every cache key).
const std::string& headers_digest(const std::string& msl_dir);
// Writes `contents` to `path` with private permissions (0600).
void write_private_file(const std::string& path, const std::string& contents);
// A suffix that makes temporary file names unique between processes and threads.
std::string unique_suffix();

// Counters for tests: compiler runs, and libraries found in the disk cache.
int64_t compile_count();
int64_t disk_cache_hits();

// The services handed to every kernel library (csrc/cpu/launcher.cpp).
const coreai_cpu_runtime& runtime_table();

}  // namespace coreai_torch::cpu
