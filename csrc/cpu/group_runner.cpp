#include "cpu/group_runner.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace coreai_torch::cpu {
namespace {

// Kernel bodies keep arrays such as `float acc[64]` on the stack; 256 KiB of
// address space per fiber is plenty for most and costs only the pages a thread
// touches.
constexpr size_t kDefaultFiberStackBytes = 256 * 1024;
// Room for what runs on a fiber besides the kernel's own frames: the
// launcher's services (barriers, reports) and the C library.
constexpr size_t kServiceStackBytes = 64 * 1024;

thread_local GroupRunner* tls_active = nullptr;

GuardRange guard_of(const FiberStack& stack) {
  return {reinterpret_cast<uintptr_t>(stack.guard_begin()),
          reinterpret_cast<uintptr_t>(stack.bottom())};
}

}  // namespace

size_t fiber_stack_bytes(int64_t measured_bytes) {
  if (measured_bytes < 0) return kDefaultFiberStackBytes;
  const size_t need = static_cast<size_t>(measured_bytes) + kServiceStackBytes;
  constexpr size_t kPage = 64 * 1024;  // a multiple of every page size
  return std::max(kDefaultFiberStackBytes, (need + kPage - 1) / kPage * kPage);
}

GroupRunner& GroupRunner::for_this_thread() {
  thread_local GroupRunner runner;
  return runner;
}

GroupRunner* GroupRunner::active() { return tls_active; }

void GroupRunner::use_stacks(size_t count, size_t bytes) {
  if (bytes != stack_bytes_) {
    stacks_.clear();
    guards_.clear();
    stack_bytes_ = bytes;
  }
  while (stacks_.size() < count) {
    stacks_.emplace_back(bytes);
    guards_.push_back(guard_of(stacks_.back()));
  }
}

void GroupRunner::release_large_stacks() {
  if (stack_bytes_ > kDefaultFiberStackBytes) {
    stacks_.clear();
    guards_.clear();
    stack_bytes_ = 0;
  }
  private_stack_.clear();
}

KernelExit GroupRunner::run(coreai_cpu_kernel_run_fibers_fn run_fibers, void* const* args,
                            const coreai_cpu_group& group, LaunchState& state,
                            size_t stack_bytes) {
  const uint32_t n = group.thread_count;
  if (n == 0) return KernelExit::Returned;
  use_stacks(n, stack_bytes);
  lanes_.resize(n);
  simds_.resize((n + COREAI_CPU_SIMD_WIDTH - 1) / COREAI_CPU_SIMD_WIDTH);
  uint32_t index = 0;
  for (uint32_t z = 0; z < group.size[2]; ++z) {
    for (uint32_t y = 0; y < group.size[1]; ++y) {
      for (uint32_t x = 0; x < group.size[0]; ++x, ++index) {
        coreai_cpu_lane& t = lanes_[index];
        t.info.position[0] = x;
        t.info.position[1] = y;
        t.info.position[2] = z;
        t.info.index = index;
        // 64 colours of one cache line each span a 4 KiB page: the hot top
        // frames of the fibers do not all fall into one cache set.
        t.stack_top = static_cast<char*>(stacks_[index].top()) - (index % 64) * 64;
        t.stack_bottom = stacks_[index].bottom();
      }
    }
  }
  fibers_ = {};
  fibers_.lanes = lanes_.data();
  fibers_.simds = simds_.data();
  fibers_.args = args;
  fibers_.group = &group;
  fibers_.thread_count = n;
  run_fibers_ = run_fibers;
  args_ = args;
  group_ = &group;
  state_ = &state;

  KernelThread& thread = KernelThread::current();
  thread.set_stack_guards(guards_.data(), guards_.size());
  tls_active = this;
  const KernelExit exit = thread.run(&GroupRunner::enter_fibers, this);
  tls_active = nullptr;
  thread.set_stack_guards(nullptr, 0);
  if (exit == KernelExit::Returned && fibers_.stuck != 0) report_stuck();
  return exit;
}

void GroupRunner::enter_fibers(void* runner) {
  auto* self = static_cast<GroupRunner*>(runner);
  self->run_fibers_(&self->fibers_);
}

KernelExit GroupRunner::run_group_on_private_stack(coreai_cpu_kernel_run_group_fn run_group,
                                                   void* const* args,
                                                   const coreai_cpu_group& group,
                                                   size_t stack_bytes) {
  if (private_stack_.empty() || stack_bytes != private_stack_bytes_) {
    private_stack_.clear();
    private_stack_.emplace_back(stack_bytes);
    private_stack_bytes_ = stack_bytes;
    private_guard_ = guard_of(private_stack_.back());
  }
  run_group_ = run_group;
  args_ = args;
  group_ = &group;
  fiber_prepare(private_context_, private_stack_.back(), &GroupRunner::private_stack_main, this);
  KernelThread& thread = KernelThread::current();
  thread.set_stack_guards(&private_guard_, 1);
  const KernelExit exit = thread.run(&GroupRunner::enter_private_stack, this);
  thread.set_stack_guards(nullptr, 0);
  return exit;
}

void GroupRunner::enter_private_stack(void* runner) {
  auto* self = static_cast<GroupRunner*>(runner);
  fiber_switch(self->main_, self->private_context_);
}

void GroupRunner::private_stack_main(void* runner) {
  auto* self = static_cast<GroupRunner*>(runner);
  self->run_group_(self->args_, self->group_);
  fiber_switch(self->private_context_, self->main_);
  __builtin_unreachable();  // never resumed
}

void GroupRunner::current_position(uint32_t out[3]) const {
  const coreai_cpu_thread& t = lanes_[fibers_.current].info;
  for (int d = 0; d < 3; ++d) {
    out[d] = group_->position[d] * group_->dispatch_size[d] + t.position[d];
  }
}

void GroupRunner::report_stuck() {
  uint32_t at_barrier = 0, at_simd = 0;
  for (const coreai_cpu_lane& t : lanes_) {
    at_barrier += t.status == COREAI_CPU_AT_BARRIER;
    at_simd += t.status == COREAI_CPU_AT_SIMD || t.status == COREAI_CPU_AT_LOCKSTEP;
  }
  std::ostringstream msg;
  msg << "kernel '" << state_->kernel() << "': the threads of threadgroup (" << group_->position[0]
      << ", " << group_->position[1] << ", " << group_->position[2]
      << ") cannot all make progress: " << at_barrier << " wait at threadgroup_barrier and "
      << at_simd
      << " at a SIMD-group function or lockstep point, and none can run. The CPU backend's "
         "scheduler should never get here; please report the kernel. The group was abandoned.";
  state_->fail(msg.str());
}

}  // namespace coreai_torch::cpu
