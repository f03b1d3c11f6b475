// Barriers, SIMD-group functions and quad-group functions for the CPU backend.
//
// Kernels that call any of these run in fiber mode: one fiber per thread of a
// threadgroup, all on one OS thread. A barrier or a SIMD-group function hands
// control to the launcher (cpu_abi.h), which resumes the other fibers until the
// ones that must meet have arrived. Only threads that are still running are
// waited for, so barriers inside bounds checks and after an early `return` of
// other threads behave as on the GPU.
//
// SIMD-groups are 32 lanes wide, lane = thread_index_in_threadgroup % 32. A
// SIMD-group function publishes each lane's value, meets the running lanes of
// its SIMD-group, then every lane computes its own result from all values.
// Lanes that have exited (or lie past the end of a partial SIMD-group) take no
// part: reductions skip them and a shuffle that reads one returns the caller's
// own value. simd_sum and simd_product add in the xor-butterfly order (lane
// distance 1, 2, 4, 8, 16), which is how the GPU reduces, so float results round
// the same way.
#ifndef COREAI_MSL_SYNC_H
#define COREAI_MSL_SYNC_H

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu_abi.h"
#include "runtime.h"

namespace metal {

enum class mem_flags : unsigned {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) {
  return static_cast<mem_flags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
constexpr mem_flags operator&(mem_flags a, mem_flags b) {
  return static_cast<mem_flags>(static_cast<unsigned>(a) & static_cast<unsigned>(b));
}

// All fibers of a threadgroup share one OS thread, so program order already
// makes every write visible to the threads resumed after the barrier; the
// memory flags need no extra fence.
inline void threadgroup_barrier(mem_flags = mem_flags::mem_none) {
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_THREADGROUP_BARRIER, 0);
  coreai::g_runtime->threadgroup_barrier();
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_THREADGROUP_BARRIER, 1);
}
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none) {
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMDGROUP_BARRIER, 0);
  coreai::g_runtime->simdgroup_barrier();
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMDGROUP_BARRIER, 1);
}

}  // namespace metal

namespace coreai::simd {

inline constexpr unsigned kWidth = COREAI_CPU_SIMD_WIDTH;

// Lane count of a clang ext_vector_type, 1 for a scalar.
template <class T>
struct lanes {
  static constexpr int count = 1;
  using element = T;
};
template <class E, int N>
struct lanes<E __attribute__((ext_vector_type(N)))> {
  static constexpr int count = N;
  using element = E;
};

template <class T>
inline coreai_cpu_simd_view exchange(const T& value) {
  static_assert(sizeof(T) <= COREAI_CPU_SIMD_SLOT_BYTES,
                "SIMD-group functions take scalars and vectors of at most 32 bytes");
  static_assert(std::is_trivially_copyable_v<T>, "SIMD-group functions take scalars and vectors");
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMD_FUNCTION, 0);
  const coreai_cpu_simd_view view = coreai::g_runtime->simd_exchange(&value, sizeof(T));
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMD_FUNCTION, 1);
  return view;
}

inline coreai_cpu_simd_view meet() {
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMD_FUNCTION, 0);
  const coreai_cpu_simd_view view = coreai::g_runtime->simd_exchange(nullptr, 0);
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMD_FUNCTION, 1);
  return view;
}

inline bool active(const coreai_cpu_simd_view& v, unsigned lane) {
  return lane < kWidth && ((v.active_mask >> lane) & 1u) != 0;
}

template <class T>
inline T value_of(const coreai_cpu_simd_view& v, unsigned lane) {
  T out;
  std::memcpy(&out, v.slots + lane * COREAI_CPU_SIMD_SLOT_BYTES, sizeof(T));
  return out;
}

// The value lane `source` published, or the caller's own when that lane is not active.
template <class T>
inline T read_or_own(const coreai_cpu_simd_view& v, unsigned source, const T& own) {
  return active(v, source) ? value_of<T>(v, source) : own;
}

// Element-wise application of a scalar binary function to scalars or vectors.
template <class T, class F>
inline T elementwise(const T& a, const T& b, F f) {
  if constexpr (lanes<T>::count == 1) {
    return f(a, b);
  } else {
    T r = a;
    for (int i = 0; i < lanes<T>::count; ++i) r[i] = f(a[i], b[i]);
    return r;
  }
}

