// Type categories of the Metal function library and the component-wise
// helpers every function family is built from.
#pragma once

#include <concepts>
#include <type_traits>

#include "vector.h"

namespace metal {
namespace detail {

template <class T>
concept float_scalar = std::same_as<T, float> || std::same_as<T, half> || std::same_as<T, bfloat>;
template <class T>
concept float_vector = is_vector_v<T> && float_scalar<element_t<T>>;
// float, half, bfloat and their vectors: the arguments of the math functions.
template <class T>
concept floating = float_scalar<T> || float_vector<T>;

template <class T>
concept integer_scalar = std::is_integral_v<T> && !std::same_as<T, bool>;
template <class T>
concept integer_vector = is_vector_v<T> && integer_scalar<element_t<T>>;
template <class T>
concept integer = integer_scalar<T> || integer_vector<T>;

// The type a binary or ternary math function computes in, for arguments of
// types T, U (and V), as Metal's math headers define it (the
// _math_binary_func_operand_type rules of <metal_math_utils>): equal floating
// types give themselves; a floating vector with one or two scalars gives the
// vector (the scalars are splat); scalars of which exactly one is floating give
// that floating type, so pow(float, short) computes in float. Anything else
// (half with float, two vectors of different types) has none: void.
template <class T>
concept arithmetic_scalar = float_scalar<T> || std::is_integral_v<T>;

template <class T, class U>
struct math_operand {
  using type = void;
};
template <class T, class U>
  requires(std::same_as<T, U> && floating<T>)
struct math_operand<T, U> {
  using type = T;
};
template <class T, class U>
  requires((float_vector<T> && arithmetic_scalar<U>) || (arithmetic_scalar<T> && float_vector<U>))
struct math_operand<T, U> {
  using type = std::conditional_t<float_vector<T>, T, U>;
};
template <class T, class U>
  requires(arithmetic_scalar<T> && arithmetic_scalar<U> && (float_scalar<T> != float_scalar<U>))
struct math_operand<T, U> {
  using type = std::conditional_t<float_scalar<T>, T, U>;
};
template <class T, class U>
using math_operand_t = typename math_operand<std::remove_cvref_t<T>, std::remove_cvref_t<U>>::type;

template <class T, class U, class V>
struct math_operand3 {
  using type = void;
};
template <class T>
  requires floating<T>
struct math_operand3<T, T, T> {
  using type = T;
};
// Two arguments of one type and a third of another: the binary rule.
template <class T, class V>
  requires(!std::same_as<T, V>)
struct math_operand3<T, T, V> : math_operand<T, V> {};
template <class T, class U>
  requires(!std::same_as<T, U>)
struct math_operand3<T, U, T> : math_operand<T, U> {};
template <class T, class U>
  requires(!std::same_as<T, U>)
struct math_operand3<T, U, U> : math_operand<T, U> {};
// Three different types: one floating vector with two scalars, or three
// scalars of which exactly one is floating.
template <class T, class U, class V>
  requires(!std::same_as<T, U> && !std::same_as<T, V> && !std::same_as<U, V> &&
           (((float_vector<T> + float_vector<U> + float_vector<V>) == 1 &&
             (arithmetic_scalar<T> + arithmetic_scalar<U> + arithmetic_scalar<V>) == 2) ||
            (arithmetic_scalar<T> && arithmetic_scalar<U> && arithmetic_scalar<V> &&
             (float_scalar<T> + float_scalar<U> + float_scalar<V>) == 1)))
struct math_operand3<T, U, V> {
  using type = std::conditional_t<floating<T>, T, std::conditional_t<floating<U>, U, V>>;
};
template <class T, class U, class V>
using math_operand3_t = typename math_operand3<std::remove_cvref_t<T>, std::remove_cvref_t<U>,
                                               std::remove_cvref_t<V>>::type;

// The bool vector with as many components as V.
template <class V>
using bool_vector_for = vec<char, size_v<V>>;

// Applies f to every component. half and bfloat components are widened to
// float first and the float result is rounded once to the component type,
// which is how the GPU evaluates the narrow types' math functions.
template <class X, class F>
inline X map_via_float(X x, F f) {
  using E = element_t<X>;
  if constexpr (is_vector_v<X>) {
    X result;
    for (int i = 0; i < size_v<X>; ++i) {
      result[i] = static_cast<E>(f(static_cast<float>(x[i])));
    }
    return result;
  } else {
    return static_cast<E>(f(static_cast<float>(x)));
  }
}

template <class X, class F>
inline X map_via_float(X x, X y, F f) {
  using E = element_t<X>;
  if constexpr (is_vector_v<X>) {
    X result;
    for (int i = 0; i < size_v<X>; ++i) {
      result[i] = static_cast<E>(f(static_cast<float>(x[i]), static_cast<float>(y[i])));
    }
    return result;
  } else {
    return static_cast<E>(f(static_cast<float>(x), static_cast<float>(y)));
  }
}

template <class X, class F>
inline X map_via_float(X x, X y, X z, F f) {
  using E = element_t<X>;
  if constexpr (is_vector_v<X>) {
    X result;
    for (int i = 0; i < size_v<X>; ++i) {
      result[i] = static_cast<E>(
          f(static_cast<float>(x[i]), static_cast<float>(y[i]), static_cast<float>(z[i])));
    }
    return result;
  } else {
    return static_cast<E>(f(static_cast<float>(x), static_cast<float>(y), static_cast<float>(z)));
  }
}

// Applies f to every component in the component type itself (integers).
template <class X, class F>
inline X map_components(X x, F f) {
  if constexpr (is_vector_v<X>) {
    X result;
    for (int i = 0; i < size_v<X>; ++i) {
      result[i] = f(static_cast<element_t<X>>(x[i]));
    }
    return result;
  } else {
    return f(x);
  }
}

template <class X, class F>
inline X map_components(X x, X y, F f) {
  if constexpr (is_vector_v<X>) {
    X result;
    for (int i = 0; i < size_v<X>; ++i) {
      result[i] = f(static_cast<element_t<X>>(x[i]), static_cast<element_t<X>>(y[i]));
    }
    return result;
  } else {
    return f(x, y);
  }
}

template <class X, class F>
inline X map_components(X x, X y, X z, F f) {
  if constexpr (is_vector_v<X>) {
    X result;
    for (int i = 0; i < size_v<X>; ++i) {
      result[i] = f(static_cast<element_t<X>>(x[i]), static_cast<element_t<X>>(y[i]),
                    static_cast<element_t<X>>(z[i]));
    }
    return result;
  } else {
    return f(x, y, z);
  }
}

// A per-component predicate: bool for a scalar, a bool vector (0 or 1 per
// component) for a vector.
template <class X, class F>
inline auto test_components(X x, F f) {
  if constexpr (is_vector_v<X>) {
    bool_vector_for<X> result;
    for (int i = 0; i < size_v<X>; ++i) {
      result[i] = f(x[i]) ? 1 : 0;
    }
    return result;
  } else {
    return static_cast<bool>(f(x));
  }
}

template <class X, class F>
inline auto test_components(X x, X y, F f) {
  if constexpr (is_vector_v<X>) {
    bool_vector_for<X> result;
    for (int i = 0; i < size_v<X>; ++i) {
      result[i] = f(x[i], y[i]) ? 1 : 0;
    }
    return result;
  } else {
    return static_cast<bool>(f(x, y));
  }
}

}  // namespace detail
}  // namespace metal
