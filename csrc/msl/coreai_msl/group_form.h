// The group-loop form of the CPU backend, on the kernel library's side
// (csrc/cpu/group_form.h writes the code that uses this): one call of the
// rewritten kernel runs a whole threadgroup, its regions between barriers as
// loops over the threads. Here are what those loops share:
//
//   frame            the threadgroup's threads, which of them still run, and
//                    their positions;
//   slots            one value per thread (or lane) of a variable that lives
//                    from one loop over threads into a later one;
//   exchange         a SIMD-group function: each lane's arguments, collected
//                    in one loop over the lanes, the lanes' results computed
//                    once, read back in the next loop;
//   simdgroup_matrix an 8 x 8 matrix held whole, once per SIMD-group, which
//                    loads, stores and multiplies as a unit.
//
// Results are those of fiber mode: a SIMD-group function is evaluated by
// Metal's own definition (sync.h) over the recorded lanes, a reduction by the
// same xor butterfly, a matrix product by the same function as a fiber's.
#ifndef COREAI_MSL_GROUP_FORM_H
#define COREAI_MSL_GROUP_FORM_H

#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cpu_abi.h"
#include "entry.h"
#include "group_slots.h"
#include "simdgroup_matrix.h"
#include "sync.h"
#include "target_cpu.h"

namespace coreai::group {

inline constexpr std::uint32_t kMaxThreads = 1024;  // Metal's largest threadgroup
inline constexpr std::uint32_t kSimdWidth = COREAI_CPU_SIMD_WIDTH;
inline constexpr std::uint32_t kMaxSimdgroups = kMaxThreads / kSimdWidth;

// A SIMD-group as a simdgroup matrix operation sees it: its running lanes.
struct simd_context {
  std::uint32_t active;  // bit L: lane L runs
  std::uint32_t index;   // simdgroup_index_in_threadgroup
};

// The threads of the running threadgroup.
class frame {
 public:
  explicit frame(const coreai_cpu_group& g)
      : n_(g.thread_count),
        simdgroups_((g.thread_count + kSimdWidth - 1) / kSimdWidth),
        size_x_(g.size[0]),
        size_xy_(g.size[0] * g.size[1]),
        one_dimensional_(g.size[1] == 1 && g.size[2] == 1) {
    for (std::uint32_t s = 0; s < simdgroups_; ++s) alive_[s] = present(s);
  }

  std::uint32_t simdgroups() const { return simdgroups_; }
  // Lanes of SIMD-group s (fewer in the last one of an edge group).
  std::uint32_t lanes(std::uint32_t s) const {
    const std::uint32_t left = n_ - s * kSimdWidth;
    return left < kSimdWidth ? left : kSimdWidth;
  }

  // Threads that returned are no longer running.
  bool alive(std::uint32_t t) const { return (alive_[t / kSimdWidth] >> (t % kSimdWidth)) & 1u; }
  void kill(std::uint32_t t) { alive_[t / kSimdWidth] &= ~(1u << (t % kSimdWidth)); }
  bool any(std::uint32_t s) const { return alive_[s] != 0; }
  bool none() const {
    for (std::uint32_t s = 0; s < simdgroups_; ++s) {
      if (alive_[s] != 0) return false;
    }
    return true;
  }
  // The running lanes of SIMD-group s: the active lanes of a SIMD-group
  // function that all of them reach.
  std::uint32_t active(std::uint32_t s) const { return alive_[s]; }
  simd_context simd(std::uint32_t s) const { return {alive_[s], s}; }
  // The first running thread of SIMD-group s (of the threadgroup): where a
  // value the same for all of them is read.
  std::uint32_t first(std::uint32_t s) const {
    return s * kSimdWidth + static_cast<std::uint32_t>(__builtin_ctz(alive_[s] | 0x80000000u));
  }
  std::uint32_t first() const {
    for (std::uint32_t s = 0; s < simdgroups_; ++s) {
      if (alive_[s] != 0) return first(s);
    }
    return 0;
  }

  // Thread t of the threadgroup (x fastest).
  coreai_cpu_thread thread_at(std::uint32_t t) const {
    if (one_dimensional_) return {{t, 0, 0}, t};
    return {{t % size_x_, (t / size_x_) % (size_xy_ / size_x_), t / size_xy_}, t};
  }