// min/max that return the other operand when one is NaN, like metal::fmin/fmax.
template <bool Max>
struct extremum_op {
  template <class T>
  T operator()(const T& a, const T& b) const {
    return elementwise(a, b, [](auto x, auto y) {
      if constexpr (!std::is_integral_v<decltype(x)>) {
        if (x != x) return y;
        if (y != y) return x;
      }
      return (Max ? x < y : y < x) ? y : x;
    });
  }
};
using min_op = extremum_op<false>;
using max_op = extremum_op<true>;
struct sum_op {
  template <class T>
  T operator()(const T& a, const T& b) const { return a + b; }
};
struct product_op {
  template <class T>
  T operator()(const T& a, const T& b) const { return a * b; }
};
struct and_op {
  template <class T>
  T operator()(const T& a, const T& b) const { return a & b; }
};
struct or_op {
  template <class T>
  T operator()(const T& a, const T& b) const { return a | b; }
};
struct xor_op {
  template <class T>
  T operator()(const T& a, const T& b) const { return a ^ b; }
};

template <class T>
inline constexpr bool is_integer_value = std::is_integral_v<typename lanes<T>::element> &&
                                         !std::is_same_v<typename lanes<T>::element, bool>;

// Reduction over `width` lanes starting at `first`, pairing neighbours at
// distance 1, 2, 4, ... (the xor butterfly); inactive lanes are skipped.
template <class T, class Op>
inline T reduce(const coreai_cpu_simd_view& v, unsigned first, unsigned width, Op op) {
  T values[kWidth];
  bool present[kWidth];
  for (unsigned i = 0; i < width; ++i) {
    present[i] = active(v, first + i);
    if (present[i]) values[i] = value_of<T>(v, first + i);
  }
  for (unsigned step = 1; step < width; step *= 2) {
    for (unsigned i = 0; i + step < width; i += 2 * step) {
      if (present[i] && present[i + step]) {
        values[i] = op(values[i], values[i + step]);
      } else if (present[i + step]) {
        values[i] = values[i + step];
        present[i] = true;
      }
    }
  }
  return values[0];  // every call site has at least the caller's own lane active
}

// Scan over the active lanes of [first, v.lane] (inclusive) or [first, v.lane).
template <class T, class Op>
inline T scan(const coreai_cpu_simd_view& v, unsigned first, bool inclusive, T identity, Op op) {
  T acc = identity;
  const unsigned end = inclusive ? v.lane + 1 : v.lane;
  for (unsigned i = first; i < end; ++i) {
    if (active(v, i)) acc = op(acc, value_of<T>(v, i));
  }
  return acc;
}

inline unsigned first_active(const coreai_cpu_simd_view& v, unsigned first, unsigned width) {
  for (unsigned i = first; i < first + width; ++i) {
    if (active(v, i)) return i;
  }
  return v.lane;
}

inline std::uint64_t ballot_bits(const coreai_cpu_simd_view& v, unsigned first, unsigned width) {
  std::uint64_t bits = 0;
  for (unsigned i = first; i < first + width; ++i) {
    if (active(v, i) && value_of<bool>(v, i)) bits |= std::uint64_t{1} << (i - first);
  }
  return bits;
}

inline std::uint64_t active_bits(const coreai_cpu_simd_view& v, unsigned first, unsigned width) {
  return (static_cast<std::uint64_t>(v.active_mask) >> first) & ((std::uint64_t{1} << width) - 1);
}

}  // namespace coreai::simd

namespace metal {

// The result of simd_ballot: one bit per lane of the SIMD-group.
class simd_vote {
 public:
  using vote_t = std::uint64_t;
  constexpr explicit simd_vote(vote_t v = 0) : bits_(v), active_(~vote_t{0}) {}
  constexpr simd_vote(vote_t v, vote_t active) : bits_(v), active_(active) {}
  constexpr explicit operator vote_t() const { return bits_; }
  // True if the bit of every active lane is set.
  constexpr bool all() const { return (bits_ & active_) == active_; }
  constexpr bool any() const { return bits_ != 0; }

 private:
  vote_t bits_;
  vote_t active_;
};

// The result of quad_ballot: one bit per lane of the quad-group.
class quad_vote {
 public:
  using vote_t = std::uint16_t;
  constexpr explicit quad_vote(vote_t v = 0) : bits_(v), active_(0xF) {}
  constexpr quad_vote(vote_t v, vote_t active) : bits_(v), active_(active) {}
  constexpr explicit operator vote_t() const { return bits_; }
  constexpr bool all() const { return (bits_ & active_) == active_; }
  constexpr bool any() const { return bits_ != 0; }

