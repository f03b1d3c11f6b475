// Metal's geometric functions for float, half and bfloat vectors. Sums of
// products of half and bfloat components accumulate in float and round once.
#pragma once

#include "std_math.h"

#include "elementwise.h"

namespace metal {

namespace detail {

template <class V>
inline float dot_in_float(V x, V y) {
  float sum = 0.0f;
  for (int i = 0; i < size_v<V>; ++i) {
    sum += static_cast<float>(x[i]) * static_cast<float>(y[i]);
  }
  return sum;
}

}  // namespace detail

template <detail::float_vector V>
inline detail::element_t<V> dot(V x, V y) {
  return static_cast<detail::element_t<V>>(detail::dot_in_float(x, y));
}

template <detail::float_vector V>
inline detail::element_t<V> length_squared(V x) {
  return static_cast<detail::element_t<V>>(detail::dot_in_float(x, x));
}

template <detail::float_vector V>
inline detail::element_t<V> length(V x) {
  return static_cast<detail::element_t<V>>(std::sqrt(detail::dot_in_float(x, x)));
}

template <detail::float_vector V>
inline detail::element_t<V> distance_squared(V x, V y) {
  V d = x - y;
  return static_cast<detail::element_t<V>>(detail::dot_in_float(d, d));
}

template <detail::float_vector V>
inline detail::element_t<V> distance(V x, V y) {
  V d = x - y;
  return static_cast<detail::element_t<V>>(std::sqrt(detail::dot_in_float(d, d)));
}

template <detail::float_vector V>
inline V normalize(V x) {
  float inverse_length = 1.0f / std::sqrt(detail::dot_in_float(x, x));
  V result;
  for (int i = 0; i < detail::size_v<V>; ++i) {
    result[i] = static_cast<detail::element_t<V>>(static_cast<float>(x[i]) * inverse_length);
  }
  return result;
}

template <detail::float_vector V>
  requires(detail::size_v<V> == 3)
inline V cross(V x, V y) {
  using E = detail::element_t<V>;
  auto f = [](E e) { return static_cast<float>(e); };
  return V{static_cast<E>(f(x.y) * f(y.z) - f(x.z) * f(y.y)),
           static_cast<E>(f(x.z) * f(y.x) - f(x.x) * f(y.z)),
           static_cast<E>(f(x.x) * f(y.y) - f(x.y) * f(y.x))};
}

// Reflection of the incident vector i about the normal n (n normalised).
template <detail::float_vector V>
inline V reflect(V i, V n) {
  using E = detail::element_t<V>;
  return i - static_cast<E>(2) * dot(n, i) * n;
}

// Refraction of i through a surface with normal n and index ratio eta.
template <detail::float_vector V>
inline V refract(V i, V n, detail::element_t<V> eta) {
  using E = detail::element_t<V>;
  float cosine = detail::dot_in_float(n, i);
  float e = static_cast<float>(eta);
  float k = 1.0f - e * e * (1.0f - cosine * cosine);
  if (k < 0.0f) {
    return V(E(0));
  }
  V result;
  for (int c = 0; c < detail::size_v<V>; ++c) {
    result[c] = static_cast<E>(e * static_cast<float>(i[c]) -
                               (e * cosine + std::sqrt(k)) * static_cast<float>(n[c]));
  }
  return result;
}

// n if dot(nref, i) < 0, otherwise -n.
template <detail::float_vector V>
inline V faceforward(V n, V i, V nref) {
  return detail::dot_in_float(nref, i) < 0.0f ? n : -n;
}

}  // namespace metal
