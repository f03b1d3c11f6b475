// Fiber mode, on the launcher's side: the stacks of one threadgroup's fibers
// and the state the kernel library's scheduler works on (coreai_cpu_fibers,
// cpu_abi.h). The scheduling itself, barriers and SIMD-group functions
// included, is the kernel library's (coreai_msl/fiber_runtime.h); the runner
// calls its coreai_cpu_kernel_run_fibers and reads the state back to name the
// running thread in a fault, and to report a group that could not finish.
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
  KernelExit run(coreai_cpu_kernel_run_fibers_fn run_fibers, void* const* args,
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

  // thread_position_in_grid of the running fiber.
  void current_position(uint32_t out[3]) const;
  // thread_index_in_threadgroup of the running fiber, and its threadgroup
  // (for debug mode's checks, access_checker.h).
  uint32_t current_index() const { return fibers_.lanes[fibers_.current].info.index; }
  const coreai_cpu_group& group() const { return *group_; }

 private:
  static void enter_fibers(void* runner);
  static void enter_private_stack(void* runner);
  static void private_stack_main(void* runner);
  void use_stacks(size_t count, size_t bytes);
  void report_stuck();

  std::vector<FiberStack> stacks_;
  size_t stack_bytes_ = 0;           // size of every stack in stacks_
  std::vector<GuardRange> guards_;   // their guard pages, for the fault handler
  std::vector<FiberStack> private_stack_;  // loop mode on a private stack: 0 or 1
  size_t private_stack_bytes_ = 0;
  GuardRange private_guard_;
  coreai_cpu_kernel_run_group_fn run_group_ = nullptr;
  FiberContext private_context_;
  FiberContext main_;

  // Fiber mode: what the kernel library's scheduler works on.
  std::vector<coreai_cpu_lane> lanes_;
  std::vector<coreai_cpu_simdgroup> simds_;
  coreai_cpu_fibers fibers_{};
  coreai_cpu_kernel_run_fibers_fn run_fibers_ = nullptr;
  void* const* args_ = nullptr;
  const coreai_cpu_group* group_ = nullptr;
  LaunchState* state_ = nullptr;
};

}  // namespace coreai_torch::cpu
