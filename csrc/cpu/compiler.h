// Finding the C++ compiler that turns Metal kernels into shared libraries.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cpu/subprocess.h"

namespace coreai_torch::cpu {

struct Compiler {
  std::string program;   // as found (a path, or a name looked up in PATH)
  std::string identity;  // its `--version` output: part of the cache key
};

// The flags every kernel is compiled with (before the output and source).
// Fixed on purpose: no -march=native (cached libraries may be shared between
// machines) and no fast-math (kernels must round like the GPU's safe math).
const std::vector<std::string>& kernel_compile_flags();

// The flags a kernel that runs in fiber mode, or in loop mode, is compiled
// with in addition (source_scan.h's needs_fibers decides).
const std::vector<std::string>& fiber_mode_flags();
const std::vector<std::string>& loop_mode_flags();

// The flags a debug-mode kernel (option bit 0) is compiled with in addition.
const std::vector<std::string>& debug_compile_flags();

// Where a program named like a shell command lives: itself if it has a
// slash, else the first executable of that name on PATH; empty if none.
std::string resolve_program(const std::string& program);

// Seconds a compiler run may take: $COREAI_TORCH_COMPILE_TIMEOUT, else 300.
double compile_timeout_seconds();

// Limits for a compiler run: compile_timeout_seconds(), and stopping when
// SIGINT interrupts the launch running on the calling thread (kernel_guard.h).
ProcessLimits compiler_limits();

// True if `output` (what a failed compiler run printed) has an error
// diagnostic located in a source file (`file:line:column: error: ...`): the
// source was rejected. Otherwise the failure came from elsewhere (the linker,
// a full disk, a crash) and may not happen again.
bool reports_source_error(const std::string& output);

// Throws what a compiler run on kernel `kernel` that did not succeed means
// (`run` did not start, or exited with an error): the interrupt when SIGINT
// stopped it (kernel_guard.h); the message `compile_error()` makes (a
// MetalCompileError, remembered for the process) when the compiler reported an
// error in the source; otherwise an error saying why it failed and that
// nothing was cached, so the next call compiles again.
[[noreturn]] void throw_compile_failure(const ProcessResult& run, const std::string& kernel,
                                        const std::string& program,
                                        const std::function<std::string()>& compile_error);

// The first usable compiler among: $COREAI_TORCH_CXX (if set, it must work),
// $CXX, clang++-19 ... clang++-15, clang++. Usable means clang 15 or newer
// accepting kernel_compile_flags() and the C++23 features the headers rely on
// (multi-argument operator[], _Float16, __bf16, ext_vector_type). Searched
// once per process; `scratch_dir` holds the probe source. Throws a c10::Error
// naming `kernel` and saying how to install one when none fits.
const Compiler& find_compiler(const std::string& kernel, const std::string& scratch_dir);

}  // namespace coreai_torch::cpu
