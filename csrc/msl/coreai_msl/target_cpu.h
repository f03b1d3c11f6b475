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

}  // namespace coreai::simd

#endif  // COREAI_MSL_TARGET_CPU_H
