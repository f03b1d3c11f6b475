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
// the whole 8 x 8 product once for the SIMD-group. On NVIDIA GPUs each lane
// computes its own elements from warp shuffles (coreai::simd::gather). A
// product sums the eight terms of each element in float with fused
// multiply-adds, in order of k, starting from the accumulator, and rounds once
// to the result type; the GPU's order within the eight terms is not
// specified. Where the target has matrix units for the operand types (NVIDIA
// GPUs: half or bfloat operands, coreai::simd::has_matrix_units) they compute
// the product, accumulating in float in their own order.
//
// The matrix units take their operands in a layout of their own (mma's: lane
// L holds row L / 4, columns 2 (L % 4) and the next), a lane permutation of
// Apple's. Where every SIMD-group of a launch has all 32 lanes (the CUDA
// backend's form for such launches, coreai::simd::launch_form), a matrix keeps
// its elements in both layouts: the product reads and writes mma's directly,
// so an accumulator stays in place across products, and loads and stores use
// it too, as do the lane-by-lane products of float operands;
// Apple's copy is made eagerly, with shuffles that the optimiser deletes where
// nothing reads it (thread_elements() does), so that it is current even where
// thread_elements() is read in divergent code. Writing through
// thread_elements() makes Apple's copy the only current one until the next
// load or product. In launches with partial SIMD-groups the lanes that do
// not exist differ between the two layouts, so there a matrix keeps Apple's
// layout only, as on the CPU.
#ifndef COREAI_MSL_SIMDGROUP_MATRIX_H
#define COREAI_MSL_SIMDGROUP_MATRIX_H

#include "std_math.h"
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

// The same for mma's layout, the fragments of the GPU's matrix units.
constexpr int fragment_row(unsigned lane) { return static_cast<int>(lane >> 2); }
constexpr int fragment_column(unsigned lane, int slot) {
  return 2 * static_cast<int>(lane & 3) + slot;
}

constexpr unsigned fragment_lane(int r, int c) {
  return (static_cast<unsigned>(r) << 2) | (static_cast<unsigned>(c) >> 1);
}

// The two layouts as types, for code written once over both.
struct apples_layout {
  static constexpr int row(unsigned lane) { return simdgroup_layout::row(lane); }
  static constexpr int column(unsigned lane, int slot) {
    return simdgroup_layout::column(lane, slot);
  }
  static constexpr unsigned lane(int r, int c) { return simdgroup_layout::lane(r, c); }
};
struct fragment_layout {
  static constexpr int row(unsigned lane) { return fragment_row(lane); }
  static constexpr int column(unsigned lane, int slot) { return fragment_column(lane, slot); }
  static constexpr unsigned lane(int r, int c) { return fragment_lane(r, c); }
};

// Whether matrices keep mma's layout beside Apple's (see the top of the file).
#if defined(__NVPTX__)
template <class T>
inline constexpr bool keeps_fragments = coreai::simd::launch_form<T>::whole_simdgroups;
#else
template <class T>
inline constexpr bool keeps_fragments = false;
#endif

template <class T, bool Fragments>
struct matrix_elements {
  vec<T, 2> elements_;
};

template <class T>
struct matrix_elements<T, true> {
  vec<T, 2> elements_;    // Apple's layout: always current
  vec<T, 2> fragment_;    // mma's layout: current while fragment_valid_
  vec<T, 2> transposed_;  // 16-bit T: the fragment transposed, for mma's B, as current
  bool fragment_valid_ = false;

  // Makes `f` the current fragment, with its transpose.
  void set_fragment(const vec<T, 2>& f);
};

}  // namespace simdgroup_layout

