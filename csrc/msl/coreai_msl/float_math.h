// Metal's math functions for float, half, bfloat and their vectors.
//
// Semantics are Metal's "safe" math mode: IEEE special values, exp(-inf) == 0,
// NaN in gives NaN out (fmin/fmax/min/max return the other argument when one is
// NaN, as Metal specifies). half and bfloat components are computed in float
// and rounded once. metal::fast:: and metal::precise:: name the same functions:
// the CPU always evaluates the precise versions, which satisfy the error
// bounds of both.
#pragma once

#include "std_math.h"
#include <limits>

#include "elementwise.h"

namespace metal {

namespace detail {

// The largest value of E below one, Metal's upper bound for fract.
template <class E>
inline float largest_below_one() {
  if constexpr (std::same_as<E, half>) {
    return 0x1.ffcp-1f;
  } else if constexpr (std::same_as<E, bfloat>) {
    return 0x1.fep-1f;
  } else {
    return 0x1.fffffep-1f;
  }
}

// sin(pi x) with exact zeros at integers and exact +-1 at half-integers.
inline float sin_pi(float x) {
  if (!std::isfinite(x)) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  float r = std::fmod(x, 2.0f);  // exact
  if (r == std::trunc(r)) {
    return std::copysign(0.0f, x);
  }
  return static_cast<float>(std::sin(3.14159265358979323846 * static_cast<double>(r)));
}

inline float cos_pi(float x) {
  if (!std::isfinite(x)) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  float r = std::fabs(std::fmod(x, 2.0f));
  if (r == 0.5f || r == 1.5f) {
    return 0.0f;
  }
  return static_cast<float>(std::cos(3.14159265358979323846 * static_cast<double>(r)));
}

inline float tan_pi(float x) {
  if (!std::isfinite(x)) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  float r = std::fmod(x, 1.0f);  // tan has period pi
  if (r == 0.0f) {
    return std::copysign(0.0f, x);
  }
  return static_cast<float>(std::tan(3.14159265358979323846 * static_cast<double>(r)));
}

inline float sign_of(float x) {
  if (x > 0.0f) {
    return 1.0f;
  }
  if (x < 0.0f) {
    return -1.0f;
  }
  return x == x ? x : 0.0f;  // keeps the sign of zero; NaN gives 0
}

// Adjacent value of component type E, stepping its own bit pattern.
template <class E>
inline E next_after(E x, E y) {
  if (x != x || y != y) {
    return static_cast<E>(x + y);  // NaN
  }
  if (x == y) {
    return y;
  }
  using Bits = std::conditional_t<sizeof(E) == 2, std::uint16_t, std::uint32_t>;
  constexpr Bits sign_bit = Bits(1) << (8 * sizeof(E) - 1);
  if (x == E(0)) {
    Bits smallest = 1;
    return __builtin_bit_cast(E, static_cast<Bits>(y > E(0) ? smallest : sign_bit | smallest));
  }
  Bits bits = __builtin_bit_cast(Bits, x);
  bool away_from_zero = (x < y) == (x > E(0));
  bits = away_from_zero ? bits + 1 : bits - 1;
  return __builtin_bit_cast(E, bits);
}

#if !defined(__NVPTX__)
// exp for float, inline and without branches, so that a loop calling it
// vectorizes and its vector and scalar copies give the same bits (the C
// library's expf is a call no loop vectorizes). x = k ln2 + r, |r| <= ln2/2:
// k is rounded to the nearest integer by the 1.5 * 2^23 shift, and r is
// exact to the rounding of its last step because ln2's high part has few
// enough bits that k * hi is exact and x - k * hi cancels exactly (Sterbenz).
// exp(r) is a degree-7 polynomial (Cephes' coefficients), and 2^k is built
// in the exponent bits in two halves, so that results below FLT_MIN are
// rounded once, in the last multiply. Under -ffp-contract=off no step fuses,
// so every instruction set computes the same bits; within 1 ulp of exp
// everywhere (tests/cpu/test_float_exp.py checks every float), where Metal
// allows 4. NVPTX keeps libdevice's exp (nvptx_math.h).
inline float exp_float(float x) {
  // Outside [-104, 89] (and for NaN) the result is a constant; computing on
  // 0 there keeps the arithmetic away from subnormals, which cost a
  // microcode assist, for the -FLT_MAX padding that softmax kernels use.
  const bool in_range = x >= -104.0f && x <= 89.0f;
  const float v = in_range ? x : 0.0f;
  constexpr float shift = 0x1.8p23f;
  const float k = (v * 0x1.715476p+0f + shift) - shift;
  const float r = (v - k * 0x1.62e4p-1f) - k * 0x1.7f7d1cp-20f;
  // Estrin's scheme: three independent pairs, so that a scalar call (where
  // no loop vectorizes it) waits on a short chain of roundings.
  const float z = r * r;
  const float low = 5.0000001201e-1f + 1.6666665459e-1f * r;
  const float mid = 4.1665795894e-2f + 8.3334519073e-3f * r;
  const float high = 1.3981999507e-3f + 1.9875691500e-4f * r;
  const float p = low + z * (mid + z * high);
  const float e = (p * z + r) + 1.0f;
  const int n = static_cast<int>(k);
  const int n1 = n >> 1;
  const int n2 = n - n1;
  const float scaled = e * __builtin_bit_cast(float, (n1 + 127) << 23) *
                       __builtin_bit_cast(float, (n2 + 127) << 23);
  const float outside = x > 89.0f ? std::numeric_limits<float>::infinity()
                                  : (x < -104.0f ? 0.0f : x);  // x: NaN
  return in_range ? scaled : outside;
}
#endif

}  // namespace detail

#define COREAI_MSL_UNARY(name, expression)                                          \
  template <detail::floating X>                                                     \
  inline X name(X x) {                                                              \
    return detail::map_via_float(x, [](float v) -> float { return expression; }); \
  }

#if defined(__NVPTX__)
COREAI_MSL_UNARY(exp, std::exp(v))
#else
COREAI_MSL_UNARY(exp, detail::exp_float(v))
#endif
COREAI_MSL_UNARY(exp2, std::exp2(v))
COREAI_MSL_UNARY(exp10, std::pow(10.0f, v))
COREAI_MSL_UNARY(log, std::log(v))
COREAI_MSL_UNARY(log2, std::log2(v))
COREAI_MSL_UNARY(log10, std::log10(v))
COREAI_MSL_UNARY(sqrt, std::sqrt(v))
COREAI_MSL_UNARY(rsqrt, 1.0f / std::sqrt(v))
COREAI_MSL_UNARY(sin, std::sin(v))
COREAI_MSL_UNARY(cos, std::cos(v))
COREAI_MSL_UNARY(tan, std::tan(v))
COREAI_MSL_UNARY(asin, std::asin(v))
COREAI_MSL_UNARY(acos, std::acos(v))
COREAI_MSL_UNARY(atan, std::atan(v))
COREAI_MSL_UNARY(sinh, std::sinh(v))
COREAI_MSL_UNARY(cosh, std::cosh(v))
COREAI_MSL_UNARY(tanh, std::tanh(v))
COREAI_MSL_UNARY(asinh, std::asinh(v))
COREAI_MSL_UNARY(acosh, std::acosh(v))
COREAI_MSL_UNARY(atanh, std::atanh(v))
COREAI_MSL_UNARY(sinpi, detail::sin_pi(v))
COREAI_MSL_UNARY(cospi, detail::cos_pi(v))
COREAI_MSL_UNARY(tanpi, detail::tan_pi(v))
COREAI_MSL_UNARY(fabs, std::fabs(v))
COREAI_MSL_UNARY(floor, std::floor(v))
COREAI_MSL_UNARY(ceil, std::ceil(v))
COREAI_MSL_UNARY(round, std::round(v))  // halfway cases away from zero
COREAI_MSL_UNARY(rint, std::nearbyint(v))  // halfway cases to even
COREAI_MSL_UNARY(trunc, std::trunc(v))
COREAI_MSL_UNARY(sign, detail::sign_of(v))
COREAI_MSL_UNARY(saturate, std::fmin(std::fmax(v, 0.0f), 1.0f))

#undef COREAI_MSL_UNARY

template <detail::floating X>
inline X abs(X x) {
  return fabs(x);
}

// x - floor(x), kept below one in the component type (Metal's definition).
template <detail::floating X>
inline X fract(X x) {
  using E = detail::element_t<X>;
  return detail::map_via_float(x, [](float v) -> float {
    float f = static_cast<float>(static_cast<E>(v - std::floor(v)));
    return f < 1.0f || f != f ? f : detail::largest_below_one<E>();
  });
}

// Binary and ternary functions take mixed argument types by Metal's rule
// (detail::math_operand_t): both arguments convert to the operand type first.
#define COREAI_MSL_BINARY(name, expression)                                       \
  template <class T, class U, class O = detail::math_operand_t<T, U>>             \
    requires detail::floating<O>                                                  \
  inline O name(T x, U y) {                                                       \
    return detail::map_via_float(O(x), O(y),                                      \
                                 [](float a, float b) -> float { return expression; }); \
  }

COREAI_MSL_BINARY(pow, std::pow(a, b))
// powr is pow restricted to x >= 0; negative x gives NaN.
COREAI_MSL_BINARY(powr, a < 0.0f ? std::numeric_limits<float>::quiet_NaN() : std::pow(a, b))
COREAI_MSL_BINARY(atan2, std::atan2(a, b))
COREAI_MSL_BINARY(fmod, std::fmod(a, b))
COREAI_MSL_BINARY(copysign, std::copysign(a, b))
COREAI_MSL_BINARY(fdim, std::fdim(a, b))
COREAI_MSL_BINARY(fmin, std::fmin(a, b))
COREAI_MSL_BINARY(fmax, std::fmax(a, b))
COREAI_MSL_BINARY(min, std::fmin(a, b))
COREAI_MSL_BINARY(max, std::fmax(a, b))
COREAI_MSL_BINARY(step, b < a ? 0.0f : 1.0f)  // step(edge, x)
// Metal's divide is a fast:: function; precisely it is x / y.
COREAI_MSL_BINARY(divide, a / b)

#undef COREAI_MSL_BINARY

template <class T, class U, class O = detail::math_operand_t<T, U>>
  requires detail::floating<O>
inline O nextafter(T x, U y) {
  return detail::map_components(O(x), O(y),
                                [](auto a, auto b) { return detail::next_after(a, b); });
}

#define COREAI_MSL_TERNARY(name, expression)                                      \
  template <class T, class U, class V, class O = detail::math_operand3_t<T, U, V>> \
    requires detail::floating<O>                                                  \
  inline O name(T x, U y, V z) {                                                  \
    return detail::map_via_float(O(x), O(y), O(z), [](float a, float b, float c)  \
                                                       -> float { return expression; }); \
  }

COREAI_MSL_TERNARY(mix, a + (b - a) * c)
COREAI_MSL_TERNARY(clamp, std::fmin(std::fmax(a, b), c))
COREAI_MSL_TERNARY(fmin3, std::fmin(std::fmin(a, b), c))
COREAI_MSL_TERNARY(fmax3, std::fmax(std::fmax(a, b), c))
COREAI_MSL_TERNARY(min3, std::fmin(std::fmin(a, b), c))
COREAI_MSL_TERNARY(max3, std::fmax(std::fmax(a, b), c))
COREAI_MSL_TERNARY(fmedian3, std::fmax(std::fmin(a, b), std::fmin(std::fmax(a, b), c)))
COREAI_MSL_TERNARY(median3, std::fmax(std::fmin(a, b), std::fmin(std::fmax(a, b), c)))
// smoothstep(edge0, edge1, x)
COREAI_MSL_TERNARY(smoothstep, [&] {
  float t = std::fmin(std::fmax((c - a) / (b - a), 0.0f), 1.0f);
  return t * t * (3.0f - 2.0f * t);
}())

#undef COREAI_MSL_TERNARY

// fma of half or bfloat operands: the product is exact in double and the sum
// is rounded once there, then once more to the narrow type.
template <class T, class U, class V, class X = detail::math_operand3_t<T, U, V>>
  requires detail::floating<X>
inline X fma(T a0, U b0, V c0) {
  using E = detail::element_t<X>;
  const X x = X(a0), y = X(b0), z = X(c0);
  if constexpr (std::same_as<E, float>) {
    return detail::map_components(x, y, z, [](float a, float b, float c) { return std::fma(a, b, c); });
  } else {
    return detail::map_components(x, y, z, [](E a, E b, E c) {
      return static_cast<E>(static_cast<double>(a) * static_cast<double>(b) + static_cast<double>(c));
    });
  }
}

// Returns sin(x) and stores cos(x) in cosine.
template <detail::floating X>
inline X sincos(X x, X& cosine) {
  cosine = cos(x);
  return sin(x);
}

// Splits x into a fraction in [0.5, 1) and a power of two stored in exponent.
template <detail::float_scalar X>
inline X frexp(X x, int& exponent) {
  return static_cast<X>(std::frexp(static_cast<float>(x), &exponent));
}
template <detail::float_vector V>
inline V frexp(V x, vec<int, detail::size_v<V>>& exponent) {
  V result;
  for (int i = 0; i < detail::size_v<V>; ++i) {
    int e = 0;
    result[i] = frexp(static_cast<detail::element_t<V>>(x[i]), e);
    exponent[i] = e;
  }
  return result;
}

template <detail::float_scalar X>
inline X ldexp(X x, int exponent) {
  return static_cast<X>(std::ldexp(static_cast<float>(x), exponent));
}
template <detail::float_vector V>
inline V ldexp(V x, vec<int, detail::size_v<V>> exponent) {
  V result;
  for (int i = 0; i < detail::size_v<V>; ++i) {
    result[i] = ldexp(static_cast<detail::element_t<V>>(x[i]), static_cast<int>(exponent[i]));
  }
  return result;
}

template <detail::float_scalar X>
inline int ilogb(X x) {
  return std::ilogb(static_cast<float>(x));
}
template <detail::float_vector V>
inline vec<int, detail::size_v<V>> ilogb(V x) {
  vec<int, detail::size_v<V>> result;
  for (int i = 0; i < detail::size_v<V>; ++i) {
    result[i] = ilogb(static_cast<detail::element_t<V>>(x[i]));
  }
  return result;
}

// Returns the fractional part and stores the integral part, both with x's sign.
template <detail::floating X>
inline X modf(X x, X& integral) {
  integral = trunc(x);
  return detail::map_via_float(x, [](float v) -> float {
    return std::isinf(v) ? std::copysign(0.0f, v) : v - std::trunc(v);
  });
}

// fast:: and precise:: variants. Both are the precise implementation.
#define COREAI_MSL_MATH_NAMES(ns)                                                            \
  namespace ns {                                                                             \
  using metal::abs, metal::acos, metal::acosh, metal::asin, metal::asinh, metal::atan,       \
      metal::atan2, metal::atanh, metal::ceil, metal::clamp, metal::copysign, metal::cos,    \
      metal::cosh, metal::cospi, metal::divide, metal::exp, metal::exp10, metal::exp2,       \
      metal::fabs, metal::fdim, metal::floor, metal::fma, metal::fmax, metal::fmax3,         \
      metal::fmedian3, metal::fmin, metal::fmin3, metal::fmod, metal::fract, metal::frexp,   \
      metal::ilogb, metal::ldexp, metal::log, metal::log10, metal::log2, metal::max,         \
      metal::max3, metal::median3, metal::min, metal::min3, metal::mix, metal::modf,         \
      metal::nextafter, metal::pow, metal::powr, metal::rint, metal::round, metal::rsqrt,    \
      metal::saturate, metal::sign, metal::sin, metal::sincos, metal::sinh, metal::sinpi,    \
      metal::smoothstep, metal::sqrt, metal::step, metal::tan, metal::tanh, metal::tanpi,    \
      metal::trunc;                                                                          \
  }

COREAI_MSL_MATH_NAMES(fast)
COREAI_MSL_MATH_NAMES(precise)

#undef COREAI_MSL_MATH_NAMES

}  // namespace metal
