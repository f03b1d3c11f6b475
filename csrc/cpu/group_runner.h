// Fiber mode: runs the threads of one threadgroup as fibers on the calling OS
// thread, switching between them at barriers and SIMD-group functions.
//
// Scheduling is cooperative and round-robin in thread-index order. A thread
// that must wait is marked and the next runnable thread resumes; the last
// thread to arrive releases the others and carries on. Only threads that are
// still running are waited for: a thread that returns leaves every barrier and
// every SIMD-group rendezvous it could have joined. When no thread can run but
// some have not finished (threads wait at different kinds of synchronisation,
// which is undefined behaviour on the GPU), the group is abandoned and the
// launch reports it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/fiber.h"
#include "cpu/kernel_guard.h"
#include "cpu/launch_state.h"
#include "msl/coreai_msl/cpu_abi.h"

namespace coreai_torch::cpu {

// A fiber's stack: 256 KiB of address space, or more when the compiler
// measured more for the kernel's frames (`measured_bytes`, -1 if unknown),
// plus room for the launcher's services that kernel code calls. Pages cost
// memory only once touched.
size_t fiber_stack_bytes(int64_t measured_bytes);

// Address space the stacks of one threadgroup may take (threads x stack):
// a launch that needs more is refused.
constexpr size_t kGroupStackBudgetBytes = size_t{4} << 30;

class GroupRunner {
 public:
  // The runner of the calling OS thread (fiber stacks are reused across groups).
  static GroupRunner& for_this_thread();
  // The runner whose fibers are executing on this OS thread, or nullptr
  // (loop mode, or outside a launch).
  static GroupRunner* active();

  // Runs every thread of `group` on fibers of `stack_bytes` each. Returns how
  // kernel code ended: anything but Returned means the group was abandoned
  // (the fibers are never resumed; current_position() names the thread).
  KernelExit run(coreai_cpu_kernel_run_thread_fn run_thread, void* const* args,
                 const coreai_cpu_group& group, LaunchState& state, size_t stack_bytes);

  // Loop mode for a kernel whose frames do not fit on the OS thread's stack:
  // runs the group loop on a private stack of `stack_bytes`.
  KernelExit run_group_on_private_stack(coreai_cpu_kernel_run_group_fn run_group,
                                        void* const* args, const coreai_cpu_group& group,
                                        size_t stack_bytes);

  // Unmaps stacks larger than the default (a kernel with large local arrays
  // may have touched all of them); called when a launch's work on this OS
  // thread ends.
  void release_large_stacks();

  // Called from kernel code through the coreai_cpu_runtime table.
  void threadgroup_barrier();
  // thread_position_in_grid of the running fiber.
  void current_position(uint32_t out[3]) const;
  // thread_index_in_threadgroup of the running fiber, and its threadgroup
  // (for debug mode's checks, access_checker.h).
  uint32_t current_index() const { return threads_[current_].info.index; }
  const coreai_cpu_group& group() const { return *group_; }
  coreai_cpu_simd_view simd_exchange(const void* value, uint32_t size);

 private:
  enum class Status : uint8_t { Runnable, AtBarrier, AtSimd, Done };

  struct Thread {
    FiberContext context;
    coreai_cpu_thread info;
    Status status;
    uint8_t parity;  // which of the SIMD-group's two slot sets the next exchange uses
  };

  // SIMD-group exchange state. Two slot sets alternate, so a lane that is
  // released from one exchange and reaches the next before the others have
  // read their results cannot overwrite what they are about to read.
  struct SimdGroup {
    uint32_t running;
    uint32_t waiting;
    uint8_t parity;  // slot set of the exchange in progress
    uint32_t active_mask[2];
    alignas(64) unsigned char slots[2][COREAI_CPU_SIMD_WIDTH][COREAI_CPU_SIMD_SLOT_BYTES];
  };

  static void fiber_main(void* runner);
  static void enter_fibers(void* runner);
  static void private_stack_main(void* runner);
  void use_stacks(size_t count, size_t bytes);
  void run_current_thread();
  [[noreturn]] void finish_current_thread();
  // Suspends the current thread (already marked as waiting) and resumes the next runnable one.
  void wait();
  // Index of the next runnable thread after `from`, or -1.
  int64_t next_runnable(uint32_t from) const;
  void release_barrier();
  void release_simd(uint32_t simd, bool include_current);
  void report_stuck();

  std::vector<FiberStack> stacks_;
  size_t stack_bytes_ = 0;           // size of every stack in stacks_
  std::vector<GuardRange> guards_;   // their guard pages, for the fault handler
  std::vector<FiberStack> private_stack_;  // loop mode on a private stack: 0 or 1
  size_t private_stack_bytes_ = 0;
  GuardRange private_guard_;
  coreai_cpu_kernel_run_group_fn run_group_ = nullptr;
  std::vector<Thread> threads_;
  std::vector<SimdGroup> simds_;
  FiberContext main_;
  uint32_t current_ = 0;
  uint32_t running_ = 0;
  uint32_t at_barrier_ = 0;
  bool stuck_ = false;

  coreai_cpu_kernel_run_thread_fn run_thread_ = nullptr;
  void* const* args_ = nullptr;
  const coreai_cpu_group* group_ = nullptr;
  LaunchState* state_ = nullptr;
};

}  // namespace coreai_torch::cpu
