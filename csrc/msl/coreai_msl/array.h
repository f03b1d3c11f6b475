// metal::array<T, N>: a fixed-size aggregate, used among other things as the
// multi-dimensional index of a tensor (x[idx] with array<uint, R> idx).
#pragma once

#include <cstddef>

namespace metal {

template <class T, std::size_t N>
struct array {
  // Public so that array<int, 2>{a, b} is aggregate initialisation. A
  // zero-length array still needs one slot to be a valid member.
  T elements_[N == 0 ? 1 : N];

  constexpr T& operator[](std::size_t i) { return elements_[i]; }
  constexpr const T& operator[](std::size_t i) const { return elements_[i]; }
  static constexpr std::size_t size() { return N; }
  static constexpr bool empty() { return N == 0; }
  constexpr T* data() { return elements_; }
  constexpr const T* data() const { return elements_; }
  constexpr T* begin() { return elements_; }
  constexpr T* end() { return elements_ + N; }
  constexpr const T* begin() const { return elements_; }
  constexpr const T* end() const { return elements_ + N; }
};

}  // namespace metal
