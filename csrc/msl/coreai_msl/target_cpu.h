// The CPU target's primitives (sync.h lists them; sync.h includes this header
// after the definitions it uses): threadgroup memory, barriers, SIMD-group
// exchanges and cooperative-tensor scopes of the CPU backend.
//
// Kernels that synchronise run in fiber mode (fiber_runtime.h): a SIMD-group
// primitive publishes the lane's value and waits at a rendezvous with the
// lanes of its SIMD-group that call from the same site; once released, the
// first lane to read computes the result for all of them (a reduction, a scan,
// a ballot, a matrix product) and the others read their share. The JIT
// compiles kernels that it runs in loop mode with COREAI_CPU_FIBER_MODE 0:
// there the primitives report the call (the source scan missed it) and answer
// as a SIMD-group of one lane, so the kernel can finish.
#ifndef COREAI_MSL_TARGET_CPU_H
#define COREAI_MSL_TARGET_CPU_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "call_site.h"
#include "cpu_abi.h"
#include "fiber_runtime.h"
#include "runtime.h"

// `threadgroup` storage after the JIT's rewrite (source_scan.h): private to
// the OS thread that runs the whole group, reused by the next group it runs.
#define COREAI_THREADGROUP_STORAGE static thread_local

namespace coreai::simd {

static_assert(kWidth == COREAI_CPU_SIMD_WIDTH, "SIMD-groups are 32 lanes");

namespace cpu {

// One exchange as the calling lane sees it once the rendezvous released it.
struct view {
  coreai_cpu_simdgroup* group;  // view[L]: lane L's value, for L in `active`
  unsigned lane;                // the caller's
  std::uint32_t active;         // the lanes that took part
};

// What a loop-mode kernel gets: a SIMD-group of one lane.
[[gnu::cold]] inline view solo(const void* value, std::uint32_t size, const char* what) {
  coreai::g_runtime->report_loop_mode_call(what);
  thread_local coreai_cpu_simdgroup lone;
  if (size > 0) std::memcpy(lone.view[0], value, size);
  lone.view_active = 1;
  lone.combined_ready = 0;
  return {&lone, 0, 1};
}

// The group-loop form (group_form.h) evaluates a SIMD-group function for
// each lane of a SIMD-group in turn, twice: a first pass records the values
// each lane exchanges, in the order its primitives ask (every Metal function
// above exchanges the same values in the same order, whatever they return),
// a second answers each lane from all the recorded values. The functions run
// unchanged, so the results are fiber mode's.
struct replay {
  static constexpr unsigned kExchanges = 4;  // at most two per Metal function
  coreai_cpu_simdgroup groups[kExchanges];
  std::uint32_t active = 0;  // the SIMD-group's running lanes
  unsigned lane = 0;         // the lane evaluating now
  unsigned next = 0;         // its next exchange
  bool recording = true;

  view exchange(const void* value, std::uint32_t size) {
    coreai_cpu_simdgroup& g = groups[next++ % kExchanges];
    if (recording) {
      if (size > 0) std::memcpy(g.view[lane], value, size);
      g.view_active = active;
      g.combined_ready = 0;
      // The other lanes' values are not known yet: the lane alone.
      return {&g, lane, 1u << lane};
    }
    return {&g, lane, active};
  }
};
inline thread_local replay* tls_replay = nullptr;

inline view rendezvous(const void* value, std::uint32_t size, site at) {
#if COREAI_CPU_FIBER_MODE
  coreai_cpu_lane* me = coreai::fiber::current_lane();
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMD_FUNCTION, 0);  // debug mode's checks (runtime.h)
  coreai_cpu_simdgroup* g =
      const_cast<coreai_cpu_simdgroup*>(coreai::fiber::rendezvous(me, value, size, at.order));
  COREAI_MSL_DEBUG_SYNC(COREAI_CPU_SYNC_SIMD_FUNCTION, 1);
  return {g, coreai::fiber::lane_of(me), g->view_active};
#else
  (void)at;
  if (replay* r = tls_replay) return r->exchange(value, size);
  return solo(value, size, "a SIMD-group or quad-group function");
#endif
}

template <class T>
inline view exchange(const T& value, site at) {
  static_assert(sizeof(T) <= COREAI_CPU_SIMD_SLOT_BYTES,
                "SIMD-group functions take scalars and vectors of at most 32 bytes");
  static_assert(std::is_trivially_copyable_v<T>, "SIMD-group functions take scalars and vectors");
  return rendezvous(&value, sizeof(T), at);
}

inline bool active(const view& v, unsigned lane) {
  return lane < kWidth && ((v.active >> lane) & 1u) != 0;
}

template <class T>
inline T value_of(const view& v, unsigned lane) {
  T out;
  std::memcpy(&out, v.group->view[lane], sizeof(T));
  return out;
}

// The result of an exchange that its first reader computes for every lane:
// `compute(out)` runs once per exchange, whoever reads first.
template <class R, class F>
inline const R& combined(const view& v, F compute) {
  static_assert(sizeof(R) <= COREAI_CPU_SIMD_COMBINED_BYTES, "the combined result is too large");
  R* out = reinterpret_cast<R*>(v.group->combined);
  if (v.group->combined_ready == 0) {
    compute(*out);
    v.group->combined_ready = 1;
  }
  return *out;
}

// op over the lanes of `values` marked present, pairing neighbours at
// distance 1, 2, 4, ... (the xor butterfly); absent lanes are skipped. Both
// forms reduce through this function: the same order, the same bits.
template <class T, class Op>
inline T butterfly_of(T* values, bool* present, unsigned width, Op op) {
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
  return values[0];
}

// op over the active lanes of [first, first + width) of an exchange.
template <class T, class Op>
inline T butterfly(const view& v, unsigned first, unsigned width, Op op) {
  T values[kWidth];
  bool present[kWidth];
  for (unsigned i = 0; i < width; ++i) {
    present[i] = active(v, first + i);
    if (present[i]) values[i] = value_of<T>(v, first + i);
  }
  return butterfly_of(values, present, width, op);
}

template <class T>
struct per_lane {
  T value[kWidth];
};

}  // namespace cpu