 private:
  std::uint32_t present(std::uint32_t s) const {
    const std::uint32_t n = lanes(s);
    return n >= kSimdWidth ? ~0u : (1u << n) - 1u;
  }

  std::uint32_t n_, simdgroups_, size_x_, size_xy_;
  bool one_dimensional_;
  std::uint32_t alive_[kMaxSimdgroups];
};

// ---- SIMD-group functions ----------------------------------------------------

// The argument types of a SIMD-group function call, as declared types.
template <class... A>
struct types {};

// A reduction computed straight from the lanes' values (simd_sum, quad_max ...).
template <class Op, unsigned Width>
struct reduction {};

// One SIMD-group function call of one SIMD-group: put() collects each lane's
// arguments in one loop over the lanes; the first result() computes every
// lane's result, the later ones read theirs.
class exchange {
 public:
  static constexpr unsigned kMaxArguments = 4;

  template <class... A>
  [[gnu::always_inline]] void put(unsigned lane, const A&... a) {
    static_assert(sizeof...(A) <= kMaxArguments, "SIMD-group functions take at most 4 arguments");
    static_assert(((sizeof(A) <= COREAI_CPU_SIMD_SLOT_BYTES) && ...),
                  "SIMD-group functions take scalars and vectors of at most 32 bytes");
    unsigned i = 0;
    ((std::memcpy(arguments_[lane][i++], &a, sizeof(A))), ...);
  }

  // Every lane's result, computed once for the SIMD-group between the loop
  // over its lanes that put() the arguments and the one that reads them.
  template <class F, class... A>
  void compute(std::uint32_t active, F f, types<A...>) {
    using R = result_t<F, slot_t<A>...>;
    static_assert(sizeof(R) <= COREAI_CPU_SIMD_SLOT_BYTES, "the result is too large");
    if constexpr (is_reduction<F>::value) {
      reduce<slot_t<A>...>(active, f);
    } else {
      replay<R, slot_t<A>...>(active, f);
    }
  }

  // Lane `lane`'s result of compute(): a plain read, which keeps the loop
  // over the lanes free to vectorize.
  template <class F, class... A>
  [[gnu::always_inline]] auto result(unsigned lane, F, types<A...>) const {
    using R = result_t<F, slot_t<A>...>;
    R out;
    std::memcpy(&out, results_[lane], sizeof(R));
    return out;
  }

 private:
  template <class F, class... A>
  struct result_of {
    using type = decltype(std::declval<F>()(std::declval<A>()...));
  };
  template <class Op, unsigned W, class A>
  struct result_of<reduction<Op, W>, A> {
    using type = A;
  };
  template <class F, class... A>
  using result_t = typename result_of<F, A...>::type;
  template <class F>
  struct is_reduction : std::false_type {};
  template <class Op, unsigned W>
  struct is_reduction<reduction<Op, W>> : std::true_type {};

  template <class T>
  T argument(unsigned lane, unsigned i) const {
    T v;
    std::memcpy(&v, arguments_[lane][i], sizeof(T));
    return v;
  }

  template <class R, class... A, std::size_t... I>
  R call(unsigned lane, auto f, std::index_sequence<I...>) const {
    return f(argument<A>(lane, static_cast<unsigned>(I))...);
  }

  // A reduction: the butterfly of fiber mode over each chunk of Width lanes.
  template <class T, class Op, unsigned W>
  void reduce(std::uint32_t active, reduction<Op, W>) {
    if (active == ~0u) {
      // Every lane takes part: the butterfly without gaps (the same order).
      for (unsigned first = 0; first < kSimdWidth; first += W) {
        T values[W];
        for (unsigned i = 0; i < W; ++i) values[i] = argument<T>(first + i, 0);
        for (unsigned step = 1; step < W; step *= 2) {
          for (unsigned i = 0; i + step < W; i += 2 * step) {
            values[i] = Op{}(values[i], values[i + step]);
          }
        }
        for (unsigned i = 0; i < W; ++i) std::memcpy(results_[first + i], &values[0], sizeof(T));
      }
      return;
    }
    for (unsigned first = 0; first < kSimdWidth; first += W) {
      T values[kSimdWidth];
      bool present[kSimdWidth];
      for (unsigned i = 0; i < W; ++i) {
        present[i] = ((active >> (first + i)) & 1u) != 0;
        if (present[i]) values[i] = argument<T>(first + i, 0);
      }
      if (((active >> first) & (W >= 32 ? ~0u : (1u << (W % 32)) - 1u)) == 0) continue;
      const T r = simd::cpu::butterfly_of(values, present, W, Op{});
      for (unsigned i = 0; i < W; ++i) std::memcpy(results_[first + i], &r, sizeof(T));
    }
  }

