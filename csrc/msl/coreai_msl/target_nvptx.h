// The NVPTX target's primitives (see sync.h for the list;
// sync.h includes this header after the definitions it uses): threadgroup memory,
// thread positions, barriers and SIMD-group exchanges of the CUDA backend.
//
// A Metal threadgroup is a CUDA block launched with its threads in one
// dimension, so that CUDA's warps are Metal's SIMD-groups: lane =
// thread_index_in_threadgroup % 32, and the lanes of a partial SIMD-group are
// the low lanes of its warp. The launcher gives every block the requested
// threadgroup size; a block at the grid edge holds fewer Metal threads
// (dispatchThreads), and its surplus CUDA threads exit before the kernel runs.
// An exited thread counts as arrived at every later barrier of its block (PTX
// ISA, `exit`), so the edge group's barriers still hold, and it is absent from
// the active mask of its warp, so SIMD-group functions skip it, as on Apple GPUs.
//
// SIMD-group functions run over the active lanes: the lanes that execute the
// call together (`activemask`). Shuffles move 32-bit words; a lane that would
// read an inactive lane reads its own value instead.
#ifndef COREAI_MSL_TARGET_NVPTX_H
#define COREAI_MSL_TARGET_NVPTX_H

#include <cstdint>

#include "cpu_abi.h"
#include "cuda_abi.h"

// `threadgroup` storage after the JIT's rewrite (source_scan.h): CUDA shared
// memory, one copy per block. Metal allows at most 32 KiB of it, within the
// 48 KiB a kernel may declare statically.
#define COREAI_THREADGROUP_STORAGE __attribute__((shared))

namespace coreai::target {

// barrier.sync rather than bar.sync: the threads of a warp may reach the
// barrier apart (some may have returned early), which the aligned form forbids.
inline void threadgroup_barrier() { __nvvm_barrier_sync(0); }
inline void simdgroup_barrier() { __nvvm_bar_warp_sync(__nvvm_activemask()); }

// Fills in the caller's threadgroup and thread as Metal's dispatchThreads
// defines them, and returns false for a CUDA thread past the end of its
// (edge) threadgroup: it stands for no Metal thread and must exit at once.
inline bool locate(const coreai_cuda_dispatch& d, coreai_cpu_group& g, coreai_cpu_thread& t) {
  // The special registers read as int; they hold unsigned values.
  const auto sreg = [](int value) { return static_cast<std::uint32_t>(value); };
  if (d.folded == 0) {
    g.position[0] = sreg(__nvvm_read_ptx_sreg_ctaid_x());
    g.position[1] = sreg(__nvvm_read_ptx_sreg_ctaid_y());
    g.position[2] = sreg(__nvvm_read_ptx_sreg_ctaid_z());
  } else {
    const std::uint64_t linear =
        sreg(__nvvm_read_ptx_sreg_ctaid_x()) +
        std::uint64_t{sreg(__nvvm_read_ptx_sreg_ctaid_y())} * sreg(__nvvm_read_ptx_sreg_nctaid_x());
    // The folded grid rounds up: its last blocks stand for no threadgroup.
    if (linear >= std::uint64_t{d.groups[0]} * d.groups[1] * d.groups[2]) return false;
    g.position[0] = static_cast<std::uint32_t>(linear % d.groups[0]);
    g.position[1] = static_cast<std::uint32_t>(linear / d.groups[0] % d.groups[1]);
    g.position[2] = static_cast<std::uint32_t>(linear / d.groups[0] / d.groups[1]);
  }
  for (int k = 0; k < 3; ++k) {
    g.dispatch_size[k] = d.group[k];
    g.grid[k] = d.grid[k];
    g.groups_per_grid[k] = d.groups[k];
    const std::uint32_t left = d.grid[k] - g.position[k] * d.group[k];
    g.size[k] = left < d.group[k] ? left : d.group[k];
  }
  g.thread_count = g.size[0] * g.size[1] * g.size[2];
  g.meta_count = 0;  // the metadata is a kernel parameter of known size
  const std::uint32_t index = sreg(__nvvm_read_ptx_sreg_tid_x());
  if (index >= g.thread_count) return false;
  t.index = index;
  if (g.size[0] == g.thread_count) {  // one-dimensional groups: no division
    t.position[0] = index;
    t.position[1] = 0;
    t.position[2] = 0;
  } else {
    t.position[0] = index % g.size[0];
    t.position[1] = index / g.size[0] % g.size[1];
    t.position[2] = index / (g.size[0] * g.size[1]);
  }
  return true;
}

}  // namespace coreai::target

