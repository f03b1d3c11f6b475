// Barriers, SIMD-group functions and quad-group functions, for every target.
//
// The Metal functions are written once, here, over a handful of primitives
// that each target provides in namespace coreai::simd (target_cpu.h: fibers
// that meet at a rendezvous; target_nvptx.h: warp shuffles and votes):
//
//   meet(at)                        the caller's lane and the mask of active lanes
//   fetch(value, source, at)        every active lane publishes `value` and reads the
//                                   one of lane source(lane, active); `found` is false
//                                   (and the value the caller's own) when that lane
//                                   is not active
//   reduce(value, width, op, at)    op over the active lanes of the caller's aligned
//                                   chunk of `width` lanes (32: the SIMD-group, 4: the
//                                   quad-group), pairing neighbours at distance 1, 2,
//                                   4 ... (the xor butterfly); inactive lanes are skipped
//   scan(value, width, inclusive, identity, op, at)
//                                   op over the active lanes of the chunk up to the
//                                   caller, in lane order
//   ballot(predicate, width, at)    the predicate bits of the chunk's active lanes
//   threadgroup_barrier(), simdgroup_barrier(at)   (namespace coreai::target)
//
// `at` is the source position of the user's call (call_site.h): every Metal
// function here takes it as a defaulted last argument, so a target that
// groups lanes by call site can order the sites as the source does.
//
// SIMD-groups are 32 lanes wide, lane = thread_index_in_threadgroup % 32.
// Active lanes are the ones executing the call (Metal Shading Language
// specification, 6.9.2 "SIMD-Group Functions"): lanes that have exited, lie
// past the end of a partial SIMD-group, or that control flow took elsewhere,
// take no part. A shuffle that reads one returns the caller's own value.
// simd_sum and simd_product add in the xor-butterfly order, so float results
// round the same way on the CPU and the GPU.
#ifndef COREAI_MSL_SYNC_H
#define COREAI_MSL_SYNC_H

#include <cstdint>
#include <type_traits>

#include "call_site.h"
#include "runtime.h"  // COREAI_MSL_DEBUG_SYNC

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

}  // namespace metal

namespace coreai::simd {

inline constexpr unsigned kWidth = 32;
inline constexpr unsigned kQuadWidth = 4;

// What meet() answers: the caller's lane and the active lanes (bit L: lane L).
struct lanes_state {
  unsigned lane;
  std::uint32_t active;
};

// What fetch() answers.
template <class T>
struct fetched {
  T value;
  bool found;
  unsigned lane;  // the caller's
};

// What ballot() answers, both relative to the first lane of the chunk.
struct ballot_bits {
  std::uint32_t bits;    // predicate true, lane active
  std::uint32_t active;  // lane active
};

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

inline bool is_active(std::uint32_t active, unsigned lane) {
  return lane < kWidth && ((active >> lane) & 1u) != 0;
}

// The lowest set bit's lane; `bits` is not zero.
inline unsigned first_lane(std::uint32_t bits) {
  return static_cast<unsigned>(__builtin_ctz(bits));
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
      const bool further = Max ? x < y : y < x;
      if constexpr (!std::is_integral_v<decltype(x)>) {
        // One select, no branch: y if x is NaN, x if y is NaN, else the further one.
        return (x != x || (y == y && further)) ? y : x;
      } else {
        return further ? y : x;
      }
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

}  // namespace coreai::simd

#if defined(__NVPTX__)
#include "target_nvptx.h"
#else
#include "target_cpu.h"
#endif

namespace metal {

// COREAI_MSL_DEBUG_SYNC: debug mode's checks of synchronisation (runtime.h).
inline void threadgroup_barrier(mem_flags = mem_flags::mem_none) {
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_THREADGROUP_BARRIER, 0);
  coreai::target::threadgroup_barrier();
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_THREADGROUP_BARRIER, 1);
}
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none,
                              COREAI_CALL_SITE) {
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMDGROUP_BARRIER, 0);
  coreai::target::simdgroup_barrier(at);
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMDGROUP_BARRIER, 1);
}

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

}  // namespace metal

