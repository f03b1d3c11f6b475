// Metal's SIMD-group matrices: simdgroup_float8x8, simdgroup_half8x8 and
// simdgroup_bfloat8x8, and the functions on them (MSL specification,
// "SIMD-group Matrix Data Types" and "SIMD-group Matrix Functions";
// <metal_simdgroup_matrix>).
//
// An 8x8 matrix is spread over the 32 lanes of a SIMD-group, two elements per
// lane, and thread_elements() is the lane's vec<T, 2>. Which elements a lane
// holds is fixed by the hardware and real kernels depend on it (MLX's steel
// GEMM loads and stores thread_elements() directly): lane L holds row
//   4 * L[4] + 2 * L[2] + L[1]
// and columns c and c + 1 with c = 4 * L[3] + 2 * L[0], where L[i] is bit i of
// L. This is the mapping of BaseMMAFrag<T, 8, 8>::get_coord in MLX
// (mlx/backend/metal/kernels/steel/gemm/mma.h): qid = L / 4,
// row = (qid & 4) + (L / 2) % 4, column = (qid & 2) * 2 + (L % 2) * 2.
//
// simdgroup_load and simdgroup_store move each lane's own two elements; the
// products gather the lanes' elements (coreai::simd::gather: one exchange on
// the CPU, warp shuffles on NVIDIA GPUs), so they are SIMD-group functions
// that every lane must reach, as on the GPU. A product sums the
// eight terms of each element in float with fused multiply-adds, in order of
// k, starting from the accumulator, and rounds once to the result type; the
// GPU's order within the eight terms is not specified. Where the target has
// matrix units for the operand types (NVIDIA GPUs: half or bfloat operands,
// coreai::simd::has_matrix_units) they compute the product, accumulating in
// float in their own order.
#ifndef COREAI_MSL_SIMDGROUP_MATRIX_H
#define COREAI_MSL_SIMDGROUP_MATRIX_H

#include <cmath>
#include <type_traits>

#include "address_space.h"
#include "sync.h"
#include "vector.h"

namespace metal {

namespace simdgroup_layout {

// The row of both elements lane `lane` holds, and the column of element `slot`.
constexpr int row(unsigned lane) {
  return 4 * ((lane >> 4) & 1) + 2 * ((lane >> 2) & 1) + ((lane >> 1) & 1);
}
constexpr int column(unsigned lane, int slot) {
  return 4 * ((lane >> 3) & 1) + 2 * (lane & 1) + slot;
}
// The lane holding element (r, c), and which of its two elements it is.
constexpr unsigned lane(int r, int c) {
  return (((r >> 2) & 1) << 4) | (((c >> 2) & 1) << 3) | (((r >> 1) & 1) << 2) |
         ((r & 1) << 1) | ((c >> 1) & 1);
}
constexpr int slot(int c) { return c & 1; }

// The lane running this code: a SIMD-group rendezvous.
inline unsigned current_lane() { return coreai::simd::meet().lane; }

}  // namespace simdgroup_layout

template <class T, int Cols, int Rows = Cols>
struct simdgroup_matrix {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat>,
                "simdgroup_matrix holds float, half or bfloat elements");
  static_assert(Cols == 8 && Rows == 8, "Metal's SIMD-group matrices are 8 x 8");

  simdgroup_matrix() = default;

  // The diagonal matrix with `diagonal` on its diagonal (a SIMD-group function).
  explicit simdgroup_matrix(T diagonal) {
    const unsigned lane = simdgroup_layout::current_lane();
    for (int s = 0; s < 2; ++s) {
      const bool on_diagonal = simdgroup_layout::row(lane) == simdgroup_layout::column(lane, s);
      elements_[s] = on_diagonal ? diagonal : T(0);
    }
  }

  vec<T, 2>& thread_elements() { return elements_; }
  const vec<T, 2>& thread_elements() const { return elements_; }

  vec<T, 2> elements_;
};

using simdgroup_float8x8 = simdgroup_matrix<float, 8, 8>;
using simdgroup_half8x8 = simdgroup_matrix<half, 8, 8>;
using simdgroup_bfloat8x8 = simdgroup_matrix<bfloat, 8, 8>;

template <class T, int Cols, int Rows = Cols>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.elements_ = vec<T, 2>(value);
  return m;
}

