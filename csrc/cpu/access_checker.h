// Debug mode's checks of what a kernel's threads do to memory and how they
// synchronise (docs/cpu.md, "Checking kernels"). The debug library reports
// every access to memory that is not a private local (coreai_msl/debug_accesses.h),
// every barrier and SIMD-group function a thread reaches and leaves, and where
// each threadgroup variable lies; the checker keeps a shadow of threadgroup
// and device memory and finds:
//
// - data races: two threads access one element, at least one writes, not both
//   atomically, and nothing orders them: threads of different threadgroups are
//   never ordered within a dispatch, threads of one threadgroup are ordered by
//   a threadgroup_barrier between the accesses, lanes of one SIMD-group also by
//   a simdgroup_barrier;
// - reliance on SIMD-group lockstep: such a conflict between two lanes of one
//   SIMD-group (a GPU runs them in step, but Metal does not promise it);
// - reads of threadgroup memory that no thread of the threadgroup wrote before;
// - accesses through a pointer outside a tensor (into the guard zone around
//   the copy the debug launch gives the kernel, debug_buffers.h);
// - a threadgroup_barrier reached by only part of the threadgroup (the others
//   had returned), threads waiting at different barriers, and lanes of a
//   SIMD-group meeting in one SIMD-group function from different calls;
// - a SIMD-group matrix load, store or product reached by only part of a
//   SIMD-group (Metal leaves it undefined; the CUDA backend's tensor cores
//   need every lane).
//
// Threadgroups run one after another in debug mode, on one OS thread, so the
// checker needs no locks and its reports do not depend on scheduling. Each
// finding names the kernel, the memory (tensor or threadgroup variable) and
// index, the two threads and the two source lines.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "msl/coreai_msl/cpu_abi.h"

namespace coreai_torch::cpu {

// A tensor argument as the debug launch binds it (debug_buffers.h).
struct CheckedBuffer {
  std::string name;            // the kernel's name for it
  uintptr_t data = 0;          // what the kernel's pointer holds: torch offset 0
  int64_t first = 0;           // the lowest element offset the tensor holds (<= 0)
  int64_t end = 0;             // one past the highest
  uintptr_t guard_begin = 0;   // the guard zone around [first, end): an access
  uintptr_t guard_end = 0;     //   there, outside the elements, is out of bounds
  int64_t element_bytes = 1;
  std::vector<int64_t> sizes;  // torch's, for indices in reports
  std::vector<int64_t> strides;
};

// The kinds of finding that are warnings, not errors: a debug launch that
// finds only these completes (docs/cpu.md, "Checking kernels"). Real kernels
// (MLX's and PyTorch's scans, ggml's flash attention) rely on lockstep and
// read threadgroup memory they never wrote in lanes whose values go unused.
inline constexpr const char* kLockstepFinding = "SIMD lockstep";
inline constexpr const char* kUninitializedFinding = "uninitialized read";
// Lanes of one SIMD-group at different SIMD-group function calls at once:
// Metal runs each call over the lanes that reach it, as the CPU does; a
// warning, because code written for all lanes then computes something else.
inline constexpr const char* kParticipationFinding = "SIMD participation";
inline bool is_warning(const std::string& kind) {
  return kind == kLockstepFinding || kind == kUninitializedFinding ||
         kind == kParticipationFinding;
}

// One problem found, in words.
struct DebugFinding {
  std::string kind;      // "data race", "SIMD lockstep", "uninitialized read",
                         // "out of bounds", "partial barrier", "divergent barrier",
                         // "SIMD participation", "partial SIMD-group matrix"
  std::string memory;    // "threadgroup 'tile'" / "tensor 'out'", empty for barriers
  std::string index;     // "[3]", "torch index [0, 5]", empty for barriers
  std::vector<std::string> threads;  // thread_position_in_grid of each, "(x, y, z)"
  std::vector<std::string> lines;    // source positions ("src:4:18"), as threads
  std::string message;   // the whole report, one paragraph
  int64_t count = 1;     // instances of the same problem (same places)
};

class AccessChecker {
 public:
  // `library_path`: the debug library, whose line tables name the places.
  AccessChecker(std::string kernel, std::vector<CheckedBuffer> buffers, std::string library_path);
  ~AccessChecker();

  // From kernel code, through the runtime table (cpu_abi.h).
  void access(const void* address, uint32_t size, uint32_t flags, const void* pc);
  void sync(uint32_t kind, bool leaving, const void* pc);
  void simdgroup_matrix(uint32_t op, uint32_t active, const void* pc);
  void threadgroup_storage(const coreai_cpu_threadgroup_storage& storage);

  bool found_anything() const { return !raw_.empty(); }
  // What was found, with source lines (runs the symbolizer once).
  std::vector<DebugFinding> findings() const;

  // The checker of the debug launch whose threads run on this OS thread.
  static AccessChecker* current();
  static void set_current(AccessChecker* checker);

 // The shadow's record of one access (public for the ordering rule).
  struct Access;

 private:
  struct Cell;
  struct Side;
  struct Raw;
  struct Variable;
  struct ThreadState;
  struct Rendezvous;

  enum class Kind : uint8_t {
    Race,
    Lockstep,
    Uninitialized,
    OutOfBounds,
    PartialBarrier,
    DivergentBarrier,
    SimdParticipation,
    PartialMatrix,
  };

  // The thread making the current call; starts a new group run when the
  // runner moved on to another threadgroup. False outside a fiber.
  bool locate();
  Access now(uint32_t flags, const void* pc) const;
  void check(Cell& cell, const Access& a, bool threadgroup, int memory, int64_t element);
  void add(Kind kind, int memory, int64_t element, const Side& a, const Side& b,
           uint32_t extra = 0);
  void threadgroup_access(Variable& v, uintptr_t address, uint32_t size, const Access& a);
  void device_access(size_t buffer, uintptr_t address, uint32_t size, const Access& a);

  std::string kernel_;
  std::vector<CheckedBuffer> buffers_;
  std::vector<std::unique_ptr<Cell[], void (*)(Cell*)>> device_shadow_;
  std::vector<Variable> variables_;
  std::string library_path_;
  uintptr_t library_base_ = 0;

  // The group run in progress (runs are numbered from 1) and its threads.
  std::vector<coreai_cpu_group> runs_;
  const void* runner_ = nullptr;
  uint32_t thread_ = 0;  // thread_index_in_threadgroup of the running thread
  std::vector<ThreadState> threads_;
  std::vector<Rendezvous> simd_;  // the open SIMD-group exchange of each SIMD-group
  std::unique_ptr<Rendezvous> barrier_;

  std::vector<Raw> raw_;
  std::map<std::tuple<int, int, uintptr_t, uintptr_t>, size_t> seen_;
};

// What the last debug launch on this OS thread found (empty when it found
// nothing), for tools that want each problem on its own (coreai_torch.check).
const std::vector<DebugFinding>& last_debug_findings();
void set_last_debug_findings(std::vector<DebugFinding> findings);

}  // namespace coreai_torch::cpu
