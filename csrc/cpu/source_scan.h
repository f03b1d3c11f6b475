// Text-level passes over a kernel's Metal source, done before it is compiled
// as C++ by the CPU and the CUDA backend (docs/internals.md §3). Each keeps
// every line where it was, so the compiler's #line-mapped messages still point
// at the user's own lines.
#pragma once

#include <string>
#include <string_view>

namespace coreai_torch::cpu {

// Rewrites the `threadgroup` address space: in a declaration of storage
// (`threadgroup float tile[16][16];`) it becomes COREAI_THREADGROUP_STORAGE,
// which the target header defines (the CPU: `static thread_local`, private to
// the OS thread that runs the whole group; the GPU: shared memory); in front
// of a pointer or a reference (`threadgroup float* p`, casts included) it is
// dropped. Comments, string and character literals are left alone.
std::string rewrite_threadgroup(std::string_view source);

// Metal's half literals (`1.5h`, `2e-3h`) spelled as C++'s `_Float16` literals
// (`1.5f16`): the same value, rounded once to half. Comments, strings and
// directives are left alone.
std::string rewrite_half_literals(std::string_view source);

// clang compiles `(float4)v` with a vector `v` as a bit cast where Metal
// converts the values. Such casts are renamed into an undeclared identifier
// that says what to write instead (`float4(v)`), so they fail to compile at
// the user's line rather than give wrong numbers. Casts of literals (which
// splat, as in Metal), sizeof(float4) and unnamed parameters are untouched.
std::string reject_c_style_vector_casts(std::string_view source);

// The three passes above, in the order both JITs apply them.
std::string metal_source_as_cpp(std::string_view source);

// True if the source calls a barrier, a SIMD-group or a quad-group function
// (an identifier threadgroup_barrier, simdgroup_barrier, simd_* or quad_*
// followed by `(`): such kernels need one fiber per thread.
bool needs_fibers(std::string_view source);

}  // namespace coreai_torch::cpu
