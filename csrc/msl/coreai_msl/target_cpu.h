// The CPU target's primitives (see sync.h for the list;
// sync.h includes this header after the definitions it uses): threadgroup memory,
// barriers and SIMD-group exchanges of the CPU backend.
//
// Kernels that synchronise run in fiber mode: one fiber per thread of a
// threadgroup, all on one OS thread. A barrier or a SIMD-group primitive hands
// control to the launcher (cpu_abi.h), which resumes the other fibers until the
// ones that must meet have arrived. Only threads that are still running are
// waited for, so barriers inside bounds checks and after an early `return` of
// other threads behave as on the GPU. A SIMD-group primitive publishes each
// lane's value, meets the running lanes of its SIMD-group, then every lane
// computes its own result from all values.
#ifndef COREAI_MSL_TARGET_CPU_H
#define COREAI_MSL_TARGET_CPU_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu_abi.h"
#include "runtime.h"

// `threadgroup` storage after the JIT's rewrite (source_scan.h): private to
// the OS thread that runs the whole group, reused by the next group it runs.
#define COREAI_THREADGROUP_STORAGE static thread_local

namespace coreai::target {

// All fibers of a threadgroup share one OS thread, so program order already
// makes every write visible to the threads resumed after the barrier; the
// memory flags need no extra fence.
inline void threadgroup_barrier() { coreai::g_runtime->threadgroup_barrier(); }
inline void simdgroup_barrier() { coreai::g_runtime->simdgroup_barrier(); }

}  // namespace coreai::target

namespace coreai::simd {

static_assert(kWidth == COREAI_CPU_SIMD_WIDTH, "SIMD-groups are 32 lanes on every target");

namespace cpu {

template <class T>
inline coreai_cpu_simd_view exchange(const T& value) {
  static_assert(sizeof(T) <= COREAI_CPU_SIMD_SLOT_BYTES,
                "SIMD-group functions take scalars and vectors of at most 32 bytes");
  static_assert(std::is_trivially_copyable_v<T>, "SIMD-group functions take scalars and vectors");
  return coreai::g_runtime->simd_exchange(&value, sizeof(T));
}

template <class T>
inline T value_of(const coreai_cpu_simd_view& v, unsigned lane) {
  T out;
  std::memcpy(&out, v.slots + lane * COREAI_CPU_SIMD_SLOT_BYTES, sizeof(T));
  return out;
}

}  // namespace cpu

inline lanes_state meet() {
  const coreai_cpu_simd_view v = coreai::g_runtime->simd_exchange(nullptr, 0);
  return {v.lane, v.active_mask};
}

template <class T, class Source>
inline fetched<T> fetch(const T& value, Source source) {
  const coreai_cpu_simd_view v = cpu::exchange(value);
  const unsigned from = source(v.lane, v.active_mask);
  if (!is_active(v.active_mask, from)) return {value, false, v.lane};
  return {cpu::value_of<T>(v, from), true, v.lane};
}

template <class T, class Op>
inline T reduce(const T& value, unsigned width, Op op) {
  const coreai_cpu_simd_view v = cpu::exchange(value);
  const unsigned first = v.lane & ~(width - 1);
  T values[kWidth];
  bool present[kWidth];
  for (unsigned i = 0; i < width; ++i) {
    present[i] = is_active(v.active_mask, first + i);
    if (present[i]) values[i] = cpu::value_of<T>(v, first + i);
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
  return values[0];  // the caller's own lane is active, so some lane is present
}

template <class T, class Op>
inline T scan(const T& value, unsigned width, bool inclusive, T identity, Op op) {
  const coreai_cpu_simd_view v = cpu::exchange(value);
  const unsigned first = v.lane & ~(width - 1);
  const unsigned end = inclusive ? v.lane + 1 : v.lane;
  T acc = identity;
  for (unsigned i = first; i < end; ++i) {
    if (is_active(v.active_mask, i)) acc = op(acc, cpu::value_of<T>(v, i));
  }
  return acc;
}

template <class T>
struct gathered {
  coreai_cpu_simd_view view;
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

// One exchange; the values stay readable until the lanes' next exchange but
// one, so a gathered value is read before the next SIMD-group function.
template <class T>
inline gathered<T> gather(const T& value) {
  const coreai_cpu_simd_view v = cpu::exchange(value);
  return {v, value, v.lane, v.active_mask};
}

inline ballot_bits ballot(bool predicate, unsigned width) {
  const coreai_cpu_simd_view v = cpu::exchange(predicate);
  const unsigned first = v.lane & ~(width - 1);
  ballot_bits out{0, 0};
  for (unsigned i = 0; i < width; ++i) {
    if (!is_active(v.active_mask, first + i)) continue;
    out.active |= 1u << i;
    if (cpu::value_of<bool>(v, first + i)) out.bits |= 1u << i;
  }
  return out;
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
    const coreai::simd::lanes_state s = coreai::simd::meet();
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
