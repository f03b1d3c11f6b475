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

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "call_site.h"
#include "cpu_abi.h"
#include "cuda_abi.h"

// `threadgroup` storage after the JIT's rewrite (source_scan.h): CUDA shared
// memory, one copy per block. Metal allows at most 32 KiB of it, within the
// 48 KiB a kernel may declare statically. Each array starts at a multiple of
// 16 bytes (padding between arrays, nothing a kernel can rely on or see but
// its addresses): a vector access to a tile at an offset that is a multiple
// of its size is then aligned, which the CUDA backend reads off the IR
// rather than testing at run time (cuda/known_alignment.h).
#define COREAI_THREADGROUP_STORAGE static __attribute__((shared, aligned(16)))

namespace coreai::target {

// barrier.sync rather than bar.sync: the threads of a warp may reach the
// barrier apart (some may have returned early), which the aligned form forbids.
inline void threadgroup_barrier() { __nvvm_barrier_sync(0); }
inline void simdgroup_barrier(simd::site) { __nvvm_bar_warp_sync(__nvvm_activemask()); }

// A thread's place in its threadgroup from its index, by the group's size.
inline void place(const coreai_cpu_group& g, std::uint32_t index, coreai_cpu_thread& t) {
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
}

// The steps form (csrc/cpu/group_form.h, cuda_steps_form): a threadgroup of
// T Metal threads runs on a block of T / coreai_steps CUDA threads, and step k
// of CUDA thread c runs Metal thread k * blockDim + c (the launcher takes it
// for whole threadgroups only: every step's thread exists).
inline std::uint32_t cuda_thread() { return static_cast<std::uint32_t>(__nvvm_read_ptx_sreg_tid_x()); }
inline std::uint32_t cuda_threads() {
  return static_cast<std::uint32_t>(__nvvm_read_ptx_sreg_ntid_x());
}
inline coreai_cpu_thread thread_at(const coreai_cpu_group& g, std::uint32_t index) {
  coreai_cpu_thread t;
  place(g, index, t);
  return t;
}

// Fills in the caller's threadgroup and thread as Metal's dispatchThreads
// defines them, and returns false for a CUDA thread past the end of its
// (edge) threadgroup: it stands for no Metal thread and must exit at once.
//
// Everything here runs before the kernel's first load, and a thread of a
// one-element-per-thread kernel does little else: where every block is a
// whole threadgroup (the launcher says so), the group is the block and the
// thread its CUDA thread, with no arithmetic on the way to the kernel.
inline bool locate(const coreai_cuda_dispatch& d, coreai_cpu_group& g, coreai_cpu_thread& t) {
  // The special registers read as int; they hold unsigned values.
  const auto sreg = [](int value) { return static_cast<std::uint32_t>(value); };
  g.meta_count = 0;  // the metadata is a kernel parameter of known size
  for (int k = 0; k < 3; ++k) {
    g.dispatch_size[k] = d.group[k];
    g.grid[k] = d.grid[k];
    g.groups_per_grid[k] = d.groups[k];
  }
  const std::uint32_t index = sreg(__nvvm_read_ptx_sreg_tid_x());
  if (d.whole_groups != 0) {
    g.position[0] = sreg(__nvvm_read_ptx_sreg_ctaid_x());
    g.position[1] = sreg(__nvvm_read_ptx_sreg_ctaid_y());
    g.position[2] = sreg(__nvvm_read_ptx_sreg_ctaid_z());
    for (int k = 0; k < 3; ++k) g.size[k] = d.group[k];
    g.thread_count = d.threads;
    place(g, index, t);
    return true;
  }
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
    const std::uint32_t left = d.grid[k] - g.position[k] * d.group[k];
    g.size[k] = left < d.group[k] ? left : d.group[k];
  }
  g.thread_count = g.size[0] * g.size[1] * g.size[2];
  if (index >= g.thread_count) return false;
  place(g, index, t);
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

// The call site (`at`, call_site.h) needs no use here: the lanes that run a
// call together are the ones the hardware has converged there.
inline lanes_state meet(site) { return {nvptx::lane_id(), nvptx::active_lanes()}; }

// The caller's lane, without a rendezvous.
inline unsigned own_lane() { return nvptx::lane_id(); }

template <class T, class Source>
inline fetched<T> fetch(const T& value, Source source, site) {
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
inline T reduce(const T& value, unsigned width, Op op, site) {
  const std::uint32_t active = nvptx::active_lanes();
  const unsigned lane = nvptx::lane_id();
  T acc = value;
  if (active == nvptx::kAllLanes) {
    for (unsigned s = 1; s < width; s *= 2) {
      const T other = nvptx::shuffle_xor(acc, s);
      // The lower block's value first, chosen by selects: one application of
      // `op`, and no branch on the lane (which would run both sides in turn).
      const bool upper = (lane & s) != 0;
      const T low = upper ? other : acc;
      const T high = upper ? acc : other;
      acc = op(low, high);
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
inline T scan(const T& value, unsigned width, bool inclusive, T identity, Op op, site) {
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

// Each from() is one shuffle (per 32-bit word) that every active lane makes:
// the lanes call it the same number of times, in the same order.
template <class T>
struct gathered {
  T own;
  unsigned lane;
  std::uint32_t active;

  T from(unsigned source) const {
    return nvptx::shuffle_from(active, own, is_active(active, source) ? source : lane);
  }
  // Only the projected part travels.
  template <class Project>
  auto from(unsigned source, Project project) const {
    return nvptx::shuffle_from(active, project(own), is_active(active, source) ? source : lane);
  }
};

template <class T>
inline gathered<T> gather(const T& value, site) {
  return {value, nvptx::lane_id(), nvptx::active_lanes()};
}

inline ballot_bits ballot(bool predicate, unsigned width, site) {
  const std::uint32_t active = nvptx::active_lanes();
  const unsigned first = nvptx::lane_id() & ~(width - 1);
  const std::uint32_t bits = __nvvm_vote_ballot_sync(active, predicate);
  const std::uint32_t chunk = width >= 32 ? nvptx::kAllLanes : (1u << width) - 1u;
  return {(bits >> first) & chunk, (active >> first) & chunk};
}

// ---- SIMD-group matrices (simdgroup_matrix.h) ---------------------------------

// An 8x8x8 product d = a * b + c on the tensor cores, for half or bfloat a and
// b (both of one type) and float accumulation. Every operand is one lane's
// pair of elements in Apple's layout (simdgroup_matrix.h: lane L holds row
// 4 L4 + 2 L2 + L1, columns 4 L3 + 2 L0 and the next, L_i being bit i of L).
// mma.sync m16n8k8 takes A and C as pairs too, lane L holding row L / 4 and
// columns 2 (L % 4) and the next, so one shuffle re-lays a pair of halves (two
// for floats); B it takes as pairs of rows, which movmatrix's transpose makes
// of the re-laid B. The product's unused rows 8..15 are zero. Needs sm_80 and
// all 32 lanes; false when it cannot run (the caller then computes the
// product itself).
// Whether every SIMD-group of the launch has all 32 lanes (no partial
// SIMD-group at the grid edge). The CUDA backend compiles a kernel that uses
// SIMD-group matrices in one form for each answer and defines this in each
// translation unit, after the headers (cuda/target.cpp); the parameter defers the
// lookup to the kernel's own code. simdgroup_matrix.h says what changes.
template <class T>
struct launch_form;

template <class E>
inline constexpr bool mma_element_v = std::is_same_v<E, _Float16> || std::is_same_v<E, __bf16>;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <class TA, class TB>
inline constexpr bool has_matrix_units = mma_element_v<TA> && std::is_same_v<TA, TB>;
#else
template <class TA, class TB>
inline constexpr bool has_matrix_units = false;
#endif

namespace nvptx {

// The lane whose Apple-layout pair mma's layout puts in lane L, and back.
inline unsigned apple_to_mma_source(unsigned L) {
  return (L & 0x10u) | ((L & 0x2u) << 2) | ((L & 0x8u) >> 1) | ((L & 0x4u) >> 1) | (L & 0x1u);
}
inline unsigned mma_to_apple_source(unsigned L) {
  return (L & 0x10u) | ((L & 0x4u) << 1) | ((L & 0x2u) << 1) | ((L & 0x8u) >> 2) | (L & 0x1u);
}

template <class P>
inline std::uint32_t bits_of(const P& pair) {
  static_assert(sizeof(P) == 4, "a pair of 16-bit elements");
  std::uint32_t out;
  __builtin_memcpy(&out, &pair, 4);
  return out;
}

// A shuffle declared without side effects (asm that is not volatile), which
// the optimiser deletes when nobody reads its result and merges when it is
// repeated: the copies of a matrix in its other layout (simdgroup_matrix.h)
// are made eagerly, and most are never read. It stays where it is written
// (LLVM neither hoists nor sinks the convergent calls of CUDA code).
inline std::uint32_t pure_shuffle(std::uint32_t active, std::uint32_t word, unsigned from) {
  std::uint32_t out;
  asm("shfl.sync.idx.b32 %0, %1, %2, 31, %3;" : "=r"(out) : "r"(word), "r"(from), "r"(active));
  return out;
}

// `pair` (two elements of a matrix) of lane `from`, one shuffle per 32-bit word.
template <class P>
inline P pure_shuffle_pair(std::uint32_t active, const P& pair, unsigned from) {
  static_assert(sizeof(P) == 4 || sizeof(P) == 8, "a pair of 16- or 32-bit elements");
  std::uint32_t w[sizeof(P) / 4];
  __builtin_memcpy(w, &pair, sizeof(P));
  for (std::uint32_t& word : w) word = pure_shuffle(active, word, from);
  P out;
  __builtin_memcpy(&out, w, sizeof(P));
  return out;
}

// mma's pairs of 16-bit elements transposed: lane L's pair (row L / 4,
// columns 2 (L % 4) and the next) becomes the pair of rows 2 (L % 4) and the
// next in column L / 4, the layout mma takes B in.
inline std::uint32_t transposed_pairs(std::uint32_t bits) {
  std::uint32_t out;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(out) : "r"(bits));
  return out;
}

}  // namespace nvptx

// The m16n8k8 product with float accumulation, for operands named AB in PTX
// ("f16" or "bf16"): D = A B + C, D and C in operands 0-3 and 7-10 (rows 8..15
// unused: A's rows there are zero), A in 4-5, B in 6.
#define COREAI_MMA_M16N8K8(AB) \
  "mma.sync.aligned.m16n8k8.row.col.f32." AB "." AB ".f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "

// d = a * b + c on the tensor cores with a, c and d in mma's layout (lane L
// holds row L / 4, columns 2 (L % 4) and the next) and b transposed in it
// (nvptx::transposed_pairs): a and b as the bits of a pair of E, c and d as
// floats. Needs sm_80 and all 32 lanes.
template <class E>
inline void multiply_8x8_fragments(std::uint32_t a_bits, std::uint32_t bt_bits, float c0,
                                   float c1, float& d0, float& d1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float unused0, unused1;
  if constexpr (std::is_same_v<E, _Float16>) {
    asm(COREAI_MMA_M16N8K8("f16") "{%7, %8, %9, %10};"
        : "=f"(d0), "=f"(d1), "=f"(unused0), "=f"(unused1)
        : "r"(a_bits), "r"(0u), "r"(bt_bits), "f"(c0), "f"(c1), "f"(0.0f), "f"(0.0f));
  } else {
    asm(COREAI_MMA_M16N8K8("bf16") "{%7, %8, %9, %10};"
        : "=f"(d0), "=f"(d1), "=f"(unused0), "=f"(unused1)
        : "r"(a_bits), "r"(0u), "r"(bt_bits), "f"(c0), "f"(c1), "f"(0.0f), "f"(0.0f));
  }
#else
  (void)a_bits, (void)bt_bits, (void)c0, (void)c1;  // has_matrix_units is false below sm_80
  d0 = d1 = 0.0f;
#endif
}

#undef COREAI_MMA_M16N8K8

template <class PA, class PB>
inline bool multiply_8x8_on_matrix_units(const PA& a, const PB& b, float c0, float c1, float& d0,
                                         float& d1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using E = std::remove_cvref_t<decltype(a[0])>;
  if (nvptx::active_lanes() != nvptx::kAllLanes) return false;
  const unsigned lane = nvptx::lane_id();
  const unsigned from = nvptx::apple_to_mma_source(lane);
  const std::uint32_t a_bits = nvptx::pure_shuffle(nvptx::kAllLanes, nvptx::bits_of(a), from);
  const std::uint32_t b_bits = nvptx::pure_shuffle(nvptx::kAllLanes, nvptx::bits_of(b), from);
  float c[2] = {c0, c1};
  c[0] = nvptx::pure_shuffle_pair(nvptx::kAllLanes, c[0], from);
  c[1] = nvptx::pure_shuffle_pair(nvptx::kAllLanes, c[1], from);
  float d[2];
  multiply_8x8_fragments<E>(a_bits, nvptx::transposed_pairs(b_bits), c[0], c[1], d[0], d[1]);
  const unsigned back = nvptx::mma_to_apple_source(lane);
  d0 = nvptx::pure_shuffle_pair(nvptx::kAllLanes, d[0], back);
  d1 = nvptx::pure_shuffle_pair(nvptx::kAllLanes, d[1], back);
  return true;
#else
  (void)a, (void)b, (void)c0, (void)c1, (void)d0, (void)d1;
  return false;
#endif
}

}  // namespace coreai::simd

namespace coreai::target {

// ---- cooperative tensors (cooperative_tensor.h) -----------------------------

// A thread's number among the `count` threads of an execution scope.
struct scope_member {
  unsigned index = 0;
  unsigned count = 1;
};

// A thread's elements of a tile of `Elements` elements, in registers (or
// local memory): a scope of N SIMD-groups always counts its 32 N threads
// (join_scope), so the share is known when the kernel is compiled.
template <class T, int Elements, int Simdgroups>
class tile_storage {
  static constexpr int kThreads = Simdgroups == 0 ? 1 : 32 * Simdgroups;
  static constexpr int kCapacity = (Elements + kThreads - 1) / kThreads;

 public:
  void resize(std::size_t) {}  // the capacity is fixed (join_scope)
  T& operator[](std::size_t i) { return values_[i]; }
  const T& operator[](std::size_t i) const { return values_[i]; }
  std::size_t size() const { return kCapacity; }

 private:
  T values_[kCapacity];
};

// Shared memory of `Bytes` bytes for the threadgroup (one block per
// instantiation). Every thread of the scope calls it between the same two barriers.
template <std::size_t Bytes>
inline unsigned char* group_scratch() {
  alignas(16) static __attribute__((shared)) unsigned char scratch[Bytes];
  return scratch;
}

// The caller's number in a scope of `Simdgroups` SIMD-groups (0: the thread
// alone, 1: its SIMD-group, more: the threadgroup): its lane, or its index in
// the threadgroup, out of the scope's 32 N threads. Metal has every thread of
// a scope take part; where some do not run (a partial SIMD-group at the grid
// edge), their elements of a cooperative tensor are nobody's here, and a
// thread past the scope's 32 N owns none.
template <int Simdgroups>
inline scope_member join_scope() {
  if constexpr (Simdgroups == 0) {
    return {0, 1};
  } else if constexpr (Simdgroups == 1) {
    return {coreai::simd::nvptx::lane_id(), 32};
  } else {
    threadgroup_barrier();  // a rendezvous of the scope, as on the CPU
    return {static_cast<unsigned>(__nvvm_read_ptx_sreg_tid_x()), 32u * Simdgroups};
  }
}

}  // namespace coreai::target

#endif  // COREAI_MSL_TARGET_NVPTX_H
