// metal::numeric_limits and the math constants of <metal_math>.
#pragma once

#include "std_math.h"
#include <limits>

#include "scalar.h"

namespace metal {

// Integer types and float use the standard library's values; half and bfloat
// are spelled out because the standard library may not specialise for them.
template <class T>
struct numeric_limits : std::numeric_limits<T> {};

template <>
struct numeric_limits<half> {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool is_iec559 = true;  // IEEE 754 binary16
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr int digits = 11;
  static constexpr int digits10 = 3;
  static constexpr int max_digits10 = 5;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -13;
  static constexpr int min_exponent10 = -4;
  static constexpr int max_exponent = 16;
  static constexpr int max_exponent10 = 4;
  static constexpr half min() { return __builtin_bit_cast(half, std::uint16_t{0x0400}); }
  static constexpr half max() { return __builtin_bit_cast(half, std::uint16_t{0x7bff}); }
  static constexpr half lowest() { return __builtin_bit_cast(half, std::uint16_t{0xfbff}); }
  static constexpr half epsilon() { return __builtin_bit_cast(half, std::uint16_t{0x1400}); }
  static constexpr half round_error() { return __builtin_bit_cast(half, std::uint16_t{0x3800}); }
  static constexpr half infinity() { return __builtin_bit_cast(half, std::uint16_t{0x7c00}); }
  static constexpr half quiet_NaN() { return __builtin_bit_cast(half, std::uint16_t{0x7e00}); }
  static constexpr half signaling_NaN() { return __builtin_bit_cast(half, std::uint16_t{0x7d00}); }
  static constexpr half denorm_min() { return __builtin_bit_cast(half, std::uint16_t{0x0001}); }
};

template <>
struct numeric_limits<bfloat> {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool is_iec559 = false;  // not an IEEE 754 interchange format
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr int digits = 8;
  static constexpr int digits10 = 2;
  static constexpr int max_digits10 = 4;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -125;
  static constexpr int min_exponent10 = -37;
  static constexpr int max_exponent = 128;
  static constexpr int max_exponent10 = 38;
  static constexpr bfloat min() { return __builtin_bit_cast(bfloat, std::uint16_t{0x0080}); }
  static constexpr bfloat max() { return __builtin_bit_cast(bfloat, std::uint16_t{0x7f7f}); }
  static constexpr bfloat lowest() { return __builtin_bit_cast(bfloat, std::uint16_t{0xff7f}); }
  static constexpr bfloat epsilon() { return __builtin_bit_cast(bfloat, std::uint16_t{0x3c00}); }
  static constexpr bfloat round_error() {
    return __builtin_bit_cast(bfloat, std::uint16_t{0x3f00});
  }
  static constexpr bfloat infinity() { return __builtin_bit_cast(bfloat, std::uint16_t{0x7f80}); }
  static constexpr bfloat quiet_NaN() { return __builtin_bit_cast(bfloat, std::uint16_t{0x7fc0}); }
  static constexpr bfloat signaling_NaN() {
    return __builtin_bit_cast(bfloat, std::uint16_t{0x7fa0});
  }
  static constexpr bfloat denorm_min() { return __builtin_bit_cast(bfloat, std::uint16_t{0x0001}); }
};

}  // namespace metal

// Constants of <metal_math>. On the CPU <cmath> (glibc's <math.h>) defines
// INFINITY, NAN, MAXFLOAT, HUGE_VALF, FP_ILOGB0 and FP_ILOGBNAN; the GPU's
// prelude does without it (nvptx_math.h), so the same values are defined here.
#ifndef INFINITY
#define INFINITY __builtin_inff()
#endif
#ifndef NAN
#define NAN __builtin_nanf("")
#endif
#ifndef FP_ILOGB0
#define FP_ILOGB0 (-2147483647 - 1)
#endif
#ifndef FP_ILOGBNAN
#define FP_ILOGBNAN (-2147483647 - 1)
#endif
#ifndef MAXFLOAT
#define MAXFLOAT 0x1.fffffep+127f
#endif
#ifndef HUGE_VALF
#define HUGE_VALF __builtin_huge_valf()
#endif
#define MAXHALF 0x1.ffcp15f16
#define HUGE_VALH static_cast<::metal::half>(__builtin_huge_valf())

#define M_E_F 2.71828182845904523536028747135266250f
#define M_LOG2E_F 1.44269504088896340735992468100189214f
#define M_LOG10E_F 0.434294481903251827651128918916605082f
#define M_LN2_F 0.693147180559945309417232121458176568f
#define M_LN10_F 2.30258509299404568401799145468436421f
#define M_PI_F 3.14159265358979323846264338327950288f
#define M_PI_2_F 1.57079632679489661923132169163975144f
#define M_PI_4_F 0.785398163397448309615660845819875721f
#define M_1_PI_F 0.318309886183790671537767526745028724f
#define M_2_PI_F 0.636619772367581343075535053490057448f
#define M_2_SQRTPI_F 1.12837916709551257389615890312154517f
#define M_SQRT2_F 1.41421356237309504880168872420969808f
#define M_SQRT1_2_F 0.707106781186547524400844362104849039f

