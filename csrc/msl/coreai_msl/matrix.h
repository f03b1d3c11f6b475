// Metal's matrix types: floatCxR, halfCxR and bfloatCxR for C columns and R
// rows in 2..4, also spelled matrix<T, C, R> (MSL specification, "Matrix Data
// Types" and "Matrix Functions").
//
// What Metal defines and this header keeps:
//  - Column-major storage of C column vectors vec<T, R>, so sizeof(float3x3) is
//    48 and alignof follows the column vector; m[i] is column i and m[i][j] the
//    element in column i, row j.
//  - Constructors: from one scalar (that value on the diagonal, zero
//    elsewhere), from C column vectors, from C * R scalars in column-major
//    order, and explicitly from a matrix of the same shape and another element
//    type, converting element by element (so `(half2x4)m` and `half2x4(m)`
//    convert, as in Metal).
//  - Operators: + and - of matrices, * and / by a scalar, matrix * matrix,
//    matrix * column vector, row vector * matrix, the compound forms and unary
//    minus. Products accumulate in the element type in index order.
//  - transpose(m) and, for square matrices, determinant(m).
#pragma once

#include <cstddef>
#include <type_traits>

#include "vector.h"

namespace metal {

template <class T, int Cols, int Rows>
struct matrix {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat>,
                "Metal matrices hold float, half or bfloat elements");
  static_assert(Cols >= 2 && Cols <= 4 && Rows >= 2 && Rows <= 4,
                "Metal matrices have 2, 3 or 4 columns and rows");
  using column_type = vec<T, Rows>;

  column_type columns_[Cols];

  matrix() = default;

  // The diagonal matrix with `diagonal` on its diagonal.
  template <class S>
    requires(std::is_arithmetic_v<S> || std::is_same_v<S, half> || std::is_same_v<S, bfloat>)
  constexpr explicit matrix(S diagonal) {
    for (int c = 0; c < Cols; ++c) {
      columns_[c] = column_type(T(0));
      if (c < Rows) columns_[c][c] = detail::convert_component<T>(diagonal);
    }
  }

  // From Cols column vectors.
  template <class... V>
    requires(sizeof...(V) == Cols && Cols > 1 && ((detail::size_v<V> == Rows) && ...) &&
             (detail::is_vector_v<V> && ...))
  constexpr matrix(const V&... cols) {
    int c = 0;
    ((columns_[c++] = detail::make_vector<T, Rows>(cols)), ...);
  }

  // From Cols * Rows scalars, column by column.
  template <class... S>
    requires(sizeof...(S) == Cols * Rows && (!detail::is_vector_v<S> && ...))
  constexpr matrix(const S&... values) {
    const T flat[Cols * Rows] = {detail::convert_component<T>(values)...};
    for (int c = 0; c < Cols; ++c) {
      for (int r = 0; r < Rows; ++r) columns_[c][r] = flat[c * Rows + r];
    }
  }

  // Element-wise conversion from a matrix of another element type.
  template <class U>
    requires(!std::is_same_v<U, T>)
  constexpr explicit matrix(const matrix<U, Cols, Rows>& other) {
    for (int c = 0; c < Cols; ++c) {
      columns_[c] = detail::make_vector<T, Rows>(other.columns_[c]);
    }
  }

  constexpr column_type& operator[](std::size_t c) { return columns_[c]; }
  constexpr const column_type& operator[](std::size_t c) const { return columns_[c]; }

  constexpr matrix& operator+=(const matrix& o) {
    for (int c = 0; c < Cols; ++c) columns_[c] += o.columns_[c];
    return *this;
  }
  constexpr matrix& operator-=(const matrix& o) {
    for (int c = 0; c < Cols; ++c) columns_[c] -= o.columns_[c];
    return *this;
  }
  constexpr matrix& operator*=(T s) {
    for (int c = 0; c < Cols; ++c) columns_[c] *= s;
    return *this;
  }
  // m *= n is m = m * n, which keeps the shape only for a square n.
  constexpr matrix& operator*=(const matrix<T, Cols, Cols>& o)
    requires(Cols == Rows)
  {
    *this = *this * o;
    return *this;
  }
};

