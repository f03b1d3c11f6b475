// The C math functions on NVIDIA GPUs: device overloads that call libdevice
// (the __nv_* functions clang links from libdevice.10.bc).
//
// float_math.h and its neighbours call std::exp, std::sin, std::fmod ...
// libstdc++ defines the float versions as constexpr wrappers of compiler
// builtins, which clang treats as host+device, and the NVPTX backend cannot
// lower most of those builtins (it would emit calls to expf, sinf ... that no
// GPU library defines). A __device__ overload with the same signature that is
// visible before <cmath> keeps libstdc++'s version host-only (clang's rule for
// constexpr functions in CUDA), and <cmath>'s `using ::exp;` brings these
// global overloads into namespace std. So this header must be included before
// any standard header, which the prelude (coreai_msl.h) does, and it includes
// <cmath> itself, outside the prelude's host+device region (glibc's math
// functions must stay host functions, or they would clash with these).
//
// Functions the backend lowers to exact instructions by itself (fabs, floor,
// ceil, trunc, round, rint, fmin, fmax, copysign, fma, sqrt with IEEE
// rounding, the classification functions) are left to libstdc++. fmod is not
// among them: NVPTX expands frem as x - y * trunc(x / y), which is inexact.
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

#undef COREAI_NV_UNARY
#undef COREAI_NV_BINARY
#undef COREAI_NV_FAST_OR_ACCURATE
#undef COREAI_NV_DEVICE

#include <cmath>
// What <cmath> would bring in through the special functions' header, which
// the prelude keeps out (coreai_msl.h). These must be parsed here, outside the
// host+device region: <type_traits> has variadic helpers, and through
// <bits/stl_algobase.h> libstdc++ 13 includes <new>, whose operators must stay
// host functions.
#include <bits/stl_algobase.h>
#include <limits>
#include <type_traits>