namespace coreai::simd {

// The value of lane source(lane, active), or the caller's own when that lane
// is not active.
template <class T, class Source>
inline T read_or_own(const T& value, Source source, site at) {
  const fetched<T> r = fetch(value, source, at);
  return r.found ? r.value : value;
}

// The start of the caller's `modulo`-lane chunk inside its `width`-lane group.
inline unsigned modulo_base(unsigned lane, unsigned modulo, unsigned width) {
  const unsigned group = lane & ~(width - 1);
  const unsigned local = lane - group;
  return group + (local - local % modulo);
}

// Lanes whose source lies below lane 0 of their `modulo`-lane chunk take
// `filling` from the top `delta` lanes of the chunk instead. Both values are
// fetched on every lane, whichever one the lane then keeps.
template <class T>
inline T shuffle_and_fill_up(T data, T filling, unsigned delta, unsigned modulo, unsigned width, site at) {
  const fetched<T> d = fetch(data, [=](unsigned lane, std::uint32_t) {
    const unsigned base = modulo_base(lane, modulo, width), j = lane - base;
    return j >= delta ? base + j - delta : lane;
  }, at);
  const fetched<T> f = fetch(filling, [=](unsigned lane, std::uint32_t) {
    const unsigned base = modulo_base(lane, modulo, width), j = lane - base;
    return base + modulo - delta + j;
  }, at);
  const unsigned j = d.lane - modulo_base(d.lane, modulo, width);
  if (j >= delta) return d.found ? d.value : data;
  return f.found ? f.value : data;
}

// Lanes whose source lies past the end of their `modulo`-lane chunk take
// `filling` from the bottom `delta` lanes of the chunk instead.
template <class T>
inline T shuffle_and_fill_down(T data, T filling, unsigned delta, unsigned modulo, unsigned width, site at) {
  const fetched<T> d = fetch(data, [=](unsigned lane, std::uint32_t) {
    const unsigned base = modulo_base(lane, modulo, width), j = lane - base;
    return j + delta < modulo ? base + j + delta : lane;
  }, at);
  const fetched<T> f = fetch(filling, [=](unsigned lane, std::uint32_t) {
    const unsigned base = modulo_base(lane, modulo, width), j = lane - base;
    return base + j + delta - modulo;
  }, at);
  const unsigned j = d.lane - modulo_base(d.lane, modulo, width);
  if (j + delta < modulo) return d.found ? d.value : data;
  return f.found ? f.value : data;
}

}  // namespace coreai::simd

namespace metal {

// ---- SIMD-group functions (32 lanes) --------------------------------------

template <class T>
inline T simd_sum(T data, COREAI_CALL_SITE) {
  return coreai::simd::reduce(data, 32, coreai::simd::sum_op{}, at);
}
template <class T>
inline T simd_product(T data, COREAI_CALL_SITE) {
  return coreai::simd::reduce(data, 32, coreai::simd::product_op{}, at);
}
template <class T>
inline T simd_min(T data, COREAI_CALL_SITE) {
  return coreai::simd::reduce(data, 32, coreai::simd::min_op{}, at);
}
template <class T>
inline T simd_max(T data, COREAI_CALL_SITE) {
  return coreai::simd::reduce(data, 32, coreai::simd::max_op{}, at);
}
template <class T>
inline T simd_and(T data, COREAI_CALL_SITE) {
  static_assert(coreai::simd::is_integer_value<T>, "simd_and takes integer scalars or vectors");
  return coreai::simd::reduce(data, 32, coreai::simd::and_op{}, at);
}
template <class T>
inline T simd_or(T data, COREAI_CALL_SITE) {
  static_assert(coreai::simd::is_integer_value<T>, "simd_or takes integer scalars or vectors");
  return coreai::simd::reduce(data, 32, coreai::simd::or_op{}, at);
}
template <class T>
inline T simd_xor(T data, COREAI_CALL_SITE) {
  static_assert(coreai::simd::is_integer_value<T>, "simd_xor takes integer scalars or vectors");
  return coreai::simd::reduce(data, 32, coreai::simd::xor_op{}, at);
}

template <class T>
inline T simd_prefix_inclusive_sum(T data, COREAI_CALL_SITE) {
  return coreai::simd::scan(data, 32, true, T(0), coreai::simd::sum_op{}, at);
}
template <class T>
inline T simd_prefix_exclusive_sum(T data, COREAI_CALL_SITE) {
  return coreai::simd::scan(data, 32, false, T(0), coreai::simd::sum_op{}, at);
}
template <class T>
inline T simd_prefix_inclusive_product(T data, COREAI_CALL_SITE) {
  return coreai::simd::scan(data, 32, true, T(1), coreai::simd::product_op{}, at);
}
template <class T>
inline T simd_prefix_exclusive_product(T data, COREAI_CALL_SITE) {
  return coreai::simd::scan(data, 32, false, T(1), coreai::simd::product_op{}, at);
}

template <class T>
inline T simd_shuffle(T data, unsigned short simd_lane_id, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned, std::uint32_t) -> unsigned {
    return simd_lane_id;
  }, at);
}
template <class T>
inline T simd_broadcast(T data, unsigned short broadcast_lane_id, COREAI_CALL_SITE) {
  return simd_shuffle(data, broadcast_lane_id, at);
}
template <class T>
inline T simd_broadcast_first(T data, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [](unsigned, std::uint32_t active) {
    return coreai::simd::first_lane(active);
  }, at);
}
// Lanes below `delta` keep their own value (no wrap-around).
template <class T>
inline T simd_shuffle_up(T data, unsigned short delta, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned lane, std::uint32_t) {
    return lane >= delta ? lane - delta : lane;
  }, at);
}
// Lanes whose source lies past lane 31 keep their own value.
template <class T>
inline T simd_shuffle_down(T data, unsigned short delta, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data,
                                   [=](unsigned lane, std::uint32_t) { return lane + delta; }, at);
}
template <class T>
inline T simd_shuffle_xor(T data, unsigned short mask, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned lane, std::uint32_t) { return lane ^ mask; }, at);
}
template <class T>
inline T simd_shuffle_rotate_up(T data, unsigned short delta, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned lane, std::uint32_t) {
    return (lane + 32u - (delta % 32u)) % 32u;
  }, at);
}
template <class T>
inline T simd_shuffle_rotate_down(T data, unsigned short delta, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(
      data, [=](unsigned lane, std::uint32_t) { return (lane + delta) % 32u; }, at);
}