 private:
  vote_t bits_;
  vote_t active_;
};

// ---- SIMD-group functions (32 lanes) --------------------------------------

template <class T>
inline T simd_sum(T data) {
  return coreai::simd::reduce<T>(coreai::simd::exchange(data), 0, 32, coreai::simd::sum_op{});
}
template <class T>
inline T simd_product(T data) {
  return coreai::simd::reduce<T>(coreai::simd::exchange(data), 0, 32, coreai::simd::product_op{});
}
template <class T>
inline T simd_min(T data) {
  return coreai::simd::reduce<T>(coreai::simd::exchange(data), 0, 32, coreai::simd::min_op{});
}
template <class T>
inline T simd_max(T data) {
  return coreai::simd::reduce<T>(coreai::simd::exchange(data), 0, 32, coreai::simd::max_op{});
}
template <class T>
inline T simd_and(T data) {
  static_assert(coreai::simd::is_integer_value<T>, "simd_and takes integer scalars or vectors");
  return coreai::simd::reduce<T>(coreai::simd::exchange(data), 0, 32, coreai::simd::and_op{});
}
template <class T>
inline T simd_or(T data) {
  static_assert(coreai::simd::is_integer_value<T>, "simd_or takes integer scalars or vectors");
  return coreai::simd::reduce<T>(coreai::simd::exchange(data), 0, 32, coreai::simd::or_op{});
}
template <class T>
inline T simd_xor(T data) {
  static_assert(coreai::simd::is_integer_value<T>, "simd_xor takes integer scalars or vectors");
  return coreai::simd::reduce<T>(coreai::simd::exchange(data), 0, 32, coreai::simd::xor_op{});
}

template <class T>
inline T simd_prefix_inclusive_sum(T data) {
  return coreai::simd::scan<T>(coreai::simd::exchange(data), 0, true, T(0), coreai::simd::sum_op{});
}
template <class T>
inline T simd_prefix_exclusive_sum(T data) {
  return coreai::simd::scan<T>(coreai::simd::exchange(data), 0, false, T(0),
                               coreai::simd::sum_op{});
}
template <class T>
inline T simd_prefix_inclusive_product(T data) {
  return coreai::simd::scan<T>(coreai::simd::exchange(data), 0, true, T(1),
                               coreai::simd::product_op{});
}
template <class T>
inline T simd_prefix_exclusive_product(T data) {
  return coreai::simd::scan<T>(coreai::simd::exchange(data), 0, false, T(1),
                               coreai::simd::product_op{});
}

template <class T>
inline T simd_shuffle(T data, unsigned short simd_lane_id) {
  return coreai::simd::read_or_own(coreai::simd::exchange(data), simd_lane_id, data);
}
template <class T>
inline T simd_broadcast(T data, unsigned short broadcast_lane_id) {
  return coreai::simd::read_or_own(coreai::simd::exchange(data), broadcast_lane_id, data);
}
template <class T>
inline T simd_broadcast_first(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::value_of<T>(v, coreai::simd::first_active(v, 0, 32));
}
// Lanes below `delta` keep their own value (no wrap-around).
template <class T>
inline T simd_shuffle_up(T data, unsigned short delta) {
  const auto v = coreai::simd::exchange(data);
  return v.lane >= delta ? coreai::simd::read_or_own(v, v.lane - delta, data) : data;
}
// Lanes whose source lies past lane 31 keep their own value.
template <class T>
inline T simd_shuffle_down(T data, unsigned short delta) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::read_or_own(v, v.lane + delta, data);
}
template <class T>
inline T simd_shuffle_xor(T data, unsigned short mask) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::read_or_own(v, v.lane ^ mask, data);
}
template <class T>
inline T simd_shuffle_rotate_up(T data, unsigned short delta) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::read_or_own(v, (v.lane + 32u - (delta % 32u)) % 32u, data);
}
template <class T>
inline T simd_shuffle_rotate_down(T data, unsigned short delta) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::read_or_own(v, (v.lane + delta) % 32u, data);
}