template <class T, int C, int R>
constexpr matrix<T, C, R> operator+(matrix<T, C, R> a, const matrix<T, C, R>& b) {
  return a += b;
}
template <class T, int C, int R>
constexpr matrix<T, C, R> operator-(matrix<T, C, R> a, const matrix<T, C, R>& b) {
  return a -= b;
}
template <class T, int C, int R>
constexpr matrix<T, C, R> operator-(matrix<T, C, R> a) {
  for (int c = 0; c < C; ++c) a.columns_[c] = -a.columns_[c];
  return a;
}
template <class T, int C, int R>
constexpr matrix<T, C, R> operator*(matrix<T, C, R> a, std::type_identity_t<T> s) {
  return a *= s;
}
template <class T, int C, int R>
constexpr matrix<T, C, R> operator*(std::type_identity_t<T> s, matrix<T, C, R> a) {
  return a *= s;
}
template <class T, int C, int R>
constexpr matrix<T, C, R> operator/(matrix<T, C, R> a, std::type_identity_t<T> s) {
  for (int c = 0; c < C; ++c) a.columns_[c] /= s;
  return a;
}

// (a * v)[r] = sum over c of a[c][r] * v[c].
template <class T, int C, int R>
constexpr vec<T, R> operator*(const matrix<T, C, R>& a, const vec<T, C>& v) {
  vec<T, R> out = a.columns_[0] * v[0];
  for (int c = 1; c < C; ++c) out += a.columns_[c] * v[c];
  return out;
}

// (v * a)[c] = sum over r of v[r] * a[c][r].
template <class T, int C, int R>
constexpr vec<T, C> operator*(const vec<T, R>& v, const matrix<T, C, R>& a) {
  vec<T, C> out;
  for (int c = 0; c < C; ++c) {
    T sum = v[0] * a.columns_[c][0];
    for (int r = 1; r < R; ++r) sum += v[r] * a.columns_[c][r];
    out[c] = sum;
  }
  return out;
}

// An R x K matrix times a K x C matrix: column c of the product is a * b[c].
template <class T, int K, int R, int C>
constexpr matrix<T, C, R> operator*(const matrix<T, K, R>& a, const matrix<T, C, K>& b) {
  matrix<T, C, R> out;
  for (int c = 0; c < C; ++c) out.columns_[c] = a * b.columns_[c];
  return out;
}

template <class T, int C, int R>
constexpr matrix<T, R, C> transpose(const matrix<T, C, R>& a) {
  matrix<T, R, C> out;
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) out.columns_[r][c] = a.columns_[c][r];
  }
  return out;
}

template <class T>
constexpr T determinant(const matrix<T, 2, 2>& m) {
  return m[0][0] * m[1][1] - m[1][0] * m[0][1];
}

template <class T>
constexpr T determinant(const matrix<T, 3, 3>& m) {
  return m[0][0] * (m[1][1] * m[2][2] - m[2][1] * m[1][2]) -
         m[1][0] * (m[0][1] * m[2][2] - m[2][1] * m[0][2]) +
         m[2][0] * (m[0][1] * m[1][2] - m[1][1] * m[0][2]);
}

// Expansion along the first column, with the 2x2 minors of the last two
// columns computed once.
template <class T>
constexpr T determinant(const matrix<T, 4, 4>& m) {
  auto minor2 = [&](int r0, int r1) { return m[2][r0] * m[3][r1] - m[3][r0] * m[2][r1]; };
  auto minor3 = [&](int skip) {
    int r[3], n = 0;
    for (int i = 0; i < 4; ++i) {
      if (i != skip) r[n++] = i;
    }
    return m[1][r[0]] * minor2(r[1], r[2]) - m[1][r[1]] * minor2(r[0], r[2]) +
           m[1][r[2]] * minor2(r[0], r[1]);
  };
  return m[0][0] * minor3(0) - m[0][1] * minor3(1) + m[0][2] * minor3(2) - m[0][3] * minor3(3);
}

#define COREAI_MSL_MATRIX_TYPES(name, element) \
  using name##2x2 = matrix<element, 2, 2>;     \
  using name##2x3 = matrix<element, 2, 3>;     \
  using name##2x4 = matrix<element, 2, 4>;     \
  using name##3x2 = matrix<element, 3, 2>;     \
  using name##3x3 = matrix<element, 3, 3>;     \
  using name##3x4 = matrix<element, 3, 4>;     \
  using name##4x2 = matrix<element, 4, 2>;     \
  using name##4x3 = matrix<element, 4, 3>;     \
  using name##4x4 = matrix<element, 4, 4>;

COREAI_MSL_MATRIX_TYPES(float, float)
COREAI_MSL_MATRIX_TYPES(half, half)
COREAI_MSL_MATRIX_TYPES(bfloat, bfloat)

#undef COREAI_MSL_MATRIX_TYPES

static_assert(sizeof(float3x3) == 48 && alignof(float3x3) == 16);
static_assert(sizeof(half2x4) == 16 && sizeof(float4x4) == 64);

}  // namespace metal
