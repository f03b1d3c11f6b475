// What the JIT's generated entry shim uses to call a kernel: binding the
// launcher's argument pointers to the kernel's parameters, the values of the
// thread attributes, and the loop over the threads of one threadgroup.
#ifndef COREAI_MSL_ENTRY_H
#define COREAI_MSL_ENTRY_H

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu_abi.h"

#define COREAI_CPU_EXPORT __attribute__((visibility("default")))

namespace coreai {

// Type of parameter I of a kernel function (clang's pack indexing builtin:
// <tuple> would add a tenth to every compile without the precompiled prelude).
template <class F, std::size_t I>
struct param;
template <class... P, std::size_t I>
struct param<void (*)(P...), I> {
  using type = __type_pack_element<I, P...>;
};
template <class F, std::size_t I>
using param_t = typename param<F, I>::type;

// The launcher passes every buffer parameter as a pointer: a tensor's data for
// `device T*`, the value's address for `constant T&` (scalars, 0-d tensors).
template <class P>
inline P bind_arg(void* arg) {
  if constexpr (std::is_pointer_v<P>) {
    return static_cast<P>(arg);
  } else {
    static_assert(std::is_reference_v<P>,
                  "a kernel buffer parameter must be a pointer or a constant reference");
    return *static_cast<std::remove_reference_t<P>*>(arg);
  }
}

// Loop mode binds every argument once per group, into locals of the group
// loop. A pointer is held by value; a constant reference (a scalar or a 0-d
// tensor, read-only) is held as a copy of its value. The kernel body then
// reads values that the compiler knows are private to the loop and always
// readable, so it hoists them out of the loop over threads even when the body
// uses them only behind a branch (a bounds check).
template <class P>
struct held_arg {
  P value;
  explicit held_arg(void* arg) : value(bind_arg<P>(arg)) {}
  P get() const { return value; }
};
template <class T>
struct held_arg<const T&> {
  T value;
  explicit held_arg(void* arg) : value(bind_arg<const T&>(arg)) {}
  const T& get() const { return value; }
};

// Metadata buffers up to this many entries are copied into the group loop's
// stack frame, for the same reason; longer ones are read where they are.
inline constexpr std::uint32_t kHeldMetaEntries = 128;

template <class T>
struct attr_lanes {
  static constexpr int count = 1;
  using element = T;
};
template <class E, int N>
struct attr_lanes<E __attribute__((ext_vector_type(N)))> {
  static constexpr int count = N;
  using element = E;
};

// A thread attribute's value; converts to the type the kernel declared it with
// (uint, ushort, or their 2- and 3-vectors; a scalar takes the x component).
struct attr_value {
  std::uint32_t x, y, z;