template <class T, int Cols, int Rows = Cols>
struct simdgroup_matrix
    : simdgroup_layout::matrix_elements<T, simdgroup_layout::keeps_fragments<T>> {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat>,
                "simdgroup_matrix holds float, half or bfloat elements");
  static_assert(Cols == 8 && Rows == 8, "Metal's SIMD-group matrices are 8 x 8");

  simdgroup_matrix() = default;

  // The diagonal matrix with `diagonal` on its diagonal (a SIMD-group function).
  explicit simdgroup_matrix(T diagonal) {
    const unsigned lane = simdgroup_layout::current_lane();
    for (int s = 0; s < 2; ++s) {
      const bool on_diagonal = simdgroup_layout::row(lane) == simdgroup_layout::column(lane, s);
      this->elements_[s] = on_diagonal ? diagonal : T(0);
    }
    if constexpr (simdgroup_layout::keeps_fragments<T>) {
      vec<T, 2> f;
      for (int s = 0; s < 2; ++s) {
        const bool on_diagonal =
            simdgroup_layout::fragment_row(lane) == simdgroup_layout::fragment_column(lane, s);
        f[s] = on_diagonal ? diagonal : T(0);
      }
      this->set_fragment(f);
    }
  }

  // A write through the reference may follow: Apple's copy becomes the current one.
  vec<T, 2>& thread_elements() {
    if constexpr (simdgroup_layout::keeps_fragments<T>) this->fragment_valid_ = false;
    return this->elements_;
  }
  const vec<T, 2>& thread_elements() const { return this->elements_; }
};

using simdgroup_float8x8 = simdgroup_matrix<float, 8, 8>;
using simdgroup_half8x8 = simdgroup_matrix<half, 8, 8>;
using simdgroup_bfloat8x8 = simdgroup_matrix<bfloat, 8, 8>;

template <class T, int Cols, int Rows = Cols>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.elements_ = vec<T, 2>(value);
  if constexpr (simdgroup_layout::keeps_fragments<T>) m.set_fragment(m.elements_);
  return m;
}