// Lanes whose source lies below lane 0 of their `modulo`-lane chunk take
// filling_data from the top `delta` lanes of the chunk instead.
template <class T>
inline T simd_shuffle_and_fill_up(T data, T filling_data, unsigned short delta,
                                  unsigned short modulo) {
  // Two exchanges: a (data, filling) pair may not fit one slot. The slots of
  // an exchange hold until the lanes' next exchange but one, and a lane resumed
  // after the second exchange may find the others already past it, writing the
  // first one's slot set again: so the data is read before the second exchange.
  const auto d = coreai::simd::exchange(data);
  const unsigned base = d.lane - d.lane % modulo, j = d.lane % modulo;
  const T shifted = j >= delta ? coreai::simd::read_or_own(d, base + j - delta, data) : data;
  const auto f = coreai::simd::exchange(filling_data);
  if (j >= delta) return shifted;
  return coreai::simd::active(f, base + modulo - delta + j)
             ? coreai::simd::value_of<T>(f, base + modulo - delta + j)
             : data;
}
template <class T>
inline T simd_shuffle_and_fill_up(T data, T filling_data, unsigned short delta) {
  return simd_shuffle_and_fill_up(data, filling_data, delta, 32);
}
// Lanes whose source lies past the end of their `modulo`-lane chunk take
// filling_data from the bottom `delta` lanes of the chunk instead.
template <class T>
inline T simd_shuffle_and_fill_down(T data, T filling_data, unsigned short delta,
                                    unsigned short modulo) {
  // The data is read before the second exchange (simd_shuffle_and_fill_up).
  const auto d = coreai::simd::exchange(data);
  const unsigned base = d.lane - d.lane % modulo, j = d.lane % modulo;
  const T shifted =
      j + delta < modulo ? coreai::simd::read_or_own(d, base + j + delta, data) : data;
  const auto f = coreai::simd::exchange(filling_data);
  if (j + delta < modulo) return shifted;
  return coreai::simd::active(f, base + j + delta - modulo)
             ? coreai::simd::value_of<T>(f, base + j + delta - modulo)
             : data;
}
template <class T>
inline T simd_shuffle_and_fill_down(T data, T filling_data, unsigned short delta) {
  return simd_shuffle_and_fill_down(data, filling_data, delta, 32);
}

inline simd_vote simd_ballot(bool expr) {
  const auto v = coreai::simd::exchange(expr);
  return simd_vote(coreai::simd::ballot_bits(v, 0, 32), coreai::simd::active_bits(v, 0, 32));
}
inline simd_vote simd_active_threads_mask() {
  const auto v = coreai::simd::meet();
  const auto active = coreai::simd::active_bits(v, 0, 32);
  return simd_vote(active, active);
}
inline bool simd_all(bool expr) { return simd_ballot(expr).all(); }
inline bool simd_any(bool expr) { return simd_ballot(expr).any(); }
inline bool simd_is_first() {
  const auto v = coreai::simd::meet();
  return coreai::simd::first_active(v, 0, 32) == v.lane;
}

// ---- quad-group functions (4 lanes: SIMD lanes 4q .. 4q + 3) ---------------

namespace quad_detail {
inline unsigned base(const coreai_cpu_simd_view& v) { return v.lane & ~3u; }
}  // namespace quad_detail

template <class T>
inline T quad_sum(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::reduce<T>(v, quad_detail::base(v), 4, coreai::simd::sum_op{});
}
template <class T>
inline T quad_product(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::reduce<T>(v, quad_detail::base(v), 4, coreai::simd::product_op{});
}
template <class T>
inline T quad_min(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::reduce<T>(v, quad_detail::base(v), 4, coreai::simd::min_op{});
}
template <class T>
inline T quad_max(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::reduce<T>(v, quad_detail::base(v), 4, coreai::simd::max_op{});
}
template <class T>
inline T quad_and(T data) {
  static_assert(coreai::simd::is_integer_value<T>, "quad_and takes integer scalars or vectors");
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::reduce<T>(v, quad_detail::base(v), 4, coreai::simd::and_op{});
}
template <class T>
inline T quad_or(T data) {
  static_assert(coreai::simd::is_integer_value<T>, "quad_or takes integer scalars or vectors");
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::reduce<T>(v, quad_detail::base(v), 4, coreai::simd::or_op{});
}
template <class T>
inline T quad_xor(T data) {
  static_assert(coreai::simd::is_integer_value<T>, "quad_xor takes integer scalars or vectors");
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::reduce<T>(v, quad_detail::base(v), 4, coreai::simd::xor_op{});
}

template <class T>
inline T quad_prefix_inclusive_sum(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::scan<T>(v, quad_detail::base(v), true, T(0), coreai::simd::sum_op{});
}
template <class T>
inline T quad_prefix_exclusive_sum(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::scan<T>(v, quad_detail::base(v), false, T(0), coreai::simd::sum_op{});
}
template <class T>
inline T quad_prefix_inclusive_product(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::scan<T>(v, quad_detail::base(v), true, T(1), coreai::simd::product_op{});
}
template <class T>
inline T quad_prefix_exclusive_product(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::scan<T>(v, quad_detail::base(v), false, T(1), coreai::simd::product_op{});
}