  // Any other function: Metal's definition, replayed over the lanes.
  template <class R, class... A, class F>
  void replay(std::uint32_t active, F f) {
    simd::cpu::replay r;
    r.active = active;
    simd::cpu::tls_replay = &r;
    for (std::uint32_t m = active; m != 0; m &= m - 1) {
      r.lane = static_cast<unsigned>(__builtin_ctz(m));
      r.next = 0;
      (void)call<R, A...>(r.lane, f, std::index_sequence_for<A...>{});
    }
    r.recording = false;
    for (coreai_cpu_simdgroup& g : r.groups) g.combined_ready = 0;
    for (std::uint32_t m = active; m != 0; m &= m - 1) {
      r.lane = static_cast<unsigned>(__builtin_ctz(m));
      r.next = 0;
      const R v = call<R, A...>(r.lane, f, std::index_sequence_for<A...>{});
      std::memcpy(results_[r.lane], &v, sizeof(R));
    }
    simd::cpu::tls_replay = nullptr;
  }

  unsigned char arguments_[kSimdWidth][kMaxArguments][COREAI_CPU_SIMD_SLOT_BYTES];
  unsigned char results_[kSimdWidth][COREAI_CPU_SIMD_SLOT_BYTES];
};

// ---- simdgroup matrices ----------------------------------------------------------

namespace layout = metal::simdgroup_layout;

// A whole 8 x 8 SIMD-group matrix (metal::simdgroup_matrix holds one lane's
// two elements). Element pairs in row order: pair p holds row p / 4, columns
// 2 (p % 4) and the next, which is also the pair a lane's thread_elements()
// is (simdgroup_matrix.h gives the layout).
template <class T, int Cols, int Rows = Cols>
struct simdgroup_matrix {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, metal::half> ||
                    std::is_same_v<T, metal::bfloat>,
                "simdgroup_matrix holds float, half or bfloat elements");
  static_assert(Cols == 8 && Rows == 8, "Metal's SIMD-group matrices are 8 x 8");

  simdgroup_matrix() = default;
  explicit simdgroup_matrix(T diagonal) {
    for (int r = 0; r < 8; ++r) {
      for (int c = 0; c < 8; ++c) set(r, c, r == c ? diagonal : T(0));
    }
  }

  metal::vec<T, 2>& thread_elements(unsigned lane) { return pairs[pair_of(lane)]; }
  const metal::vec<T, 2>& thread_elements(unsigned lane) const { return pairs[pair_of(lane)]; }

  [[gnu::always_inline]] T get(int r, int c) const { return pairs[r * 4 + c / 2][c & 1]; }
  [[gnu::always_inline]] void set(int r, int c, T v) { pairs[r * 4 + c / 2][c & 1] = v; }

  static int pair_of(unsigned lane) { return layout::row(lane) * 4 + layout::column(lane, 0) / 2; }

  metal::vec<T, 2> pairs[32];
};

using simdgroup_float8x8 = simdgroup_matrix<float, 8, 8>;
using simdgroup_half8x8 = simdgroup_matrix<metal::half, 8, 8>;
using simdgroup_bfloat8x8 = simdgroup_matrix<metal::bfloat, 8, 8>;

template <class T, int Cols, int Rows = Cols>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  for (auto& p : m.pairs) p = metal::vec<T, 2>(value);
  return m;
}

// Element (r, c) belongs to a running lane (all of them, mostly).
inline bool element_active(std::uint32_t active, int r, int c) {
  return active == ~0u || ((active >> layout::lane(r, c)) & 1u) != 0;
}