  template <class T>
  operator T() const {
    using E = typename attr_lanes<T>::element;
    static_assert(std::is_same_v<E, unsigned int> || std::is_same_v<E, unsigned short>,
                  "a thread attribute must be declared as uint, ushort, or a 2- or 3-vector of "
                  "them (uint2, uint3, ushort2, ushort3)");
    constexpr int n = attr_lanes<T>::count;
    static_assert(n <= 3, "a thread attribute has at most 3 components (uint3)");
    if constexpr (n == 1) {
      return static_cast<T>(x);
    } else {
      T v{};
      v[0] = static_cast<E>(x);
      v[1] = static_cast<E>(y);
      if constexpr (n == 3) v[2] = static_cast<E>(z);
      return v;
    }
  }
};

inline constexpr std::uint32_t kSimdWidth = COREAI_CPU_SIMD_WIDTH;
inline constexpr std::uint32_t kQuadWidth = 4;

inline std::uint32_t groups_of(std::uint32_t threads, std::uint32_t width) {
  return (threads + width - 1) / width;
}

// One function per compute-kernel attribute of the Metal Shading Language;
// the JIT calls attr_<name>(group, thread) for each declared parameter.
using group_t = coreai_cpu_group;
using thread_t = coreai_cpu_thread;
inline attr_value attr_thread_position_in_grid(const group_t& g, const thread_t& t) {
  return {g.position[0] * g.dispatch_size[0] + t.position[0],
          g.position[1] * g.dispatch_size[1] + t.position[1],
          g.position[2] * g.dispatch_size[2] + t.position[2]};
}
inline attr_value attr_thread_position_in_threadgroup(const group_t&, const thread_t& t) {
  return {t.position[0], t.position[1], t.position[2]};
}
inline attr_value attr_threadgroup_position_in_grid(const group_t& g, const thread_t&) {
  return {g.position[0], g.position[1], g.position[2]};
}
inline attr_value attr_threads_per_grid(const group_t& g, const thread_t&) {
  return {g.grid[0], g.grid[1], g.grid[2]};
}
inline attr_value attr_grid_size(const group_t& g, const thread_t&) {
  return {g.grid[0], g.grid[1], g.grid[2]};
}
inline attr_value attr_grid_origin(const group_t&, const thread_t&) { return {0, 0, 0}; }
inline attr_value attr_threads_per_threadgroup(const group_t& g, const thread_t&) {
  return {g.size[0], g.size[1], g.size[2]};
}
inline attr_value attr_dispatch_threads_per_threadgroup(const group_t& g, const thread_t&) {
  return {g.dispatch_size[0], g.dispatch_size[1], g.dispatch_size[2]};
}
inline attr_value attr_threadgroups_per_grid(const group_t& g, const thread_t&) {
  return {g.groups_per_grid[0], g.groups_per_grid[1], g.groups_per_grid[2]};
}
inline attr_value attr_thread_index_in_threadgroup(const group_t&, const thread_t& t) {
  return {t.index, 0, 0};
}
inline attr_value attr_thread_index_in_simdgroup(const group_t&, const thread_t& t) {
  return {t.index % kSimdWidth, 0, 0};
}
inline attr_value attr_simdgroup_index_in_threadgroup(const group_t&, const thread_t& t) {
  return {t.index / kSimdWidth, 0, 0};
}
inline attr_value attr_threads_per_simdgroup(const group_t&, const thread_t&) {
  return {kSimdWidth, 0, 0};
}
inline attr_value attr_thread_execution_width(const group_t&, const thread_t&) {
  return {kSimdWidth, 0, 0};
}
inline attr_value attr_simdgroups_per_threadgroup(const group_t& g, const thread_t&) {
  return {groups_of(g.thread_count, kSimdWidth), 0, 0};
}
inline attr_value attr_dispatch_simdgroups_per_threadgroup(const group_t& g, const thread_t&) {
  return {groups_of(g.dispatch_size[0] * g.dispatch_size[1] * g.dispatch_size[2], kSimdWidth), 0,
          0};
}
inline attr_value attr_quadgroup_index_in_threadgroup(const group_t&, const thread_t& t) {
  return {t.index / kQuadWidth, 0, 0};
}
inline attr_value attr_thread_index_in_quadgroup(const group_t&, const thread_t& t) {
  return {t.index % kQuadWidth, 0, 0};
}
inline attr_value attr_quadgroups_per_threadgroup(const group_t& g, const thread_t&) {
  return {groups_of(g.thread_count, kQuadWidth), 0, 0};
}
inline attr_value attr_dispatch_quadgroups_per_threadgroup(const group_t& g, const thread_t&) {
  return {groups_of(g.dispatch_size[0] * g.dispatch_size[1] * g.dispatch_size[2], kQuadWidth), 0,
          0};
}

// Loop mode: every thread of the group in index order (x fastest).
template <class F>
inline void for_each_thread(const coreai_cpu_group& g, F&& run) {
  coreai_cpu_thread t;
  t.index = 0;
  for (std::uint32_t z = 0; z < g.size[2]; ++z) {
    for (std::uint32_t y = 0; y < g.size[1]; ++y) {
      for (std::uint32_t x = 0; x < g.size[0]; ++x) {
        t.position[0] = x;
        t.position[1] = y;
        t.position[2] = z;
        run(t);
        ++t.index;
      }
    }
  }
}

}  // namespace coreai

#endif  // COREAI_MSL_ENTRY_H
