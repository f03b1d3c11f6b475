// The launcher's services as seen from kernel code (see cpu_abi.h).
#ifndef COREAI_MSL_RUNTIME_H
#define COREAI_MSL_RUNTIME_H

#include <cstdint>

#include "cpu_abi.h"

namespace coreai {

// Set once by coreai_cpu_kernel_init, right after the launcher loads this
// kernel library and before any thread of the kernel runs. Each kernel library
// has its own copy (the JIT compiles with hidden visibility).
inline const coreai_cpu_runtime* g_runtime = nullptr;

// Debug mode: thread_position_in_grid of the thread the entry shim called last
// on this OS thread, for out-of-bounds reports.
inline thread_local std::uint32_t g_debug_thread_position[3] = {0, 0, 0};

}  // namespace coreai

// Debug mode: tells the launcher that the running thread reaches (leaving 0)
// or leaves (1) a barrier or SIMD-group function (debug_sync in cpu_abi.h),
// for the checks of synchronisation (docs/cpu.md, "Checking kernels").
#ifdef COREAI_MSL_DEBUG
#define COREAI_MSL_DEBUG_SYNC(kind, leaving) ::coreai::g_runtime->debug_sync(kind, leaving)
#else
#define COREAI_MSL_DEBUG_SYNC(kind, leaving) ((void)0)
#endif

#endif  // COREAI_MSL_RUNTIME_H