template <class T>
inline T quad_shuffle(T data, unsigned short quad_lane_id) {
  const auto v = coreai::simd::exchange(data);
  return quad_lane_id < 4 ? coreai::simd::read_or_own(v, quad_detail::base(v) + quad_lane_id, data)
                          : data;
}
template <class T>
inline T quad_broadcast(T data, unsigned short broadcast_lane_id) {
  return quad_shuffle(data, broadcast_lane_id);
}
template <class T>
inline T quad_broadcast_first(T data) {
  const auto v = coreai::simd::exchange(data);
  return coreai::simd::value_of<T>(v, coreai::simd::first_active(v, quad_detail::base(v), 4));
}
template <class T>
inline T quad_shuffle_up(T data, unsigned short delta) {
  const auto v = coreai::simd::exchange(data);
  const unsigned q = v.lane & 3u;
  return q >= delta ? coreai::simd::read_or_own(v, v.lane - delta, data) : data;
}
template <class T>
inline T quad_shuffle_down(T data, unsigned short delta) {
  const auto v = coreai::simd::exchange(data);
  const unsigned q = v.lane & 3u;
  return q + delta < 4 ? coreai::simd::read_or_own(v, v.lane + delta, data) : data;
}
template <class T>
inline T quad_shuffle_xor(T data, unsigned short mask) {
  const auto v = coreai::simd::exchange(data);
  const unsigned q = (v.lane & 3u) ^ mask;
  return q < 4 ? coreai::simd::read_or_own(v, quad_detail::base(v) + q, data) : data;
}
template <class T>
inline T quad_shuffle_rotate_up(T data, unsigned short delta) {
  const auto v = coreai::simd::exchange(data);
  const unsigned q = ((v.lane & 3u) + 4u - (delta % 4u)) % 4u;
  return coreai::simd::read_or_own(v, quad_detail::base(v) + q, data);
}
template <class T>
inline T quad_shuffle_rotate_down(T data, unsigned short delta) {
  const auto v = coreai::simd::exchange(data);
  const unsigned q = ((v.lane & 3u) + delta) % 4u;
  return coreai::simd::read_or_own(v, quad_detail::base(v) + q, data);
}

template <class T>
inline T quad_shuffle_and_fill_up(T data, T filling_data, unsigned short delta,
                                  unsigned short modulo = 4) {
  // The data is read before the second exchange (simd_shuffle_and_fill_up).
  const auto d = coreai::simd::exchange(data);
  const unsigned q = d.lane & 3u;
  const unsigned base = quad_detail::base(d) + (q - q % modulo), j = q % modulo;
  const T shifted = j >= delta ? coreai::simd::read_or_own(d, base + j - delta, data) : data;
  const auto f = coreai::simd::exchange(filling_data);
  if (j >= delta) return shifted;
  return coreai::simd::active(f, base + modulo - delta + j)
             ? coreai::simd::value_of<T>(f, base + modulo - delta + j)
             : data;
}
template <class T>
inline T quad_shuffle_and_fill_down(T data, T filling_data, unsigned short delta,
                                    unsigned short modulo = 4) {
  // The data is read before the second exchange (simd_shuffle_and_fill_up).
  const auto d = coreai::simd::exchange(data);
  const unsigned q = d.lane & 3u;
  const unsigned base = quad_detail::base(d) + (q - q % modulo), j = q % modulo;
  const T shifted =
      j + delta < modulo ? coreai::simd::read_or_own(d, base + j + delta, data) : data;
  const auto f = coreai::simd::exchange(filling_data);
  if (j + delta < modulo) return shifted;
  return coreai::simd::active(f, base + j + delta - modulo)
             ? coreai::simd::value_of<T>(f, base + j + delta - modulo)
             : data;
}

inline quad_vote quad_ballot(bool expr) {
  const auto v = coreai::simd::exchange(expr);
  const unsigned b = quad_detail::base(v);
  return quad_vote(static_cast<quad_vote::vote_t>(coreai::simd::ballot_bits(v, b, 4)),
                   static_cast<quad_vote::vote_t>(coreai::simd::active_bits(v, b, 4)));
}
inline quad_vote quad_active_threads_mask() {
  const auto v = coreai::simd::meet();
  const auto active =
      static_cast<quad_vote::vote_t>(coreai::simd::active_bits(v, quad_detail::base(v), 4));
  return quad_vote(active, active);
}
inline bool quad_all(bool expr) { return quad_ballot(expr).all(); }
inline bool quad_any(bool expr) { return quad_ballot(expr).any(); }
inline bool quad_is_first() {
  const auto v = coreai::simd::meet();
  return coreai::simd::first_active(v, quad_detail::base(v), 4) == v.lane;
}

}  // namespace metal

#endif  // COREAI_MSL_SYNC_H
