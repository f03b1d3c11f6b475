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
// simdgroup_load and simdgroup_store move each lane's own two elements (an
// access to threadgroup memory is a lockstep access, fiber_runtime.h); the
// products gather every lane's elements through one exchange of the CPU
// target (target_cpu.h), so they are SIMD-group functions that every lane
// must reach, as on the GPU, and the first lane to read the exchange computes
// the whole 8 x 8 product once for the SIMD-group. A product sums the eight
// terms of each element in float with fused multiply-adds, in order of k,
// starting from the accumulator, and rounds once to the result type; the
// GPU's order within the eight terms is not specified.
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

// The lane running this code.
inline unsigned current_lane() { return coreai::simd::own_lane(); }

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

// A load from or store to threadgroup memory is an access like any other there.
template <class P>
inline void note_access(coreai::lockstep::kind k, coreai::simd::site at) {
  if constexpr (coreai::is_space_ptr_v<std::remove_cvref_t<P>>) {
    if constexpr (std::remove_cvref_t<P>::address_space == coreai::space::threadgroup_memory) {
      coreai::lockstep::access(k, at.order);
    }
  }
}

template <class P, class T>
inline constexpr bool points_to =
    std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(coreai::raw(std::declval<P>()))>>,
                   T>;

}  // namespace simdgroup_layout

template <class T, int Cols, int Rows, coreai::any_pointer P>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, P src,
                           unsigned long elements_per_row = Cols,
                           vec<unsigned long, 2> matrix_origin = 0, bool transpose_matrix = false,
                           COREAI_CALL_SITE) {
  static_assert(simdgroup_layout::points_to<P, T>,
                "simdgroup_load: the source must point to the matrix's element type");
  simdgroup_layout::note_access<P>(coreai::lockstep::read, at);
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
                            bool transpose_matrix = false, COREAI_CALL_SITE) {
  static_assert(simdgroup_layout::points_to<P, T>,
                "simdgroup_store: the destination must point to the matrix's element type");
  simdgroup_layout::note_access<P>(coreai::lockstep::write, at);
  const unsigned lane = simdgroup_layout::current_lane();
  auto* to = coreai::raw(dst);
  for (int s = 0; s < 2; ++s) {
    to[simdgroup_layout::memory_index(lane, s, elements_per_row, matrix_origin,
                                      transpose_matrix)] = a.elements_[s];
  }
}

namespace simdgroup_layout {

// An 8 x 8 matrix in float, row-major.
struct full {
  float e[8][8];
};

// d = a * b + c, each element summed in order of k with fused multiply-adds.
template <bool UseFma>
[[gnu::always_inline]] inline void multiply_accumulate(const full& a, const full& b, const full& c,
                                                       full& d) {
  for (int r = 0; r < 8; ++r) {
    float sum[8];
    for (int col = 0; col < 8; ++col) sum[col] = c.e[r][col];
    for (int k = 0; k < 8; ++k) {
      for (int col = 0; col < 8; ++col) {
        if constexpr (UseFma) {
          sum[col] = __builtin_fmaf(a.e[r][k], b.e[k][col], sum[col]);
        } else {
          sum[col] = std::fma(a.e[r][k], b.e[k][col], sum[col]);
        }
      }
    }
    for (int col = 0; col < 8; ++col) d.e[r][col] = sum[col];
  }
}

// x86-64 has fused multiply-add instructions only from Haswell on: a copy of
// the product for them (vectorised), and one through the C library's fma.
#if defined(__x86_64__)
[[gnu::target("fma,avx2")]] inline void product_fma(const full& a, const full& b, const full& c,
                                                    full& d) {
  multiply_accumulate<true>(a, b, c, d);
}
inline void product(const full& a, const full& b, const full& c, full& d) {
  if (__builtin_cpu_supports("fma")) {
    product_fma(a, b, c, d);
  } else {
    multiply_accumulate<false>(a, b, c, d);
  }
}
#else
inline void product(const full& a, const full& b, const full& c, full& d) {
  multiply_accumulate<true>(a, b, c, d);
}
#endif

}  // namespace simdgroup_layout

// d = a * b + c. The types may differ (half operands into a float accumulator,
// as ggml's kernel_mul_mm does).
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d,
                                          const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b,
                                          const simdgroup_matrix<TC, 8, 8>& c, COREAI_CALL_SITE) {
  struct operands {
    vec<TA, 2> a;
    vec<TB, 2> b;
    vec<TC, 2> c;
  };
  namespace cpu = coreai::simd::cpu;
  const cpu::view v = cpu::exchange(operands{a.elements_, b.elements_, c.elements_}, at);
  const simdgroup_layout::full& result =
      cpu::combined<simdgroup_layout::full>(v, [&](simdgroup_layout::full& out) {
        // A lane that is not running contributes zeros (its elements are
        // undefined on the GPU).
        simdgroup_layout::full ma{}, mb{}, mc{};
        for (std::uint32_t m = v.active; m != 0; m &= m - 1) {
          const unsigned lane = static_cast<unsigned>(__builtin_ctz(m));
          const operands o = cpu::value_of<operands>(v, lane);
          const int r = simdgroup_layout::row(lane);
          for (int s = 0; s < 2; ++s) {
            const int col = simdgroup_layout::column(lane, s);
            ma.e[r][col] = static_cast<float>(o.a[s]);
            mb.e[r][col] = static_cast<float>(o.b[s]);
            mc.e[r][col] = static_cast<float>(o.c[s]);
          }
        }
        simdgroup_layout::product(ma, mb, mc, out);
      });
  const int r = simdgroup_layout::row(v.lane);
  for (int s = 0; s < 2; ++s) {
    d.elements_[s] = static_cast<TD>(result.e[r][simdgroup_layout::column(v.lane, s)]);
  }
}

template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b, COREAI_CALL_SITE) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)), at);
}

}  // namespace metal

#endif  // COREAI_MSL_SIMDGROUP_MATRIX_H
