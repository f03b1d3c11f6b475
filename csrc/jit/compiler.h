// Finding the clang that compiles Metal kernels (for every target), and
// running it: time limits, interrupts, and what a failed run means.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "jit/subprocess.h"

namespace coreai_torch::jit {

class CacheDir;

struct Compiler {
  std::string program;   // as found (a path, or a name looked up in PATH)
  std::string identity;  // its `--version` output: part of the cache key
};

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
// accepting the C++23 features the headers rely on (multi-argument
// operator[], _Float16, __bf16, ext_vector_type). Searched once per process;
// a passed check is noted in the cache directory, so that later processes
// skip it. Throws a c10::Error naming `kernel` and `backend` and saying how to
// install one when none fits.
const Compiler& find_compiler(const std::string& kernel, const std::string& backend,
                              const CacheDir& cache);

// Starts, on a thread of its own, the search find_compiler makes (once per
// process): called when the first kernel is defined, so that a new cache's
// compiler check (two compiler start-ups) runs while the caller prepares its
// inputs rather than in its first launch. The search notes the compiler it
// finds in the cache directory of that moment, where find_compiler reads it;
// what it finds is not otherwise kept, and its errors are not reported: the
// first launch searches again where the note is missing, and reports them.
// `kernel` names the kernel in the cache's own errors.
void start_compiler_check(const std::string& kernel);

// Waits up to a few seconds for the search start_compiler_check started, if
// it is running, then leaves it to end with the process (called at exit,
// before the process's static objects go).
void wait_for_compiler_check();

}  // namespace coreai_torch::jit
