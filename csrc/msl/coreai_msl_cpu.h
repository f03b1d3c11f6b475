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
#define COREAI_MSL_CPU_RUNTIME_VERSION 1

#include "coreai_msl/core.h"
#include "coreai_msl/cpu_abi.h"
#include "coreai_msl/entry.h"
#include "coreai_msl/runtime.h"
#include "coreai_msl/simdgroup_matrix.h"
#include "coreai_msl/sync.h"
#include "coreai_msl/tensor.h"

// Metal's address-space qualifiers. The JIT's address-space pass
// (csrc/cpu/source_scan.h) turns `device T*`, `constant T*` and
// `threadgroup T*` into pointers tagged with their address space
// (coreai_msl/address_space.h); what it leaves are these words on references,
// template arguments and member functions, where device and thread memory are
// ordinary memory and `constant` data is read-only. `threadgroup` is not a
// macro: the pass rewrites every use it understands (storage becomes
// `static thread_local`, private to the OS thread running the group), so a use
// it did not is a compile error rather than silently per-thread memory.
#define device
#define constant const
#define thread

#include "MetalPerformancePrimitives/MetalPerformancePrimitives.h"
#include "metal_stdlib"
#include "metal_tensor"

#endif  // COREAI_MSL_CPU_H