namespace simdgroup_layout {

// Index into the source or destination of element `slot` of `lane`. The 8x8
// block starts at `origin` (x = column, y = row) of a matrix with
// `elements_per_row` elements per row; a transposed load or store reads the
// block as its transpose.
inline unsigned long memory_index(unsigned lane, int s, unsigned long elements_per_row,
                                  vec<unsigned long, 2> origin, bool transpose) {
  const unsigned long r = static_cast<unsigned long>(row(lane));
  const unsigned long c = static_cast<unsigned long>(column(lane, s));
  return transpose ? (origin.y + c) * elements_per_row + origin.x + r
                   : (origin.y + r) * elements_per_row + origin.x + c;
}

template <class P, class T>
inline constexpr bool points_to =
    std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(coreai::raw(std::declval<P>()))>>,
                   T>;

}  // namespace simdgroup_layout

template <class T, int Cols, int Rows, coreai::any_pointer P>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, P src,
                           unsigned long elements_per_row = Cols,
                           vec<unsigned long, 2> matrix_origin = 0, bool transpose_matrix = false) {
  static_assert(simdgroup_layout::points_to<P, T>,
                "simdgroup_load: the source must point to the matrix's element type");
  const unsigned lane = simdgroup_layout::current_lane();
  const auto* from = coreai::raw(src);
  for (int s = 0; s < 2; ++s) {
    d.elements_[s] = from[simdgroup_layout::memory_index(lane, s, elements_per_row, matrix_origin,
                                                         transpose_matrix)];
  }
}

template <class T, int Cols, int Rows, coreai::any_pointer P>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& a, P dst,
                            unsigned long elements_per_row = Cols,
                            vec<unsigned long, 2> matrix_origin = 0,
                            bool transpose_matrix = false) {
  static_assert(simdgroup_layout::points_to<P, T>,
                "simdgroup_store: the destination must point to the matrix's element type");
  const unsigned lane = simdgroup_layout::current_lane();
  auto* to = coreai::raw(dst);
  for (int s = 0; s < 2; ++s) {
    to[simdgroup_layout::memory_index(lane, s, elements_per_row, matrix_origin,
                                      transpose_matrix)] = a.elements_[s];
  }
}

// d = a * b + c. The types may differ (half operands into a float accumulator,
// as ggml's kernel_mul_mm does).
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d,
                                          const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b,
                                          const simdgroup_matrix<TC, 8, 8>& c) {
  if constexpr (coreai::simd::has_matrix_units<TA, TB>) {
    float d0, d1;
    if (coreai::simd::multiply_8x8_on_matrix_units(a.elements_, b.elements_,
                                                   static_cast<float>(c.elements_[0]),
                                                   static_cast<float>(c.elements_[1]), d0, d1)) {
      vec<TD, 2> out;
      out[0] = static_cast<TD>(d0);
      out[1] = static_cast<TD>(d1);
      d.elements_ = out;
      return;
    }
  }
  struct operands {
    vec<TA, 2> a;
    vec<TB, 2> b;
  };
  // Every lane reads the same number of values, in the same order (a target
  // may move each one with a shuffle): its row of a, then its two columns of b.
  const auto all = coreai::simd::gather(operands{a.elements_, b.elements_});
  const int r = simdgroup_layout::row(all.lane);
  const int c0 = simdgroup_layout::column(all.lane, 0);  // even: c0 and c0 + 1 share a lane
  // A lane that is not running contributes zeros (its elements are undefined on the GPU).
  float row[8], col0[8], col1[8];
  for (int k = 0; k < 8; k += 2) {
    const unsigned holder = simdgroup_layout::lane(r, k);
    const vec<TA, 2> pair = all.from(holder, [](const operands& o) { return o.a; });
    const bool present = coreai::simd::is_active(all.active, holder);
    row[k] = present ? static_cast<float>(pair[0]) : 0.0f;
    row[k + 1] = present ? static_cast<float>(pair[1]) : 0.0f;
  }
  for (int k = 0; k < 8; ++k) {
    const unsigned holder = simdgroup_layout::lane(k, c0);
    const vec<TB, 2> pair = all.from(holder, [](const operands& o) { return o.b; });
    const bool present = coreai::simd::is_active(all.active, holder);
    col0[k] = present ? static_cast<float>(pair[0]) : 0.0f;
    col1[k] = present ? static_cast<float>(pair[1]) : 0.0f;
  }
  float sum0 = static_cast<float>(c.elements_[0]);
  float sum1 = static_cast<float>(c.elements_[1]);
  for (int k = 0; k < 8; ++k) {
    sum0 = std::fma(row[k], col0[k], sum0);
    sum1 = std::fma(row[k], col1[k], sum1);
  }
  vec<TD, 2> out;
  out[0] = static_cast<TD>(sum0);
  out[1] = static_cast<TD>(sum1);
  d.elements_ = out;
}

template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)));
}

}  // namespace metal

#endif  // COREAI_MSL_SIMDGROUP_MATRIX_H