namespace simdgroup_layout {

// Index into the source or destination of element `slot` of `lane`. The 8x8
// block starts at `origin` (x = column, y = row) of a matrix with
// `elements_per_row` elements per row; a transposed load or store reads the
// block as its transpose.
inline unsigned long memory_index_of(int row, int column, unsigned long elements_per_row,
                                     vec<unsigned long, 2> origin, bool transpose) {
  const unsigned long r = static_cast<unsigned long>(row);
  const unsigned long c = static_cast<unsigned long>(column);
  return transpose ? (origin.y + c) * elements_per_row + origin.x + r
                   : (origin.y + r) * elements_per_row + origin.x + c;
}
inline unsigned long memory_index(unsigned lane, int s, unsigned long elements_per_row,
                                  vec<unsigned long, 2> origin, bool transpose) {
  return memory_index_of(row(lane), column(lane, s), elements_per_row, origin, transpose);
}
inline unsigned long fragment_memory_index(unsigned lane, int s, unsigned long elements_per_row,
                                           vec<unsigned long, 2> origin, bool transpose) {
  return memory_index_of(fragment_row(lane), fragment_column(lane, s), elements_per_row, origin,
                         transpose);
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

// Debug mode: the lanes that reached a SIMD-group matrix operation together,
// which the launcher's checker compares with the lanes the SIMD-group has
// (access_checker.h). Loads and stores, which otherwise need no other lane,
// meet the SIMD-group's other lanes at their call to find out.
#if defined(COREAI_MSL_DEBUG) && !defined(__NVPTX__)
inline void note_participants(std::uint32_t op, const coreai::simd::lanes_state& s) {
  if (s.lane == coreai::simd::first_lane(s.active)) {
    coreai::g_runtime->debug_simdgroup_matrix(op, s.active);
  }
}
#define COREAI_MSL_DEBUG_MATRIX_MEETING(op, at) \
  ::metal::simdgroup_layout::note_participants(op, ::coreai::simd::meet(at))
#else
#define COREAI_MSL_DEBUG_MATRIX_MEETING(op, at) ((void)0)
#endif

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
  COREAI_MSL_DEBUG_MATRIX_MEETING(COREAI_CPU_MATRIX_LOAD, at);
  simdgroup_layout::note_access<P>(coreai::lockstep::read, at);
  const unsigned lane = simdgroup_layout::current_lane();
  const auto* from = coreai::raw(src);
  for (int s = 0; s < 2; ++s) {
    d.elements_[s] = from[simdgroup_layout::memory_index(lane, s, elements_per_row, matrix_origin,
                                                         transpose_matrix)];
  }
  if constexpr (simdgroup_layout::keeps_fragments<T>) {
    // Loads nobody reads are deleted: usually Apple's copy.
    vec<T, 2> f;
    for (int s = 0; s < 2; ++s) {
      f[s] = from[simdgroup_layout::fragment_memory_index(lane, s, elements_per_row,
                                                          matrix_origin, transpose_matrix)];
    }
    d.set_fragment(f);
  }
}

template <class T, int Cols, int Rows, coreai::any_pointer P>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& a, P dst,
                            unsigned long elements_per_row = Cols,
                            vec<unsigned long, 2> matrix_origin = 0,
                            bool transpose_matrix = false, COREAI_CALL_SITE) {
  static_assert(simdgroup_layout::points_to<P, T>,
                "simdgroup_store: the destination must point to the matrix's element type");
  COREAI_MSL_DEBUG_MATRIX_MEETING(COREAI_CPU_MATRIX_STORE, at);
  simdgroup_layout::note_access<P>(coreai::lockstep::write, at);
  const unsigned lane = simdgroup_layout::current_lane();
  auto* to = coreai::raw(dst);
  if constexpr (simdgroup_layout::keeps_fragments<T>) {
    // Selects of values, not a branch: its two stores would be merged into
    // one through a choice of addresses within the matrix, which keeps an
    // array of matrices out of registers before the flag is known.
    const bool f = a.fragment_valid_;
    const vec<T, 2> fragment = a.fragment_;
    const vec<T, 2> elements = a.elements_;
    for (int s = 0; s < 2; ++s) {
      const unsigned long at_fragment = simdgroup_layout::fragment_memory_index(
          lane, s, elements_per_row, matrix_origin, transpose_matrix);
      const unsigned long at_elements =
          simdgroup_layout::memory_index(lane, s, elements_per_row, matrix_origin, transpose_matrix);
      to[f ? at_fragment : at_elements] = f ? fragment[s] : elements[s];
    }
    return;
  }
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

// Element (r, c) of a product's operand, in float, and of its result. The
// operands are full matrices here; the CPU's group-loop form multiplies the
// matrices it holds whole with the same functions, through overloads of its
// own (found by argument-dependent lookup), so both forms compute the same bits.
inline float element(const full& m, int r, int c) { return m.e[r][c]; }
inline void store_element(full& m, int r, int c, float v) { m.e[r][c] = v; }

// d = a * b + c, each element summed in order of k with fused multiply-adds.
template <bool UseFma, class A, class B, class C, class D>
[[gnu::always_inline]] inline void multiply_accumulate(const A& a, const B& b, const C& c, D& d) {
  for (int r = 0; r < 8; ++r) {
    float sum[8];
    for (int col = 0; col < 8; ++col) sum[col] = element(c, r, col);
    for (int k = 0; k < 8; ++k) {
      const float ark = element(a, r, k);
      for (int col = 0; col < 8; ++col) {
        if constexpr (UseFma) {
          sum[col] = __builtin_fmaf(ark, element(b, k, col), sum[col]);
        } else {
          sum[col] = std::fma(ark, element(b, k, col), sum[col]);
        }
      }
    }
    for (int col = 0; col < 8; ++col) store_element(d, r, col, sum[col]);
  }
}

// x86-64 has fused multiply-add instructions only from Haswell on: a copy of
// the product for them (vectorised), and one through the C library's fma.
#if defined(__x86_64__) && !defined(__NVPTX__)
template <class A, class B, class C, class D>
[[gnu::target("fma,avx2")]] inline void product_fma(const A& a, const B& b, const C& c, D& d) {
  multiply_accumulate<true>(a, b, c, d);
}
template <class A, class B, class C, class D>
inline void product(const A& a, const B& b, const C& c, D& d) {
  if (__builtin_cpu_supports("fma")) {
    product_fma(a, b, c, d);
  } else {
    multiply_accumulate<false>(a, b, c, d);
  }
}
#else
template <class A, class B, class C, class D>
inline void product(const A& a, const B& b, const C& c, D& d) {
  multiply_accumulate<true>(a, b, c, d);
}
#endif

}  // namespace simdgroup_layout

