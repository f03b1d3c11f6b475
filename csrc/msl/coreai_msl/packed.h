// Metal's packed vectors: N components with no padding (packed_float3 is 12
// bytes where float3 is 16), convertible to and from the aligned vector and
// indexable. Arithmetic goes through the conversion to vec<T, N>.
#pragma once

#include "vector.h"

namespace metal {

template <class T>
struct packed_vec<T, 2> {
  T x, y;
  packed_vec() = default;
  constexpr packed_vec(T x_, T y_) : x(x_), y(y_) {}
  constexpr packed_vec(vec<T, 2> v) : x(v.x), y(v.y) {}
  constexpr operator vec<T, 2>() const { return vec<T, 2>{x, y}; }
  constexpr T& operator[](int i) { return (&x)[i]; }
  constexpr const T& operator[](int i) const { return (&x)[i]; }
};

template <class T>
struct packed_vec<T, 3> {
  T x, y, z;
  packed_vec() = default;
  constexpr packed_vec(T x_, T y_, T z_) : x(x_), y(y_), z(z_) {}
  constexpr packed_vec(vec<T, 3> v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator vec<T, 3>() const { return vec<T, 3>{x, y, z}; }
  constexpr T& operator[](int i) { return (&x)[i]; }
  constexpr const T& operator[](int i) const { return (&x)[i]; }
};

template <class T>
struct packed_vec<T, 4> {
  T x, y, z, w;
  packed_vec() = default;
  constexpr packed_vec(T x_, T y_, T z_, T w_) : x(x_), y(y_), z(z_), w(w_) {}
  constexpr packed_vec(vec<T, 4> v) : x(v.x), y(v.y), z(v.z), w(v.w) {}
  constexpr operator vec<T, 4>() const { return vec<T, 4>{x, y, z, w}; }
  constexpr T& operator[](int i) { return (&x)[i]; }
  constexpr const T& operator[](int i) const { return (&x)[i]; }
};

#define COREAI_MSL_PACKED_TYPES(name, element)         \
  using packed_##name##2 = packed_vec<element, 2>;     \
  using packed_##name##3 = packed_vec<element, 3>;     \
  using packed_##name##4 = packed_vec<element, 4>;

COREAI_MSL_PACKED_TYPES(char, signed char)
COREAI_MSL_PACKED_TYPES(uchar, unsigned char)
COREAI_MSL_PACKED_TYPES(short, short)
COREAI_MSL_PACKED_TYPES(ushort, unsigned short)
COREAI_MSL_PACKED_TYPES(int, int)
COREAI_MSL_PACKED_TYPES(uint, unsigned int)
COREAI_MSL_PACKED_TYPES(long, long)
COREAI_MSL_PACKED_TYPES(ulong, unsigned long)
COREAI_MSL_PACKED_TYPES(half, half)
COREAI_MSL_PACKED_TYPES(bfloat, bfloat)
COREAI_MSL_PACKED_TYPES(float, float)

#undef COREAI_MSL_PACKED_TYPES

static_assert(sizeof(packed_float3) == 12 && alignof(packed_float3) == 4);
static_assert(sizeof(packed_half3) == 6 && alignof(packed_half3) == 2);

}  // namespace metal
