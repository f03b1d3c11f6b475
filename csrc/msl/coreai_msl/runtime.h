// The launcher's services as seen from kernel code (see cpu_abi.h).
#ifndef COREAI_MSL_RUNTIME_H
#define COREAI_MSL_RUNTIME_H

#include "cpu_abi.h"

namespace coreai {

// Set once by coreai_cpu_kernel_init, right after the launcher loads this
// kernel library and before any thread of the kernel runs. Each kernel library
// has its own copy (the JIT compiles with hidden visibility).
inline const coreai_cpu_runtime* g_runtime = nullptr;

}  // namespace coreai

#endif  // COREAI_MSL_RUNTIME_H