namespace coreai::simd {

namespace nvptx {

inline unsigned lane_id() { return static_cast<unsigned>(__nvvm_read_ptx_sreg_laneid()); }
inline std::uint32_t active_lanes() { return static_cast<std::uint32_t>(__nvvm_activemask()); }

inline constexpr std::uint32_t kAllLanes = 0xffffffffu;

// Every lane of `active` calls this at once; each reads `value` of lane `from`
// (which must be in `active`). Values of any size travel as 32-bit words.
template <class T>
inline T shuffle_from(std::uint32_t active, const T& value, unsigned from) {
  constexpr unsigned words = (sizeof(T) + 3) / 4;
  std::uint32_t w[words] = {};
  __builtin_memcpy(w, &value, sizeof(T));
  for (unsigned i = 0; i < words; ++i) {
    w[i] = static_cast<std::uint32_t>(
        __nvvm_shfl_sync_idx_i32(active, static_cast<int>(w[i]), static_cast<int>(from), 0x1f));
  }
  T out;
  __builtin_memcpy(&out, w, sizeof(T));
  return out;
}

// The same for a full warp reading lane (own lane ^ distance).
template <class T>
inline T shuffle_xor(const T& value, unsigned distance) {
  constexpr unsigned words = (sizeof(T) + 3) / 4;
  std::uint32_t w[words] = {};
  __builtin_memcpy(w, &value, sizeof(T));
  for (unsigned i = 0; i < words; ++i) {
    w[i] = static_cast<std::uint32_t>(__nvvm_shfl_sync_bfly_i32(
        kAllLanes, static_cast<int>(w[i]), static_cast<int>(distance), 0x1f));
  }
  T out;
  __builtin_memcpy(&out, w, sizeof(T));
  return out;
}

}  // namespace nvptx

inline lanes_state meet() { return {nvptx::lane_id(), nvptx::active_lanes()}; }

template <class T, class Source>
inline fetched<T> fetch(const T& value, Source source) {
  const std::uint32_t active = nvptx::active_lanes();
  const unsigned lane = nvptx::lane_id();
  const unsigned from = source(lane, active);
  const bool found = is_active(active, from);
  return {nvptx::shuffle_from(active, value, found ? from : lane), found, lane};
}

// The xor butterfly: after the step of distance s, every lane holds op over
// the active lanes of its aligned block of 2s lanes, the lower block's value
// first (the order of the CPU's tree, so float results match bit for bit).
template <class T, class Op>
inline T reduce(const T& value, unsigned width, Op op) {
  const std::uint32_t active = nvptx::active_lanes();
  const unsigned lane = nvptx::lane_id();
  T acc = value;
  if (active == nvptx::kAllLanes) {
    for (unsigned s = 1; s < width; s *= 2) {
      const T other = nvptx::shuffle_xor(acc, s);
      acc = (lane & s) != 0 ? op(other, acc) : op(acc, other);
    }
    return acc;
  }
  for (unsigned s = 1; s < width; s *= 2) {
    // The partner block's value is held by each of its active lanes.
    const unsigned block = (lane ^ s) & ~(s - 1);
    const std::uint32_t present = active & (((1u << s) - 1u) << block);
    const T other = nvptx::shuffle_from(active, acc, present != 0 ? first_lane(present) : lane);
    if (present != 0) acc = (lane & s) != 0 ? op(other, acc) : op(acc, other);
  }
  return acc;
}

// In lane order, one lane at a time, as the CPU adds: the same rounding.
template <class T, class Op>
inline T scan(const T& value, unsigned width, bool inclusive, T identity, Op op) {
  const std::uint32_t active = nvptx::active_lanes();
  const unsigned lane = nvptx::lane_id();
  const unsigned first = lane & ~(width - 1);
  const unsigned end = inclusive ? lane + 1 : lane;
  T acc = identity;
  for (unsigned i = 0; i < width; ++i) {
    const unsigned from = first + i;
    const bool present = is_active(active, from);
    const T v = nvptx::shuffle_from(active, value, present ? from : lane);
    if (present && from < end) acc = op(acc, v);
  }
  return acc;
}

inline ballot_bits ballot(bool predicate, unsigned width) {
  const std::uint32_t active = nvptx::active_lanes();
  const unsigned first = nvptx::lane_id() & ~(width - 1);
  const std::uint32_t bits = __nvvm_vote_ballot_sync(active, predicate);
  const std::uint32_t chunk = width >= 32 ? nvptx::kAllLanes : (1u << width) - 1u;
  return {(bits >> first) & chunk, (active >> first) & chunk};
}

}  // namespace coreai::simd

#endif  // COREAI_MSL_TARGET_NVPTX_H
