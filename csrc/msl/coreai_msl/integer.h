// Metal's integer functions for every integer type and its vectors. Results
// are computed without undefined behaviour: overflowing cases wrap or saturate
// exactly as the function's definition says.
#pragma once

#include <limits>
#include <type_traits>

#include "elementwise.h"

namespace metal {

namespace detail {

template <class E>
using unsigned_of = std::make_unsigned_t<E>;

template <class E>
inline constexpr int bit_width = 8 * static_cast<int>(sizeof(E));

template <class E>
inline E saturating_add(E a, E b) {
  E result;
  if (!__builtin_add_overflow(a, b, &result)) {
    return result;
  }
  if constexpr (std::is_signed_v<E>) {
    return b > 0 ? std::numeric_limits<E>::max() : std::numeric_limits<E>::min();
  } else {
    return std::numeric_limits<E>::max();
  }
}

template <class E>
inline E saturating_sub(E a, E b) {
  E result;
  if (!__builtin_sub_overflow(a, b, &result)) {
    return result;
  }
  if constexpr (std::is_signed_v<E>) {
    return b < 0 ? std::numeric_limits<E>::max() : std::numeric_limits<E>::min();
  } else {
    return E(0);
  }
}

// High half of the full product.
template <class E>
inline E high_product(E a, E b) {
  if constexpr (sizeof(E) == 8) {
    using Wide = std::conditional_t<std::is_signed_v<E>, __int128, unsigned __int128>;
    return static_cast<E>((static_cast<Wide>(a) * static_cast<Wide>(b)) >> 64);
  } else {
    using Wide = std::conditional_t<std::is_signed_v<E>, long long, unsigned long long>;
    return static_cast<E>((static_cast<Wide>(a) * static_cast<Wide>(b)) >> bit_width<E>);
  }
}

template <class E>
inline E saturating_mad(E a, E b, E c) {
  // 128 bits hold a 64 x 64-bit product plus a 64-bit addend exactly.
  using Wide = std::conditional_t<std::is_signed_v<E>, __int128, unsigned __int128>;
  Wide exact = static_cast<Wide>(a) * static_cast<Wide>(b) + static_cast<Wide>(c);
  if (exact > static_cast<Wide>(std::numeric_limits<E>::max())) {
    return std::numeric_limits<E>::max();
  }
  if (exact < static_cast<Wide>(std::numeric_limits<E>::min())) {
    return std::numeric_limits<E>::min();
  }
  return static_cast<E>(exact);
}

template <class E>
inline int count_leading_zeros(E x) {
  auto u = static_cast<unsigned_of<E>>(x);
  if (u == 0) {
    return bit_width<E>;
  }
  return __builtin_clzll(static_cast<unsigned long long>(u)) - (64 - bit_width<E>);
}

template <class E>
inline int count_trailing_zeros(E x) {
  auto u = static_cast<unsigned_of<E>>(x);
  if (u == 0) {
    return bit_width<E>;
  }
  return __builtin_ctzll(static_cast<unsigned long long>(u));
}

template <class E>
inline E rotate_left(E x, E by) {
  using U = unsigned_of<E>;
  // Metal takes the rotation modulo the bit width; negative counts too.
  unsigned n = static_cast<unsigned>(static_cast<U>(by)) % static_cast<unsigned>(bit_width<E>);
  U u = static_cast<U>(x);
  if (n == 0) {
    return x;
  }
  return static_cast<E>(static_cast<U>((u << n) | (u >> (bit_width<E> - n))));
}

template <class E>
inline E reverse_bit_order(E x) {
  using U = unsigned_of<E>;
  U u = static_cast<U>(x);
  U result = 0;
  for (int i = 0; i < bit_width<E>; ++i) {
    result = static_cast<U>((result << 1) | ((u >> i) & 1u));
  }
  return static_cast<E>(result);
}

// Bits [offset, offset + bits) of x, sign-extended for signed types.
template <class E>
inline E extract_bit_field(E x, unsigned offset, unsigned bits) {
  using U = unsigned_of<E>;
  if (bits == 0) {
    return E(0);
  }
  U field = static_cast<U>(static_cast<U>(x) >> offset);
  if (bits < static_cast<unsigned>(bit_width<E>)) {
    field = static_cast<U>(field & ((U(1) << bits) - 1));
    if constexpr (std::is_signed_v<E>) {
      U sign = static_cast<U>(U(1) << (bits - 1));
      field = static_cast<U>((field ^ sign) - sign);
    }
  }
  return static_cast<E>(field);
}

template <class E>
inline E insert_bit_field(E base, E insert, unsigned offset, unsigned bits) {
  using U = unsigned_of<E>;
  if (bits == 0) {
    return base;
  }
  U mask = bits < static_cast<unsigned>(bit_width<E>) ? static_cast<U>((U(1) << bits) - 1)
                                                     : static_cast<U>(~U(0));
  mask = static_cast<U>(mask << offset);
  U result = static_cast<U>((static_cast<U>(base) & ~mask) |
                            ((static_cast<U>(insert) << offset) & mask));
  return static_cast<E>(result);
}

}  // namespace detail

template <detail::integer X>
inline X abs(X x) {
  return detail::map_components(x, [](auto v) -> decltype(v) {
    using E = decltype(v);
    if constexpr (std::is_signed_v<E>) {
      // |min| wraps to min, as in two's complement hardware.
      using U = detail::unsigned_of<E>;
#if defined(__NVPTX__)
      if constexpr (sizeof(E) < sizeof(int)) {
        // LLVM narrows this to PTX's abs.s16, which ptxas gives |-32768| =
        // +32768 rather than the wrapped -32768: take |v| in 32 bits, where
        // the value cannot overflow, hiding that it was a short so that it
        // stays there, and keep the low bits.
        int wide = v;
        __asm__("" : "+r"(wide));
        return static_cast<E>(static_cast<U>(wide < 0 ? -wide : wide));
      }
#endif
      return static_cast<E>(v < 0 ? static_cast<U>(0u - static_cast<U>(v)) : static_cast<U>(v));
    } else {
      return v;
    }
  });
}

// |x - y| computed without overflow and returned in x's type, as Metal declares
// it; a difference beyond the signed range keeps its bit pattern.
template <detail::integer X>
inline X absdiff(X x, X y) {
  return detail::map_components(x, y, [](auto a, auto b) -> decltype(a) {
    using U = detail::unsigned_of<decltype(a)>;
    U difference = a > b ? static_cast<U>(static_cast<U>(a) - static_cast<U>(b))
                         : static_cast<U>(static_cast<U>(b) - static_cast<U>(a));
    return static_cast<decltype(a)>(difference);
  });
}

#define COREAI_MSL_INTEGER_BINARY(name, expression)                                     \
  template <detail::integer X>                                                          \
  inline X name(X x, X y) {                                                             \
    return detail::map_components(x, y, [](auto a, auto b) -> decltype(a) {             \
      using E [[maybe_unused]] = decltype(a);                                           \
      return expression;                                                                \
    });                                                                                 \
  }

COREAI_MSL_INTEGER_BINARY(min, b < a ? b : a)
COREAI_MSL_INTEGER_BINARY(max, a < b ? b : a)
COREAI_MSL_INTEGER_BINARY(addsat, detail::saturating_add(a, b))
COREAI_MSL_INTEGER_BINARY(subsat, detail::saturating_sub(a, b))
COREAI_MSL_INTEGER_BINARY(mulhi, detail::high_product(a, b))
COREAI_MSL_INTEGER_BINARY(rotate, detail::rotate_left(a, b))
// (a + b) >> 1 and (a + b + 1) >> 1 without overflow.
COREAI_MSL_INTEGER_BINARY(hadd, static_cast<E>((a >> 1) + (b >> 1) + (a & b & 1)))
COREAI_MSL_INTEGER_BINARY(rhadd, static_cast<E>((a >> 1) + (b >> 1) + ((a | b) & 1)))

#undef COREAI_MSL_INTEGER_BINARY

#define COREAI_MSL_INTEGER_TERNARY(name, expression)                                    \
  template <detail::integer X>                                                          \
  inline X name(X x, X y, X z) {                                                        \
    return detail::map_components(x, y, z, [](auto a, auto b, auto c) -> decltype(a) { \
      using E [[maybe_unused]] = decltype(a);                                           \
      return expression;                                                                \
    });                                                                                 \
  }

COREAI_MSL_INTEGER_TERNARY(clamp, c < (b < a ? a : b) ? c : (b < a ? a : b))
COREAI_MSL_INTEGER_TERNARY(min3, b < a ? (c < b ? c : b) : (c < a ? c : a))
COREAI_MSL_INTEGER_TERNARY(max3, a < b ? (b < c ? c : b) : (a < c ? c : a))
COREAI_MSL_INTEGER_TERNARY(median3, a < b ? (b < c ? b : (a < c ? c : a))
                                          : (a < c ? a : (b < c ? c : b)))
// mulhi(a, b) + c, wrapping.
COREAI_MSL_INTEGER_TERNARY(madhi, static_cast<E>(static_cast<detail::unsigned_of<E>>(
                                                     detail::high_product(a, b)) +
                                                 static_cast<detail::unsigned_of<E>>(c)))
// a * b + c, computed exactly and then saturated to the type's range.
COREAI_MSL_INTEGER_TERNARY(madsat, detail::saturating_mad(a, b, c))

#undef COREAI_MSL_INTEGER_TERNARY

template <detail::integer_vector V>
inline V min(V x, detail::element_t<V> y) {
  return min(x, V(y));
}
template <detail::integer_vector V>
inline V max(V x, detail::element_t<V> y) {
  return max(x, V(y));
}
template <detail::integer_vector V>
inline V clamp(V x, detail::element_t<V> low, detail::element_t<V> high) {
  return clamp(x, V(low), V(high));
}

// Bit counts are returned in x's own type, as in Metal.
template <detail::integer X>
inline X popcount(X x) {
  return detail::map_components(x, [](auto v) -> decltype(v) {
    using E = decltype(v);
    return static_cast<E>(__builtin_popcountll(
        static_cast<unsigned long long>(static_cast<detail::unsigned_of<E>>(v))));
  });
}

template <detail::integer X>
inline X clz(X x) {
  return detail::map_components(
      x, [](auto v) -> decltype(v) { return static_cast<decltype(v)>(detail::count_leading_zeros(v)); });
}

template <detail::integer X>
inline X ctz(X x) {
  return detail::map_components(
      x, [](auto v) -> decltype(v) { return static_cast<decltype(v)>(detail::count_trailing_zeros(v)); });
}

template <detail::integer X>
inline X reverse_bits(X x) {
  return detail::map_components(x, [](auto v) -> decltype(v) { return detail::reverse_bit_order(v); });
}

template <detail::integer X>
inline X extract_bits(X x, uint offset, uint bits) {
  return detail::map_components(
      x, [=](auto v) -> decltype(v) { return detail::extract_bit_field(v, offset, bits); });
}

template <detail::integer X>
inline X insert_bits(X base, X insert, uint offset, uint bits) {
  return detail::map_components(base, insert, [=](auto b, auto i) -> decltype(b) {
    return detail::insert_bit_field(b, i, offset, bits);
  });
}

}  // namespace metal
