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
// runtime,cpu_abi,fiber_runtime,target_cpu}.h); part of the JIT cache key along with
// COREAI_MSL_VERSION.
#define COREAI_MSL_CPU_RUNTIME_VERSION 3

#include "coreai_msl/cooperative_tensor.h"
#include "coreai_msl/core.h"
#include "coreai_msl/cpu_abi.h"
#include "coreai_msl/entry.h"
#include "coreai_msl/predefined.h"
#include "coreai_msl/runtime.h"
#include "coreai_msl/simdgroup_matrix.h"
#include "coreai_msl/sync.h"
#include "coreai_msl/tensor.h"
#include "coreai_msl/threadgroup_notes.h"
#ifdef COREAI_MSL_DEBUG
#include "coreai_msl/debug_accesses.h"
#include "coreai_msl/debug_checks.h"
#endif

#include "MetalPerformancePrimitives/MetalPerformancePrimitives.h"
#include "metal_stdlib"
#include "metal_tensor"

// Last: the library headers above use these words as ordinary names.
#include "coreai_msl/address_space_words.h"

// Written in the language Metal and C++ share, with the address-space words above.
#include "coreai_msl/strided_view.h"

#endif  // COREAI_MSL_CPU_H