// The caller's lane, without a rendezvous (what a lane does alone, such as
// loading its own elements of a SIMD-group matrix).
inline unsigned own_lane() {
#if COREAI_CPU_FIBER_MODE
  return coreai::fiber::lane_of(coreai::fiber::current_lane());
#else
  coreai::g_runtime->report_loop_mode_call("a SIMD-group matrix function");
  return 0;
#endif
}

inline lanes_state meet(site at) {
  const cpu::view v = cpu::rendezvous(nullptr, 0, at);
  return {v.lane, v.active};
}

template <class T, class Source>
inline fetched<T> fetch(const T& value, Source source, site at) {
  const cpu::view v = cpu::exchange(value, at);
  const unsigned from = source(v.lane, v.active);
  if (!cpu::active(v, from)) return {value, false, v.lane};
  return {cpu::value_of<T>(v, from), true, v.lane};
}

template <class T, class Op>
inline T reduce(const T& value, unsigned width, Op op, site at) {
  const cpu::view v = cpu::exchange(value, at);
  const auto& chunks = cpu::combined<cpu::per_lane<T>>(v, [&](cpu::per_lane<T>& out) {
    for (unsigned first = 0; first < kWidth; first += width) {
      if ((v.active >> first) & ((std::uint64_t{1} << width) - 1)) {
        out.value[first / width] = cpu::butterfly<T>(v, first, width, op);
      }
    }
  });
  return chunks.value[v.lane / width];
}

template <class T, class Op>
inline T scan(const T& value, unsigned width, bool inclusive, T identity, Op op, site at) {
  const cpu::view v = cpu::exchange(value, at);
  const auto& prefixes = cpu::combined<cpu::per_lane<T>>(v, [&](cpu::per_lane<T>& out) {
    for (unsigned first = 0; first < kWidth; first += width) {
      T acc = identity;
      for (unsigned i = first; i < first + width; ++i) {
        if (!cpu::active(v, i)) continue;
        const T own = cpu::value_of<T>(v, i);
        out.value[i] = inclusive ? op(acc, own) : acc;
        acc = op(acc, own);
      }
    }
  });
  return prefixes.value[v.lane];
}

inline ballot_bits ballot(bool predicate, unsigned width, site at) {
  const cpu::view v = cpu::exchange(predicate, at);
  const std::uint32_t votes = cpu::combined<std::uint32_t>(v, [&](std::uint32_t& out) {
    out = 0;
    for (std::uint32_t m = v.active; m != 0; m &= m - 1) {
      const unsigned l = static_cast<unsigned>(__builtin_ctz(m));
      if (cpu::value_of<bool>(v, l)) out |= 1u << l;
    }
  });
  const unsigned first = v.lane & ~(width - 1);
  const std::uint32_t chunk = width == kWidth ? ~0u : (1u << width) - 1;
  return {(votes >> first) & chunk, (v.active >> first) & chunk};
}

// One exchange whose values the caller reads lane by lane (a SIMD-group
// matrix product on a target that computes per lane, a cooperative-tensor
// reduction). The values stay readable until the lanes' next exchange.
template <class T>
struct gathered {
  cpu::view view;
  T own;
  unsigned lane;
  std::uint32_t active;

  T from(unsigned source) const {
    return is_active(active, source) ? cpu::value_of<T>(view, source) : own;
  }
  template <class Project>
  auto from(unsigned source, Project project) const {
    return project(from(source));
  }
};