template <class T>
inline T simd_shuffle_and_fill_up(T data, T filling_data, unsigned short delta,
                                  unsigned short modulo, COREAI_CALL_SITE) {
  return coreai::simd::shuffle_and_fill_up(data, filling_data, delta, modulo, 32, at);
}
template <class T>
inline T simd_shuffle_and_fill_up(T data, T filling_data, unsigned short delta, COREAI_CALL_SITE) {
  return simd_shuffle_and_fill_up(data, filling_data, delta, 32, at);
}
template <class T>
inline T simd_shuffle_and_fill_down(T data, T filling_data, unsigned short delta,
                                    unsigned short modulo, COREAI_CALL_SITE) {
  return coreai::simd::shuffle_and_fill_down(data, filling_data, delta, modulo, 32, at);
}
template <class T>
inline T simd_shuffle_and_fill_down(T data, T filling_data, unsigned short delta, COREAI_CALL_SITE) {
  return simd_shuffle_and_fill_down(data, filling_data, delta, 32, at);
}

inline simd_vote simd_ballot(bool expr, COREAI_CALL_SITE) {
  const coreai::simd::ballot_bits b = coreai::simd::ballot(expr, 32, at);
  return simd_vote(b.bits, b.active);
}
inline simd_vote simd_active_threads_mask(COREAI_CALL_SITE) {
  const coreai::simd::lanes_state s = coreai::simd::meet(at);
  return simd_vote(s.active, s.active);
}
inline bool simd_all(bool expr, COREAI_CALL_SITE) { return simd_ballot(expr, at).all(); }
inline bool simd_any(bool expr, COREAI_CALL_SITE) { return simd_ballot(expr, at).any(); }
inline bool simd_is_first(COREAI_CALL_SITE) {
  const coreai::simd::lanes_state s = coreai::simd::meet(at);
  return coreai::simd::first_lane(s.active) == s.lane;
}

// ---- quad-group functions (4 lanes: SIMD lanes 4q .. 4q + 3) ---------------

namespace quad_detail {
inline unsigned base(unsigned lane) { return lane & ~3u; }
inline unsigned active_in_quad(const coreai::simd::lanes_state& s) {
  return (s.active >> base(s.lane)) & 0xFu;
}
}  // namespace quad_detail

template <class T>
inline T quad_sum(T data, COREAI_CALL_SITE) {
  return coreai::simd::reduce(data, 4, coreai::simd::sum_op{}, at);
}
template <class T>
inline T quad_product(T data, COREAI_CALL_SITE) {
  return coreai::simd::reduce(data, 4, coreai::simd::product_op{}, at);
}
template <class T>
inline T quad_min(T data, COREAI_CALL_SITE) {
  return coreai::simd::reduce(data, 4, coreai::simd::min_op{}, at);
}
template <class T>
inline T quad_max(T data, COREAI_CALL_SITE) {
  return coreai::simd::reduce(data, 4, coreai::simd::max_op{}, at);
}
template <class T>
inline T quad_and(T data, COREAI_CALL_SITE) {
  static_assert(coreai::simd::is_integer_value<T>, "quad_and takes integer scalars or vectors");
  return coreai::simd::reduce(data, 4, coreai::simd::and_op{}, at);
}
template <class T>
inline T quad_or(T data, COREAI_CALL_SITE) {
  static_assert(coreai::simd::is_integer_value<T>, "quad_or takes integer scalars or vectors");
  return coreai::simd::reduce(data, 4, coreai::simd::or_op{}, at);
}
template <class T>
inline T quad_xor(T data, COREAI_CALL_SITE) {
  static_assert(coreai::simd::is_integer_value<T>, "quad_xor takes integer scalars or vectors");
  return coreai::simd::reduce(data, 4, coreai::simd::xor_op{}, at);
}