#define M_E_H 2.71828182845904523536028747135266250f16
#define M_LOG2E_H 1.44269504088896340735992468100189214f16
#define M_LOG10E_H 0.434294481903251827651128918916605082f16
#define M_LN2_H 0.693147180559945309417232121458176568f16
#define M_LN10_H 2.30258509299404568401799145468436421f16
#define M_PI_H 3.14159265358979323846264338327950288f16
#define M_PI_2_H 1.57079632679489661923132169163975144f16
#define M_PI_4_H 0.785398163397448309615660845819875721f16
#define M_1_PI_H 0.318309886183790671537767526745028724f16
#define M_2_PI_H 0.636619772367581343075535053490057448f16
#define M_2_SQRTPI_H 1.12837916709551257389615890312154517f16
#define M_SQRT2_H 1.41421356237309504880168872420969808f16
#define M_SQRT1_2_H 0.707106781186547524400844362104849039f16

// The limits Metal spells as macros (MSL specification, "Numeric Limits"),
// defined here rather than taken from <cfloat> and <climits> so that only
// Metal's names exist (no DBL_*) and half has its own set. Each has the value
// of the matching numeric_limits member.
#ifndef FLT_DIG
#define FLT_DIG 6
#endif
#ifndef FLT_MANT_DIG
#define FLT_MANT_DIG 24
#endif
#ifndef FLT_MAX_10_EXP
#define FLT_MAX_10_EXP +38
#endif
#ifndef FLT_MAX_EXP
#define FLT_MAX_EXP +128
#endif
#ifndef FLT_MIN_10_EXP
#define FLT_MIN_10_EXP -37
#endif
#ifndef FLT_MIN_EXP
#define FLT_MIN_EXP -125
#endif
#ifndef FLT_RADIX
#define FLT_RADIX 2
#endif
#ifndef FLT_MAX
#define FLT_MAX 0x1.fffffep127f
#endif
#ifndef FLT_MIN
#define FLT_MIN 0x1p-126f
#endif
#ifndef FLT_EPSILON
#define FLT_EPSILON 0x1p-23f
#endif

#ifndef HALF_DIG
#define HALF_DIG 3
#endif
#ifndef HALF_MANT_DIG
#define HALF_MANT_DIG 11
#endif
#ifndef HALF_MAX_10_EXP
#define HALF_MAX_10_EXP +4
#endif
#ifndef HALF_MAX_EXP
#define HALF_MAX_EXP +16
#endif
#ifndef HALF_MIN_10_EXP
#define HALF_MIN_10_EXP -4
#endif
#ifndef HALF_MIN_EXP
#define HALF_MIN_EXP -13
#endif
#ifndef HALF_RADIX
#define HALF_RADIX 2
#endif
#ifndef HALF_MAX
#define HALF_MAX MAXHALF
#endif
#ifndef HALF_MIN
#define HALF_MIN 0x1p-14f16
#endif
#ifndef HALF_EPSILON
#define HALF_EPSILON 0x1p-10f16
#endif

#ifndef CHAR_BIT
#define CHAR_BIT 8
#endif
#ifndef SCHAR_MAX
#define SCHAR_MAX 127
#endif
#ifndef SCHAR_MIN
#define SCHAR_MIN (-128)
#endif
#ifndef UCHAR_MAX
#define UCHAR_MAX 255
#endif
#ifndef CHAR_MAX
#define CHAR_MAX SCHAR_MAX
#endif
#ifndef CHAR_MIN
#define CHAR_MIN SCHAR_MIN
#endif
#ifndef USHRT_MAX
#define USHRT_MAX 65535
#endif
#ifndef SHRT_MAX
#define SHRT_MAX 32767
#endif
#ifndef SHRT_MIN
#define SHRT_MIN (-32768)
#endif
#ifndef UINT_MAX
#define UINT_MAX 0xffffffffu
#endif
#ifndef INT_MAX
#define INT_MAX 2147483647
#endif
#ifndef INT_MIN
#define INT_MIN (-2147483647 - 1)
#endif
#ifndef ULONG_MAX
#define ULONG_MAX 0xfffffffffffffffful
#endif
#ifndef LONG_MAX
#define LONG_MAX 9223372036854775807l
#endif
#ifndef LONG_MIN
#define LONG_MIN (-9223372036854775807l - 1)
#endif