template <class T>
inline gathered<T> gather(const T& value, site at) {
  const cpu::view v = cpu::exchange(value, at);
  return {v, value, v.lane, v.active};
}

// The CPU has no matrix units: simdgroup_matrix.h computes every product.
template <class TA, class TB>
inline constexpr bool has_matrix_units = false;
template <class PA, class PB>
inline bool multiply_8x8_on_matrix_units(const PA&, const PB&, float, float, float&, float&) {
  return false;
}

}  // namespace coreai::simd

namespace coreai::target {

inline void threadgroup_barrier() {
#if COREAI_CPU_FIBER_MODE
  coreai::fiber::threadgroup_barrier(coreai::fiber::current_lane());
#else
  coreai::g_runtime->report_loop_mode_call("threadgroup_barrier");
#endif
}

// The active lanes of the SIMD-group meet; in lockstep they were together
// anyway, so what it orders is threadgroup memory, which the meeting does.
inline void simdgroup_barrier(simd::site at) {
#if COREAI_CPU_FIBER_MODE
  coreai::fiber::rendezvous(coreai::fiber::current_lane(), nullptr, 0, at.order);
#else
  (void)at;
  coreai::g_runtime->report_loop_mode_call("simdgroup_barrier");
#endif
}

// ---- cooperative tensors (cooperative_tensor.h) -----------------------------

// A thread's number among the `count` threads of an execution scope.
struct scope_member {
  unsigned index = 0;
  unsigned count = 1;
};

// Heap storage that grows and copies (the standard containers' headers would
// double the time every kernel takes to compile).
template <class T>
class buffer {
 public:
  buffer() = default;
  buffer(const buffer& o) { assign(o.data_, o.size_); }
  buffer& operator=(const buffer& o) {
    if (this != &o) assign(o.data_, o.size_);
    return *this;
  }
  ~buffer() { delete[] data_; }

  void resize(std::size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return;
    }
    T* grown = new T[n]();
    for (std::size_t i = 0; i < size_; ++i) grown[i] = data_[i];
    delete[] data_;
    data_ = grown;
    size_ = capacity_ = n;
  }
  void assign(const T* from, std::size_t n) {
    resize(n);
    for (std::size_t i = 0; i < n; ++i) data_[i] = from[i];
  }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* data() { return data_; }
  std::size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

// A thread's elements of a tile of `Elements` elements: as many as the
// scope's running threads leave it, so the storage grows at run time.
template <class T, int Elements, int Simdgroups>
using tile_storage = buffer<T>;

// What the threads of the running threadgroup share (all of them run on one
// OS thread, so thread_local storage is the group's).
struct group_shared {
  const void* stacks[1024] = {};  // at most 1024 threads in a threadgroup
  unsigned stack_count = 0;
  buffer<unsigned char> scratch;
};
inline thread_local group_shared g_shared;

// Scratch memory of at least `Bytes` bytes that the threadgroup's threads
// share. Every thread of the scope calls it between the same two barriers.
template <std::size_t Bytes>
inline unsigned char* group_scratch() {
  if (g_shared.scratch.size() < Bytes) g_shared.scratch.resize(Bytes);
  return g_shared.scratch.data();
}

// The caller's number in a scope of `Simdgroups` SIMD-groups (0: the thread
// alone, 1: its SIMD-group, more: the threadgroup) among the scope's running
// threads. A scope of several SIMD-groups numbers every running thread of the
// threadgroup: each publishes where its stack is, then ranks itself among the
// published addresses (each fiber has a stack of its own, so the numbering is
// the same at every call). The list is emptied after a third barrier: nobody
// publishes again before every thread has passed it, because publishing needs
// the first barrier, which needs every thread.
template <int Simdgroups>
inline scope_member join_scope() {
  if constexpr (Simdgroups == 0) {
    return {0, 1};
  } else if constexpr (Simdgroups == 1) {
    const coreai::simd::lanes_state s = coreai::simd::meet(coreai::simd::site::here());
    const std::uint32_t below = s.active & ((std::uint32_t{1} << s.lane) - 1u);
    return {static_cast<unsigned>(__builtin_popcount(below)),
            static_cast<unsigned>(__builtin_popcount(s.active))};
  } else {
    const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    threadgroup_barrier();
    g_shared.stacks[g_shared.stack_count++] = __builtin_frame_address(0);
    threadgroup_barrier();
    scope_member me{0, g_shared.stack_count};
    for (unsigned i = 0; i < g_shared.stack_count; ++i) {
      me.index += reinterpret_cast<std::uintptr_t>(g_shared.stacks[i]) < here;
    }
    threadgroup_barrier();
    g_shared.stack_count = 0;
    return me;
  }
}

}  // namespace coreai::target

#endif  // COREAI_MSL_TARGET_CPU_H