template <class T, int C, int R, coreai::any_pointer P>
[[gnu::always_inline]] inline void simdgroup_load(simd_context sg, simdgroup_matrix<T, C, R>& d,
                                                  P src,
                           unsigned long elements_per_row = C,
                           metal::vec<unsigned long, 2> matrix_origin = 0,
                           bool transpose_matrix = false) {
  static_assert(layout::points_to<P, T>,
                "simdgroup_load: the source must point to the matrix's element type");
  const auto* from = coreai::raw(src);
  if (sg.active == ~0u && !transpose_matrix) {
    // Every lane runs: eight rows of eight consecutive elements.
    for (int r = 0; r < 8; ++r) {
      const auto* row =
          from + (matrix_origin.y + static_cast<unsigned long>(r)) * elements_per_row +
          matrix_origin.x;
      std::memcpy(&d.pairs[r * 4], row, 8 * sizeof(T));  // one row, one load
    }
    return;
  }
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 8; ++c) {
      if (!element_active(sg.active, r, c)) continue;
      d.set(r, c, from[layout::memory_index_of(r, c, elements_per_row, matrix_origin,
                                               transpose_matrix)]);
    }
  }
}

template <class T, int C, int R, coreai::any_pointer P>
[[gnu::always_inline]] inline void simdgroup_store(simd_context sg,
                                                   const simdgroup_matrix<T, C, R>& a, P dst,
                            unsigned long elements_per_row = C,
                            metal::vec<unsigned long, 2> matrix_origin = 0,
                            bool transpose_matrix = false) {
  static_assert(layout::points_to<P, T>,
                "simdgroup_store: the destination must point to the matrix's element type");
  auto* to = coreai::raw(dst);
  if (sg.active == ~0u && !transpose_matrix) {
    for (int r = 0; r < 8; ++r) {
      auto* row = to + (matrix_origin.y + static_cast<unsigned long>(r)) * elements_per_row +
                  matrix_origin.x;
      std::memcpy(row, &a.pairs[r * 4], 8 * sizeof(T));
    }
    return;
  }
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 8; ++c) {
      if (!element_active(sg.active, r, c)) continue;
      to[layout::memory_index_of(r, c, elements_per_row, matrix_origin, transpose_matrix)] =
          a.get(r, c);
    }
  }
}

// A product's operand (simdgroup_matrix.h's element()): a whole matrix, or
// one whose lanes do not all run, whose elements then count as zero (as in
// fiber mode, where those lanes take no part).
template <class T>
[[gnu::always_inline]] inline float element(const simdgroup_matrix<T, 8, 8>& m, int r, int c) {
  return static_cast<float>(m.get(r, c));
}
template <class T>
struct masked {
  const simdgroup_matrix<T, 8, 8>& m;
  std::uint32_t active;
};
template <class T>
[[gnu::always_inline]] inline float element(const masked<T>& m, int r, int c) {
  return element_active(m.active, r, c) ? static_cast<float>(m.m.get(r, c)) : 0.0f;
}

template <class T>
[[gnu::always_inline]] inline void store_element(simdgroup_matrix<T, 8, 8>& m, int r, int c,
                                                 float v) {
  m.set(r, c, static_cast<T>(v));
}

// d = a * b + c, by the function fiber mode multiplies with. The product
// writes each row of d once it has read row r of c; where d is a or b, whose
// every row every row of the product reads, it goes through a copy.
template <class TD, class TA, class TB, class TC>
[[gnu::always_inline]] inline void simdgroup_multiply_accumulate(
    simd_context sg, simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
    const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c) {
  const void* const at = &d;
  if (at == &a || at == &b) {
    simdgroup_matrix<TD, 8, 8> copy;
    simdgroup_multiply_accumulate(sg, copy, a, b, c);
    d = copy;
    return;
  }
  if (sg.active == ~0u) {
    layout::product(a, b, c, d);
  } else {
    layout::product(masked<TA>{a, sg.active}, masked<TB>{b, sg.active}, masked<TC>{c, sg.active},
                    d);
  }
}

template <class TD, class TA, class TB>
inline void simdgroup_multiply(simd_context sg, simdgroup_matrix<TD, 8, 8>& d,
                               const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b) {
  simdgroup_multiply_accumulate(sg, d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)));
}

}  // namespace coreai::group

#endif  // COREAI_MSL_GROUP_FORM_H
