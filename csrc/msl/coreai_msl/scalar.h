// Metal scalar types for the CPU backend.
//
// half is _Float16 and bfloat is __bf16. Each operation on them rounds to the
// narrow type like the GPU does only when the translation unit is compiled with
//   -Xclang -ffloat16-excess-precision=none -Xclang -fbfloat16-excess-precision=none
// (clang otherwise keeps intermediates in float). clang gives no macro telling
// whether the flags are on; metal::detail::narrow_types_round_per_operation()
// checks it at run time.
#pragma once

#include <cstddef>
#include <cstdint>

// clang lowers float -> __bf16 conversions to calls into the compiler runtime.
// libgcc before GCC 13 does not have them, so the header carries its own. They
// are weak so that a runtime library providing the same routines wins, and not
// inline because the calls come from code generation, which an inline
// definition does not see.
extern "C" {

__attribute__((weak, visibility("hidden"))) __bf16 __truncsfbf2(float value) {
  std::uint32_t bits = __builtin_bit_cast(std::uint32_t, value);
  std::uint16_t narrow;
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // Keep the sign and the top payload bits, force the quiet bit.
    narrow = static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  } else {
    // Round to nearest, ties to even: add half an ulp of the result, minus
    // one when the bit that survives is even.
    bits += 0x7fffu + ((bits >> 16) & 1u);
    narrow = static_cast<std::uint16_t>(bits >> 16);
  }
  return __builtin_bit_cast(__bf16, narrow);
}

__attribute__((weak, visibility("hidden"))) __bf16 __truncdfbf2(double value) {
  // Round to float with round-to-odd, then to bfloat with round-to-nearest:
  // float keeps more than two extra bits, so the result is rounded once.
  float rounded = static_cast<float>(value);
  if (rounded == rounded && static_cast<double>(rounded) != value) {
    std::uint32_t bits = __builtin_bit_cast(std::uint32_t, rounded);
    double magnitude = value < 0 ? -value : value;
    double rounded_magnitude = rounded < 0 ? -static_cast<double>(rounded) : rounded;
    if (rounded_magnitude > magnitude) {
      bits -= 1;  // step toward zero: truncate instead of rounding away
    }
    bits |= 1u;
    rounded = __builtin_bit_cast(float, bits);
  }
  return __truncsfbf2(rounded);
}

}  // extern "C"

namespace metal {

using half = _Float16;
using bfloat = __bf16;

using uchar = unsigned char;
using ushort = unsigned short;
using uint = unsigned int;
// Metal's long is 64 bits, as is the C++ long of every 64-bit Linux and macOS
// target we compile for.
using ulong = unsigned long;
static_assert(sizeof(long) == 8, "Metal's long is 64-bit; this target's long is not");

using std::int16_t;
using std::int32_t;
using std::int64_t;
using std::int8_t;
using std::uint16_t;
using std::uint32_t;
using std::uint64_t;
using std::uint8_t;
using std::ptrdiff_t;
using std::size_t;

namespace detail {

// True when half and bfloat arithmetic rounds after every operation. The
// operands are volatile so that the expression is evaluated by generated code,
// which is where the excess-precision flags act.
inline bool narrow_types_round_per_operation() {
  volatile half ha = static_cast<half>(0.1f), hb = static_cast<half>(3.3f),
                hc = static_cast<half>(0.33f);
  volatile bfloat ba = static_cast<bfloat>(0.1f), bb = static_cast<bfloat>(3.3f),
                  bc = static_cast<bfloat>(0.33f);
  half h = ha * hb - hc;
  bfloat b = ba * bb - bc;
  return static_cast<float>(h) == 0.0f && static_cast<float>(b) == 0.0f;
}

}  // namespace detail
}  // namespace metal
