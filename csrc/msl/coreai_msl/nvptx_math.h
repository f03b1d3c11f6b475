// The C++ math functions on NVIDIA GPUs, in place of <cmath>: the headers
// call std::exp, std::fmin, std::isnan ... (std_math.h includes this file
// instead of <cmath> for the GPU).
//
// Transcendental functions call libdevice (the __nv_* functions clang links
// from libdevice.10.bc): libstdc++'s float versions are constexpr wrappers of
// compiler builtins, which the NVPTX backend cannot lower (it would emit calls
// to expf, sinf ... that no GPU library defines). fmod is among them: NVPTX
// expands frem as x - y * trunc(x / y), which is inexact.
//
// Functions the backend lowers to exact instructions (fabs, floor, ceil,
// trunc, round, nearbyint, fmin, fmax, copysign, fma, sqrt with IEEE rounding,
// the classification functions) are the same compiler builtins libstdc++'s
// versions call, so the PTX is the one <cmath> gave.
//
// Why not <cmath>: with glibc's <math.h> and the part of libstdc++ it pulls in
// it was half of the prelude's parse, which every kernel compiled without the
// precompiled prelude pays (the first kernel of an empty cache among them).
// The macros of <math.h> that Metal also has (INFINITY, NAN, FP_ILOGB0,
// FP_ILOGBNAN) are defined in numeric_limits.h.
//
// Precision: libdevice's default functions are its accurate ones (within the
// error bounds of Metal's precise math). With COREAI_MSL_FAST_MATH defined
// (the kernel's fast-math option) the functions that libdevice has in a fast,
// approximate form (exp, log, sin, cos, tan, pow ...) use that form.

#pragma once

#if !defined(__CUDA__) || !defined(__NVPTX__)
#error "coreai_msl/nvptx_math.h is for CUDA device compilation (clang -x cuda --cuda-device-only)"
#endif

#ifndef __device__
#define __device__ __attribute__((device))
#endif

#include <__clang_cuda_libdevice_declares.h>
#undef __DEVICE__

#define COREAI_NV_DEVICE static inline __attribute__((device, always_inline))

#ifdef COREAI_MSL_FAST_MATH
#define COREAI_NV_FAST_OR_ACCURATE(fast, accurate) fast
#else
#define COREAI_NV_FAST_OR_ACCURATE(fast, accurate) accurate
#endif

#define COREAI_NV_UNARY(name, float_fn, double_fn)                          \
  COREAI_NV_DEVICE float name(float x) { return float_fn(x); }             \
  COREAI_NV_DEVICE double name(double x) { return double_fn(x); }
#define COREAI_NV_BINARY(name, float_fn, double_fn)                               \
  COREAI_NV_DEVICE float name(float x, float y) { return float_fn(x, y); }       \
  COREAI_NV_DEVICE double name(double x, double y) { return double_fn(x, y); }

COREAI_NV_UNARY(exp, COREAI_NV_FAST_OR_ACCURATE(__nv_fast_expf, __nv_expf), __nv_exp)
COREAI_NV_UNARY(exp2, __nv_exp2f, __nv_exp2)
COREAI_NV_UNARY(log, COREAI_NV_FAST_OR_ACCURATE(__nv_fast_logf, __nv_logf), __nv_log)
COREAI_NV_UNARY(log2, COREAI_NV_FAST_OR_ACCURATE(__nv_fast_log2f, __nv_log2f), __nv_log2)
COREAI_NV_UNARY(log10, COREAI_NV_FAST_OR_ACCURATE(__nv_fast_log10f, __nv_log10f), __nv_log10)
COREAI_NV_UNARY(sin, COREAI_NV_FAST_OR_ACCURATE(__nv_fast_sinf, __nv_sinf), __nv_sin)
COREAI_NV_UNARY(cos, COREAI_NV_FAST_OR_ACCURATE(__nv_fast_cosf, __nv_cosf), __nv_cos)
COREAI_NV_UNARY(tan, COREAI_NV_FAST_OR_ACCURATE(__nv_fast_tanf, __nv_tanf), __nv_tan)
COREAI_NV_UNARY(asin, __nv_asinf, __nv_asin)
COREAI_NV_UNARY(acos, __nv_acosf, __nv_acos)
COREAI_NV_UNARY(atan, __nv_atanf, __nv_atan)
COREAI_NV_UNARY(sinh, __nv_sinhf, __nv_sinh)
COREAI_NV_UNARY(cosh, __nv_coshf, __nv_cosh)
COREAI_NV_UNARY(tanh, __nv_tanhf, __nv_tanh)
COREAI_NV_UNARY(asinh, __nv_asinhf, __nv_asinh)
COREAI_NV_UNARY(acosh, __nv_acoshf, __nv_acosh)
COREAI_NV_UNARY(atanh, __nv_atanhf, __nv_atanh)
COREAI_NV_BINARY(pow, COREAI_NV_FAST_OR_ACCURATE(__nv_fast_powf, __nv_powf), __nv_pow)
COREAI_NV_BINARY(atan2, __nv_atan2f, __nv_atan2)
COREAI_NV_BINARY(fmod, __nv_fmodf, __nv_fmod)
COREAI_NV_BINARY(fdim, __nv_fdimf, __nv_fdim)

