// Metal's relational functions: component tests that give bool vectors, and
// all / any / select, which accept both bool vectors and the -1/0 mask vectors
// that clang's vector comparisons produce (see vector.h).
#pragma once

#include "std_math.h"

#include "elementwise.h"

namespace metal {

namespace detail {

// A condition: bool, or a vector of integer or bool components.
template <class C>
concept condition_vector = is_vector_v<C> && (std::is_integral_v<element_t<C>>);

}  // namespace detail

inline bool all(bool x) {
  return x;
}
inline bool any(bool x) {
  return x;
}

template <detail::condition_vector C>
inline bool all(C x) {
  for (int i = 0; i < detail::size_v<C>; ++i) {
    if (!x[i]) {
      return false;
    }
  }
  return true;
}

template <detail::condition_vector C>
inline bool any(C x) {
  for (int i = 0; i < detail::size_v<C>; ++i) {
    if (x[i]) {
      return true;
    }
  }
  return false;
}

// select(a, b, c): b where c is true, a elsewhere (Metal's argument order).
template <class T>
  requires(detail::float_scalar<T> || detail::integer_scalar<T> || std::same_as<T, bool>)
inline T select(T a, T b, bool c) {
  return c ? b : a;
}

template <class V>
  requires detail::is_vector_v<V>
inline V select(V a, V b, bool c) {
  return c ? b : a;
}

template <class V, detail::condition_vector C>
  requires(detail::is_vector_v<V> && detail::size_v<V> == detail::size_v<C>)
inline V select(V a, V b, C c) {
  V result;
  for (int i = 0; i < detail::size_v<V>; ++i) {
    result[i] = c[i] ? b[i] : a[i];
  }
  return result;
}

#define COREAI_MSL_FLOAT_TEST(name, expression)                                     \
  template <detail::floating X>                                                     \
  inline auto name(X x) {                                                           \
    return detail::test_components(x, [](auto component) {                          \
      float v = static_cast<float>(component);                                      \
      return expression;                                                            \
    });                                                                             \
  }

COREAI_MSL_FLOAT_TEST(isnan, std::isnan(v))
COREAI_MSL_FLOAT_TEST(isinf, std::isinf(v))
COREAI_MSL_FLOAT_TEST(isfinite, std::isfinite(v))
COREAI_MSL_FLOAT_TEST(signbit, std::signbit(v))

#undef COREAI_MSL_FLOAT_TEST

// isnormal depends on the component type's own exponent range: a small float
// can be normal while the same value in half is subnormal.
template <detail::floating X>
inline auto isnormal(X x) {
  return detail::test_components(x, [](auto component) {
    using E = decltype(component);
    float v = static_cast<float>(component);
    float smallest_normal = std::same_as<E, half> ? 0x1p-14f : 0x1p-126f;
    return std::isfinite(v) && std::fabs(v) >= smallest_normal;
  });
}

template <detail::floating X>
inline auto isordered(X x, X y) {
  return detail::test_components(x, y, [](auto a, auto b) { return a == a && b == b; });
}

template <detail::floating X>
inline auto isunordered(X x, X y) {
  return detail::test_components(x, y, [](auto a, auto b) { return a != a || b != b; });
}

}  // namespace metal
