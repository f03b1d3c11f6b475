// Metal vector types on clang's ext_vector_type.
//
// clang gives element-wise operators, splats from scalars, and swizzles that
// read and write (.xyzw, .rgba). What it lacks is Metal's constructor syntax,
// float4(a.xy, b.zw) or float4(1, 2, 3, 4); a function-like macro per type name
// maps those to make_vector. A bare type name (float4 v;) has no '(' after it
// and is left alone.
//
// Boolean vectors (bool2/3/4) store one char per component, 0 or 1, so they
// have Metal's size and layout and support swizzles (clang's own bool vectors
// are bit-packed and have neither). vec<bool, N> is clang's bit-packed type and
// is not the same as boolN; write boolN.
//
// Comparing two vectors gives clang's mask vector: a signed integer vector of
// the operands' width holding -1 (true) or 0 (false), not a bool vector as in
// Metal. select, all and any accept masks and bool vectors alike. Converting a
// mask with a vector constructor keeps the -1: write bool4(a < b) to get 0/1,
// and select(0.0f, 1.0f, a < b) for 0.0/1.0.
//
// Known differences from Metal that the C++ type system cannot catch:
//  - (float4)int4_value and vec<float, 4>(int4_value) reinterpret the bits in
//    clang (same-size vectors); Metal converts. Use float4(int4_value).
//  - static_cast between vector types does not compile; use the constructor.
//  - clang refuses the scalar conversions bfloat(half_value) and
//    half(bfloat_value); write bfloat(float(half_value)). The vector
//    constructors (bfloat4(half4_value)) do convert.
#pragma once

#include <type_traits>

#include "index_sequence.h"
#include "scalar.h"

namespace metal {

template <class T, int N>
using vec = T __attribute__((ext_vector_type(N)));

template <class T, int N>
struct packed_vec;

namespace detail {

// The storage element of a Metal vector whose components have type T.
template <class T>
struct vector_storage {
  using type = T;
};
template <>
struct vector_storage<bool> {
  using type = char;
};

// Component count and element type of a scalar, vector or packed vector.
template <class V>
struct vector_traits {
  static constexpr int size = 1;
  static constexpr bool is_vector = false;
  using element = V;
};
template <class T, int N>
struct vector_traits<vec<T, N>> {
  static constexpr int size = N;
  static constexpr bool is_vector = true;
  using element = T;
};
template <class T, int N>
struct vector_traits<packed_vec<T, N>> {
  static constexpr int size = N;
  static constexpr bool is_vector = false;  // a struct, not an ext vector
  using element = T;
};

template <class V>
inline constexpr bool is_vector_v = vector_traits<std::remove_cvref_t<V>>::is_vector;
template <class V>
using element_t = typename vector_traits<std::remove_cvref_t<V>>::element;
template <class V>
inline constexpr int size_v = vector_traits<std::remove_cvref_t<V>>::size;

template <class V>
inline constexpr bool is_packed_v = false;
template <class T, int N>
inline constexpr bool is_packed_v<packed_vec<T, N>> = true;

template <class V>
inline constexpr bool is_component_source_v =
    std::is_arithmetic_v<std::remove_cvref_t<V>> || is_vector_v<V> ||
    is_packed_v<std::remove_cvref_t<V>> || std::is_same_v<std::remove_cvref_t<V>, half> ||
    std::is_same_v<std::remove_cvref_t<V>, bfloat>;

// Converts one component to the element type E of the vector being built;
// bool components become 0 or 1.
template <class E, class S>
constexpr typename vector_storage<E>::type convert_component(S value) {
  if constexpr (std::is_same_v<E, bool>) {
    return value != S(0) ? 1 : 0;
  } else if constexpr ((std::is_same_v<E, half> && std::is_same_v<S, bfloat>) ||
                       (std::is_same_v<E, bfloat> && std::is_same_v<S, half>)) {
    // clang has no direct conversion between the two; float holds both
    // exactly, so going through it rounds once.
    return static_cast<E>(static_cast<float>(value));
  } else {
    return static_cast<E>(value);
  }
}

template <class E, int N, class A>
constexpr void append_components(typename vector_storage<E>::type (&out)[N], int& next,
                                 const A& arg) {
  if constexpr (is_vector_v<A> || is_packed_v<A>) {
    for (int i = 0; i < size_v<A>; ++i) {
      out[next++] = convert_component<E>(arg[i]);
    }
  } else {
    out[next++] = convert_component<E>(arg);
  }
}

template <class S, int N, std::size_t... I>
constexpr vec<S, N> vector_from_array(const S (&components)[N], detail::index_sequence<I...>) {
  return vec<S, N>{components[I]...};
}

template <class E, int N, class... A>
constexpr vec<typename vector_storage<E>::type, N> make_vector(const A&... args) {
  using S = typename vector_storage<E>::type;
  static_assert((is_component_source_v<A> && ...),
                "Metal vector constructor: every argument must be a scalar or a vector");
  constexpr int supplied = (size_v<A> + ... + 0);
  if constexpr (sizeof...(A) == 0) {
    return vec<S, N>(S(0));
  } else if constexpr (sizeof...(A) == 1 && supplied == 1) {
    return vec<S, N>(convert_component<E>(args...));
  } else {
    static_assert(supplied == N,
                  "Metal vector constructor: the arguments must supply exactly as many "
                  "components as the vector has (see the template arguments E, N and A)");
    S components[N] = {};
    int next = 0;
    (append_components<E, N>(components, next, args), ...);
    return vector_from_array<S, N>(components, detail::make_index_sequence<N>{});
  }
}

}  // namespace detail

// Metal's vector names. Metal's char is signed.
#define COREAI_MSL_VECTOR_TYPES(name, element)          \
  using name##2 = vec<element, 2>;                      \
  using name##3 = vec<element, 3>;                      \
  using name##4 = vec<element, 4>;

COREAI_MSL_VECTOR_TYPES(char, signed char)
COREAI_MSL_VECTOR_TYPES(uchar, unsigned char)
COREAI_MSL_VECTOR_TYPES(short, short)
COREAI_MSL_VECTOR_TYPES(ushort, unsigned short)
COREAI_MSL_VECTOR_TYPES(int, int)
COREAI_MSL_VECTOR_TYPES(uint, unsigned int)
COREAI_MSL_VECTOR_TYPES(long, long)
COREAI_MSL_VECTOR_TYPES(ulong, unsigned long)
COREAI_MSL_VECTOR_TYPES(half, half)
COREAI_MSL_VECTOR_TYPES(bfloat, bfloat)
COREAI_MSL_VECTOR_TYPES(float, float)
COREAI_MSL_VECTOR_TYPES(bool, char)

#undef COREAI_MSL_VECTOR_TYPES

// Bit reinterpretation between types of the same size.
template <class To, class From>
constexpr To as_type(const From& value) {
  static_assert(sizeof(To) == sizeof(From),
                "as_type<To>(value): To and the type of value must have the same size");
  return __builtin_bit_cast(To, value);
}

}  // namespace metal