COREAI_NV_DEVICE float ldexp(float x, int e) { return __nv_ldexpf(x, e); }
COREAI_NV_DEVICE double ldexp(double x, int e) { return __nv_ldexp(x, e); }
COREAI_NV_DEVICE float frexp(float x, int* e) { return __nv_frexpf(x, e); }
COREAI_NV_DEVICE double frexp(double x, int* e) { return __nv_frexp(x, e); }
COREAI_NV_DEVICE int ilogb(float x) { return __nv_ilogbf(x); }
COREAI_NV_DEVICE int ilogb(double x) { return __nv_ilogb(x); }

// What the backend lowers by itself, through the builtins libstdc++ uses.
#define COREAI_NV_BUILTIN_UNARY(name)                                                        \
  COREAI_NV_DEVICE constexpr float name(float x) { return __builtin_##name##f(x); }       \
  COREAI_NV_DEVICE constexpr double name(double x) { return __builtin_##name(x); }
#define COREAI_NV_BUILTIN_BINARY(name)                                                       \
  COREAI_NV_DEVICE constexpr float name(float x, float y) { return __builtin_##name##f(x, y); } \
  COREAI_NV_DEVICE constexpr double name(double x, double y) { return __builtin_##name(x, y); }
#define COREAI_NV_CLASSIFY(name)                                                             \
  COREAI_NV_DEVICE constexpr bool name(float x) { return __builtin_##name(x); }           \
  COREAI_NV_DEVICE constexpr bool name(double x) { return __builtin_##name(x); }

COREAI_NV_BUILTIN_UNARY(fabs)
COREAI_NV_BUILTIN_UNARY(floor)
COREAI_NV_BUILTIN_UNARY(ceil)
COREAI_NV_BUILTIN_UNARY(trunc)
COREAI_NV_BUILTIN_UNARY(round)
COREAI_NV_BUILTIN_UNARY(nearbyint)
COREAI_NV_BUILTIN_UNARY(sqrt)
COREAI_NV_BUILTIN_BINARY(fmin)
COREAI_NV_BUILTIN_BINARY(fmax)
COREAI_NV_BUILTIN_BINARY(copysign)
COREAI_NV_DEVICE constexpr float fma(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
COREAI_NV_DEVICE constexpr double fma(double x, double y, double z) { return __builtin_fma(x, y, z); }
COREAI_NV_CLASSIFY(isnan)
COREAI_NV_CLASSIFY(isinf)
COREAI_NV_CLASSIFY(isfinite)
COREAI_NV_CLASSIFY(signbit)

#undef COREAI_NV_BUILTIN_UNARY
#undef COREAI_NV_BUILTIN_BINARY
#undef COREAI_NV_CLASSIFY
#undef COREAI_NV_UNARY
#undef COREAI_NV_BINARY
#undef COREAI_NV_FAST_OR_ACCURATE
#undef COREAI_NV_DEVICE

// Standard headers parsed here, outside the prelude's host+device region
// (coreai_msl.h): <type_traits> has variadic helpers that must stay host
// functions, and so must <new>'s operators, which libstdc++ 13 reaches
// through <bits/stl_algobase.h> from standard headers the prelude may include
// later; clang's wrapper of <new> calls ::malloc, hence <cstdlib> first.
#include <cstdlib>
#include <new>
#include <limits>
#include <type_traits>

namespace std {
using ::acos, ::acosh, ::asin, ::asinh, ::atan, ::atan2, ::atanh, ::ceil, ::copysign, ::cos,
    ::cosh, ::exp, ::exp2, ::fabs, ::fdim, ::floor, ::fma, ::fmax, ::fmin, ::fmod, ::frexp,
    ::ilogb, ::isfinite, ::isinf, ::isnan, ::ldexp, ::log, ::log10, ::log2, ::nearbyint, ::pow,
    ::round, ::signbit, ::sin, ::sinh, ::sqrt, ::tan, ::tanh, ::trunc;
}  // namespace std
