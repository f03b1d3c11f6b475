// The prelude of every kernel the CPU backend compiles (docs/internals.md §3).
//
// The JIT's translation unit is
//
//   #include <coreai_msl_cpu.h>
//   namespace metal { <the buffer rendering, threadgroup rewritten> }
//   <the entry shim>
//
// so everything a kernel can name must be declared here, at global scope,
// before the rendering's own #include lines (which then expand to nothing:
// every header they name is include-guarded and already seen).
#ifndef COREAI_MSL_CPU_H
#define COREAI_MSL_CPU_H

// Version of the runtime headers (this file, coreai_msl/{tensor,sync,entry,
// runtime,cpu_abi}.h); part of the JIT cache key along with COREAI_MSL_VERSION.
#define COREAI_MSL_CPU_RUNTIME_VERSION 2

#include "coreai_msl/core.h"
#include "coreai_msl/cpu_abi.h"
#include "coreai_msl/entry.h"
#include "coreai_msl/runtime.h"
#include "coreai_msl/sync.h"
#include "coreai_msl/tensor.h"
#ifdef COREAI_MSL_DEBUG
#include "coreai_msl/debug_checks.h"
#endif

// Metal's address-space qualifiers. Device and thread memory are ordinary
// memory on the CPU; `constant` data is read-only. `threadgroup` is not a
// macro: the JIT rewrites it (storage becomes `static thread_local`, which is
// private to the OS thread running the group; on pointers and references it is
// dropped), so a use the rewrite did not handle is a compile error rather than
// silently per-thread memory.
#define device
#define constant const
#define thread

#include "MetalPerformancePrimitives/MetalPerformancePrimitives.h"
#include "metal_stdlib"
#include "metal_tensor"

#endif  // COREAI_MSL_CPU_H
