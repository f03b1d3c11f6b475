// The part of the Metal standard library that a kernel body calls: types,
// math, integer, relational and geometric functions, limits, arrays and
// atomics, all in namespace metal. The CPU backend compiles each kernel inside
// namespace metal, so unqualified calls such as exp(x) resolve here.
//
// Include this header at global scope (it includes standard headers and
// defines two compiler-runtime routines with C linkage).
//
// Compile with clang++ -std=c++23 and
//   -Xclang -ffloat16-excess-precision=none -Xclang -fbfloat16-excess-precision=none
// so that half and bfloat round after every operation as on the GPU.
// -flax-vector-conversions=none is recommended as well: it turns clang's
// implicit same-size vector bit casts (short4 -> int2), which Metal rejects,
// into errors. The headers compile with it.
//
//   scalar.h          half, bfloat, uchar ... ulong; bfloat conversion routines
//   vector.h          vec<T, N>, float4 ..., constructor syntax, as_type; the
//                     conventions for comparisons and bool vectors
//   packed.h          packed_float3 ...
//   array.h           metal::array<T, N>
//   elementwise.h     type categories and component-wise helpers
//   float_math.h      math functions, also as metal::fast:: and metal::precise::
//   integer.h         integer functions
//   relational.h      all, any, select, isnan ...
//   geometric.h       dot, length, normalize, cross ...
//   numeric_limits.h  metal::numeric_limits, FLT_MAX, M_PI_F and the other constants
//   type_traits.h     <metal_type_traits>: is_floating_point_v<half> ... make_unsigned_t
//   matrix.h          float4x4, half2x4 ...: constructors, products, transpose, determinant
//   address_space.h   pointers tagged with their address space (device_ptr<T> ...)
//   conversion.h      Metal's vector casts, for the code the CPU backend's passes write
//   atomic.h          atomic<T> and the atomic_*_explicit functions
//   unavailable.h     C math names Metal lacks, rejected with a message
#pragma once

// Part of the JIT cache key: bump it whenever a kernel could compile or
// behave differently.
#define COREAI_MSL_VERSION 3

// 32-byte vectors (long4, ulong4) passed by value without AVX use another
// calling convention than with it. A kernel is one translation unit whose
// entry point takes only pointers, so the mismatch cannot occur; silence the
// warning for the rest of the unit (no push/pop on purpose).
#pragma clang diagnostic ignored "-Wpsabi"

#include "scalar.h"
#include "vector.h"
#include "packed.h"
#include "array.h"
#include "elementwise.h"
#include "float_math.h"
#include "integer.h"
#include "relational.h"
#include "geometric.h"
#include "numeric_limits.h"
#include "address_space.h"
#include "type_traits.h"
#include "matrix.h"
#include "conversion.h"
#include "atomic.h"
#include "unavailable.h"