template <class T>
inline T quad_prefix_inclusive_sum(T data, COREAI_CALL_SITE) {
  return coreai::simd::scan(data, 4, true, T(0), coreai::simd::sum_op{}, at);
}
template <class T>
inline T quad_prefix_exclusive_sum(T data, COREAI_CALL_SITE) {
  return coreai::simd::scan(data, 4, false, T(0), coreai::simd::sum_op{}, at);
}
template <class T>
inline T quad_prefix_inclusive_product(T data, COREAI_CALL_SITE) {
  return coreai::simd::scan(data, 4, true, T(1), coreai::simd::product_op{}, at);
}
template <class T>
inline T quad_prefix_exclusive_product(T data, COREAI_CALL_SITE) {
  return coreai::simd::scan(data, 4, false, T(1), coreai::simd::product_op{}, at);
}

template <class T>
inline T quad_shuffle(T data, unsigned short quad_lane_id, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned lane, std::uint32_t) {
    return quad_lane_id < 4 ? quad_detail::base(lane) + quad_lane_id : lane;
  }, at);
}
template <class T>
inline T quad_broadcast(T data, unsigned short broadcast_lane_id, COREAI_CALL_SITE) {
  return quad_shuffle(data, broadcast_lane_id, at);
}
template <class T>
inline T quad_broadcast_first(T data, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [](unsigned lane, std::uint32_t active) {
    return quad_detail::base(lane) +
           coreai::simd::first_lane((active >> quad_detail::base(lane)) & 0xFu);
  }, at);
}
template <class T>
inline T quad_shuffle_up(T data, unsigned short delta, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned lane, std::uint32_t) {
    return (lane & 3u) >= delta ? lane - delta : lane;
  }, at);
}
template <class T>
inline T quad_shuffle_down(T data, unsigned short delta, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned lane, std::uint32_t) {
    return (lane & 3u) + delta < 4 ? lane + delta : lane;
  }, at);
}
template <class T>
inline T quad_shuffle_xor(T data, unsigned short mask, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned lane, std::uint32_t) {
    const unsigned q = (lane & 3u) ^ mask;
    return q < 4 ? quad_detail::base(lane) + q : lane;
  }, at);
}
template <class T>
inline T quad_shuffle_rotate_up(T data, unsigned short delta, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned lane, std::uint32_t) {
    return quad_detail::base(lane) + ((lane & 3u) + 4u - (delta % 4u)) % 4u;
  }, at);
}
template <class T>
inline T quad_shuffle_rotate_down(T data, unsigned short delta, COREAI_CALL_SITE) {
  return coreai::simd::read_or_own(data, [=](unsigned lane, std::uint32_t) {
    return quad_detail::base(lane) + ((lane & 3u) + delta) % 4u;
  }, at);
}

template <class T>
inline T quad_shuffle_and_fill_up(T data, T filling_data, unsigned short delta,
                                  unsigned short modulo = 4, COREAI_CALL_SITE) {
  return coreai::simd::shuffle_and_fill_up(data, filling_data, delta, modulo, 4, at);
}
template <class T>
inline T quad_shuffle_and_fill_down(T data, T filling_data, unsigned short delta,
                                    unsigned short modulo = 4, COREAI_CALL_SITE) {
  return coreai::simd::shuffle_and_fill_down(data, filling_data, delta, modulo, 4, at);
}

inline quad_vote quad_ballot(bool expr, COREAI_CALL_SITE) {
  const coreai::simd::ballot_bits b = coreai::simd::ballot(expr, 4, at);
  return quad_vote(static_cast<quad_vote::vote_t>(b.bits),
                   static_cast<quad_vote::vote_t>(b.active));
}
inline quad_vote quad_active_threads_mask(COREAI_CALL_SITE) {
  const auto active =
      static_cast<quad_vote::vote_t>(quad_detail::active_in_quad(coreai::simd::meet(at)));
  return quad_vote(active, active);
}
inline bool quad_all(bool expr, COREAI_CALL_SITE) { return quad_ballot(expr, at).all(); }
inline bool quad_any(bool expr, COREAI_CALL_SITE) { return quad_ballot(expr, at).any(); }
inline bool quad_is_first(COREAI_CALL_SITE) {
  const coreai::simd::lanes_state s = coreai::simd::meet(at);
  return quad_detail::base(s.lane) + coreai::simd::first_lane(quad_detail::active_in_quad(s)) ==
         s.lane;
}

}  // namespace metal

#endif  // COREAI_MSL_SYNC_H