// Constructor syntax. Defined after the type names so that the declarations
// above are not macro calls.
#define char2(...) ::metal::detail::make_vector<signed char, 2>(__VA_ARGS__)
#define char3(...) ::metal::detail::make_vector<signed char, 3>(__VA_ARGS__)
#define char4(...) ::metal::detail::make_vector<signed char, 4>(__VA_ARGS__)
#define uchar2(...) ::metal::detail::make_vector<unsigned char, 2>(__VA_ARGS__)
#define uchar3(...) ::metal::detail::make_vector<unsigned char, 3>(__VA_ARGS__)
#define uchar4(...) ::metal::detail::make_vector<unsigned char, 4>(__VA_ARGS__)
#define short2(...) ::metal::detail::make_vector<short, 2>(__VA_ARGS__)
#define short3(...) ::metal::detail::make_vector<short, 3>(__VA_ARGS__)
#define short4(...) ::metal::detail::make_vector<short, 4>(__VA_ARGS__)
#define ushort2(...) ::metal::detail::make_vector<unsigned short, 2>(__VA_ARGS__)
#define ushort3(...) ::metal::detail::make_vector<unsigned short, 3>(__VA_ARGS__)
#define ushort4(...) ::metal::detail::make_vector<unsigned short, 4>(__VA_ARGS__)
#define int2(...) ::metal::detail::make_vector<int, 2>(__VA_ARGS__)
#define int3(...) ::metal::detail::make_vector<int, 3>(__VA_ARGS__)
#define int4(...) ::metal::detail::make_vector<int, 4>(__VA_ARGS__)
#define uint2(...) ::metal::detail::make_vector<unsigned int, 2>(__VA_ARGS__)
#define uint3(...) ::metal::detail::make_vector<unsigned int, 3>(__VA_ARGS__)
#define uint4(...) ::metal::detail::make_vector<unsigned int, 4>(__VA_ARGS__)
#define long2(...) ::metal::detail::make_vector<long, 2>(__VA_ARGS__)
#define long3(...) ::metal::detail::make_vector<long, 3>(__VA_ARGS__)
#define long4(...) ::metal::detail::make_vector<long, 4>(__VA_ARGS__)
#define ulong2(...) ::metal::detail::make_vector<unsigned long, 2>(__VA_ARGS__)
#define ulong3(...) ::metal::detail::make_vector<unsigned long, 3>(__VA_ARGS__)
#define ulong4(...) ::metal::detail::make_vector<unsigned long, 4>(__VA_ARGS__)
#define half2(...) ::metal::detail::make_vector<::metal::half, 2>(__VA_ARGS__)
#define half3(...) ::metal::detail::make_vector<::metal::half, 3>(__VA_ARGS__)
#define half4(...) ::metal::detail::make_vector<::metal::half, 4>(__VA_ARGS__)
#define bfloat2(...) ::metal::detail::make_vector<::metal::bfloat, 2>(__VA_ARGS__)
#define bfloat3(...) ::metal::detail::make_vector<::metal::bfloat, 3>(__VA_ARGS__)
#define bfloat4(...) ::metal::detail::make_vector<::metal::bfloat, 4>(__VA_ARGS__)
#define float2(...) ::metal::detail::make_vector<float, 2>(__VA_ARGS__)
#define float3(...) ::metal::detail::make_vector<float, 3>(__VA_ARGS__)
#define float4(...) ::metal::detail::make_vector<float, 4>(__VA_ARGS__)
#define bool2(...) ::metal::detail::make_vector<bool, 2>(__VA_ARGS__)
#define bool3(...) ::metal::detail::make_vector<bool, 3>(__VA_ARGS__)
#define bool4(...) ::metal::detail::make_vector<bool, 4>(__VA_ARGS__)
