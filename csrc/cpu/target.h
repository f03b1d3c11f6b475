// The CPU target: a registered kernel's buffer rendering becomes a translation
// unit (docs/internals.md §3) with the entry code of its execution form, which
// the compile pipeline (jit/pipeline.h) turns into a cached shared library with
// the CPU's flags, and which is loaded into the process here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coreai_torch.h"
#include "cpu/stack_usage.h"
#include "cpu/group_form.h"
#include "source/metal_fidelity.h"
#include "msl/coreai_msl/cpu_abi.h"

namespace coreai_torch::cpu {

// A loaded kernel library: the CPU artifact of a record (its slot in
// KernelRecord::artifacts). Unloaded (dlclose) when the record goes.
struct KernelLibrary {
  KernelLibrary() = default;
  KernelLibrary(KernelLibrary&& other) noexcept;
  KernelLibrary& operator=(KernelLibrary&&) = delete;
  KernelLibrary(const KernelLibrary&) = delete;
  ~KernelLibrary();

  coreai_cpu_kernel_run_group_fn run_group = nullptr;    // loop mode
  coreai_cpu_kernel_run_fibers_fn run_fibers = nullptr;  // fiber mode
  bool fibers = false;      // the body synchronises threads: run it in fiber mode
  ExecutionForm form = ExecutionForm::Loop;  // how its threads run (group_form.h)
  StackNeeds stack;         // stack its code needs, measured when it was compiled
  std::vector<source::ThreadgroupVariable> threadgroup_variables;  // as the library notes them
  std::string path;         // the cached shared library (for messages and tests)
  void* handle = nullptr;   // dlopen's handle, closed by the destructor
};

// The library of `record`, compiled or loaded on its first launch; later calls
// read the record's slot. Throws c10::Error "MetalCompileError: ..." when the
// source does not compile (again on every later call, without recompiling); any
// other failure (the compiler killed, timed out or failing without a diagnostic
// about the source, a full disk) is thrown as is and retried on the next call.
const KernelLibrary& kernel_library(const KernelRecord& record);

// The flags every kernel is compiled with on this machine (its instruction
// set included), before those of its execution form.
std::vector<std::string> kernel_compile_flags();

// The path of the library loaded for `record`; empty before its first launch.
std::string loaded_library_path(const KernelRecord& record);

// The translation unit compiled for `record` (exposed for tests and debugging),
// in the form `form` or the one the record's source chooses.
std::string translation_unit(const KernelRecord& record);
std::string translation_unit(const KernelRecord& record, const FormChoice& form);

// The form of the library loaded for `record` ("loop", "group_loops" or
// "fibers"); empty before its first launch.
std::string loaded_execution_form(const KernelRecord& record);

// Counters for tests: compiler runs, libraries found in the disk cache, and
// libraries loaded now (each live record's library counts once).
int64_t compile_count();
int64_t disk_cache_hits();
int64_t loaded_libraries();

// The services handed to every kernel library (csrc/cpu/launcher.cpp).
const coreai_cpu_runtime& runtime_table();

}  // namespace coreai_torch::cpu
