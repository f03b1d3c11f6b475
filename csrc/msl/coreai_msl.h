// The prelude of every kernel the CPU and CUDA backends compile
// (docs/internals.md §3, docs/cuda.md). One header library, two targets:
//
//   CPU:   clang++ -x c++,                        target_cpu.h
//   CUDA:  clang++ -x cuda --cuda-device-only,    target_nvptx.h (with nvptx_math.h)
//
// The JITs' translation units are
//
//   #include <coreai_msl.h>
//   namespace metal { <the buffer rendering, after the source passes> }
//   <the entry shim>
//
// so everything a kernel can name must be declared here, at global scope,
// before the rendering's own #include lines (which then expand to nothing:
// every header they name is include-guarded and already seen).
//
// For the GPU, everything declared between here and the end of the rendering
// is a host+device function (`#pragma clang force_cuda_host_device`), so the
// headers need no CUDA attributes; the CUDA JIT reopens the pragma around the
// rendering.
#ifndef COREAI_MSL_H
#define COREAI_MSL_H

// Version of the runtime headers (this file, coreai_msl/{tensor,sync,entry,
// runtime,cpu_abi,cuda_abi,fiber_runtime,target_*}.h); part of the JIT cache keys along with
// COREAI_MSL_VERSION.
#define COREAI_MSL_RUNTIME_VERSION 5

// libstdc++'s <cmath> also declares C++17's special functions (Bessel,
// Legendre, zeta ...), which no Metal code can call; their header's include
// guard keeps them out, which makes parsing the prelude about a tenth faster.
#ifndef _GLIBCXX_BITS_SPECFUN_H
#define _GLIBCXX_BITS_SPECFUN_H 1
#endif

#if defined(__CUDA__)
#if !defined(__NVPTX__)
#error "coreai_msl.h compiles for the GPU only: pass --cuda-device-only"
#endif
// Device versions of the C math functions, before any standard header.
#include "coreai_msl/nvptx_math.h"
#pragma clang force_cuda_host_device begin
#endif

#include "coreai_msl/cooperative_tensor.h"
#include "coreai_msl/core.h"
#include "coreai_msl/cpu_abi.h"
#include "coreai_msl/entry.h"
#include "coreai_msl/group_slots.h"
#include "coreai_msl/predefined.h"
#include "coreai_msl/runtime.h"
#include "coreai_msl/simdgroup_matrix.h"
#include "coreai_msl/sync.h"
#include "coreai_msl/tensor.h"
#include "coreai_msl/threadgroup_notes.h"
#if !defined(__NVPTX__)
#include "coreai_msl/group_form.h"
#endif
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

#if defined(__CUDA__)
#pragma clang force_cuda_host_device end
#endif

#endif  // COREAI_MSL_H