namespace simdgroup_layout {

#if defined(__NVPTX__)
// One lane's two elements of d = a * b + c in Apple's layout, from shuffles of
// its row of a and its two columns of b: every lane reads the same number of
// values, in the same order (each read is a shuffle the active lanes make
// together). Not inlined: the common case runs on the matrix units, and a
// kernel's loops over its matrices stay small enough to unroll, which keeps
// the matrices in registers.
template <class Layout, class TD, class TA, class TB, class TC>
[[gnu::noinline]] vec<TD, 2> product_by_lanes(vec<TA, 2> a, vec<TB, 2> b, vec<TC, 2> c) {
  struct pair_operands {
    vec<TA, 2> a;
    vec<TB, 2> b;
  };
  const auto all = coreai::simd::gather(pair_operands{a, b}, coreai::simd::site{});
  const int r = Layout::row(all.lane);
  const int c0 = Layout::column(all.lane, 0);  // even: c0 and c0 + 1 share a lane
  // A lane that is not running contributes zeros (its elements are undefined on the GPU).
  float row_of_a[8], col0[8], col1[8];
  for (int k = 0; k < 8; k += 2) {
    const unsigned holder = Layout::lane(r, k);
    const vec<TA, 2> pair = all.from(holder, [](const pair_operands& o) { return o.a; });
    const bool present = coreai::simd::is_active(all.active, holder);
    row_of_a[k] = present ? static_cast<float>(pair[0]) : 0.0f;
    row_of_a[k + 1] = present ? static_cast<float>(pair[1]) : 0.0f;
  }
  for (int k = 0; k < 8; ++k) {
    const unsigned holder = Layout::lane(k, c0);
    const vec<TB, 2> pair = all.from(holder, [](const pair_operands& o) { return o.b; });
    const bool present = coreai::simd::is_active(all.active, holder);
    col0[k] = present ? static_cast<float>(pair[0]) : 0.0f;
    col1[k] = present ? static_cast<float>(pair[1]) : 0.0f;
  }
  float sum0 = static_cast<float>(c[0]);
  float sum1 = static_cast<float>(c[1]);
  for (int k = 0; k < 8; ++k) {
    sum0 = __builtin_fmaf(row_of_a[k], col0[k], sum0);
    sum1 = __builtin_fmaf(row_of_a[k], col1[k], sum1);
  }
  vec<TD, 2> d;
  d[0] = static_cast<TD>(sum0);
  d[1] = static_cast<TD>(sum1);
  return d;
}
#endif

// d = a * b + c in Apple's layout (d's elements_ only).
template <class TD, class TA, class TB, class TC>
inline void multiply_in_elements(simdgroup_matrix<TD, 8, 8>& d,
                                 const simdgroup_matrix<TA, 8, 8>& a,
                                 const simdgroup_matrix<TB, 8, 8>& b,
                                 const simdgroup_matrix<TC, 8, 8>& c, coreai::simd::site at) {
  if constexpr (coreai::simd::has_matrix_units<TA, TB>) {
    float d0, d1;
    if (coreai::simd::multiply_8x8_on_matrix_units(a.elements_, b.elements_,
                                                   static_cast<float>(c.elements_[0]),
                                                   static_cast<float>(c.elements_[1]), d0, d1)) {
      d.elements_[0] = static_cast<TD>(d0);
      d.elements_[1] = static_cast<TD>(d1);
      return;
    }
  }
#if defined(__NVPTX__)
  d.elements_ = product_by_lanes<apples_layout, TD>(a.elements_, b.elements_, c.elements_);
#else
  // The first lane to read the exchange computes the whole product once for
  // the SIMD-group (vectorised); each lane then reads its two elements.
  struct operands {
    vec<TA, 2> a;
    vec<TB, 2> b;
    vec<TC, 2> c;
  };
  namespace cpu = coreai::simd::cpu;
  const cpu::view v = cpu::exchange(operands{a.elements_, b.elements_, c.elements_}, at);
#ifdef COREAI_MSL_DEBUG
  note_participants(COREAI_CPU_MATRIX_MULTIPLY, {v.lane, v.active});
#endif
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
#endif
}

#if defined(__NVPTX__)
// m's elements in mma's layout, from Apple's copy where that is the current one.
template <class T>
inline vec<T, 2> fragment_of(const simdgroup_matrix<T, 8, 8>& m, std::uint32_t active,
                             unsigned lane) {
  if (m.fragment_valid_) return m.fragment_;
  return coreai::simd::nvptx::pure_shuffle_pair(
      active, m.elements_, coreai::simd::nvptx::apple_to_mma_source(lane));
}

// The same transposed (mma's B operand), as bits.
template <class T>
inline std::uint32_t transposed_bits_of(const simdgroup_matrix<T, 8, 8>& m, std::uint32_t active,
                                        unsigned lane) {
  namespace nvptx = coreai::simd::nvptx;
  if (m.fragment_valid_) return nvptx::bits_of(m.transposed_);
  return nvptx::transposed_pairs(nvptx::bits_of(fragment_of(m, active, lane)));
}

// d = a * b + c for launches whose SIMD-groups have all their lanes, in mma's
// layout: on the matrix units for half and bfloat operands, else lane by lane.
// Apple's copy of d follows, for whoever reads it.
//
// The whole SIMD-group runs the product: Metal leaves SIMD-group matrix
// operations in divergent control flow undefined (MSL specification, 2.4
// "SIMD-group Matrix Data Types"), so the product does not check that every
// lane takes part (a check per product cost two thirds of the products'
// throughput on the H200); the CPU backend's debug mode reports a kernel that
// reaches one with part of a SIMD-group (docs/cpu.md, "Checking kernels").
template <class TD, class TA, class TB, class TC>
inline void multiply_in_fragments(simdgroup_matrix<TD, 8, 8>& d,
                                  const simdgroup_matrix<TA, 8, 8>& a,
                                  const simdgroup_matrix<TB, 8, 8>& b,
                                  const simdgroup_matrix<TC, 8, 8>& c) {
  namespace nvptx = coreai::simd::nvptx;
  const std::uint32_t active = nvptx::kAllLanes;
  const unsigned lane = nvptx::lane_id();
  const vec<TA, 2> fa = fragment_of(a, active, lane);
  const vec<TC, 2> fc = fragment_of(c, active, lane);
  vec<TD, 2> fd;
  if constexpr (coreai::simd::has_matrix_units<TA, TB>) {
    float d0, d1;
    coreai::simd::multiply_8x8_fragments<TA>(nvptx::bits_of(fa),
                                             transposed_bits_of(b, active, lane),
                                             static_cast<float>(fc[0]),
                                             static_cast<float>(fc[1]), d0, d1);
    fd[0] = static_cast<TD>(d0);
    fd[1] = static_cast<TD>(d1);
  } else {
    fd = product_by_lanes<fragment_layout, TD>(fa, fragment_of(b, active, lane), fc);
  }
  d.set_fragment(fd);
  d.elements_ = nvptx::pure_shuffle_pair(active, fd, nvptx::mma_to_apple_source(lane));
}
#endif

template <class T>
inline void matrix_elements<T, true>::set_fragment(const vec<T, 2>& f) {
  fragment_ = f;
  fragment_valid_ = true;
#if defined(__NVPTX__)
  // Made eagerly and deleted where no product takes this matrix as its b.
  if constexpr (sizeof(T) == 2) {
    const std::uint32_t bits = coreai::simd::nvptx::transposed_pairs(coreai::simd::nvptx::bits_of(f));
    __builtin_memcpy(&transposed_, &bits, 4);
  }
#endif
}

}  // namespace simdgroup_layout

// d = a * b + c. The types may differ (half operands into a float accumulator,
// as ggml's kernel_mul_mm does).
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d,
                                          const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b,
                                          const simdgroup_matrix<TC, 8, 8>& c, COREAI_CALL_SITE) {
#if defined(__NVPTX__)
  if constexpr (simdgroup_layout::keeps_fragments<TD>) {
    simdgroup_layout::multiply_in_fragments(d, a, b, c);
    return;
  }
#endif
  simdgroup_layout::multiply_in_elements(d, a, b, c, at);
}

template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b, COREAI_CALL_SITE) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)), at);
}

}  // namespace metal

#endif  // COREAI_MSL_SIMDGROUP_MATRIX_H
