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

KernelExit GroupRunner::run(coreai_cpu_kernel_run_thread_fn run_thread, void* const* args,
                            const coreai_cpu_group& group, LaunchState& state,
                            size_t stack_bytes) {
  const uint32_t n = group.thread_count;
  if (n == 0) return KernelExit::Returned;
  use_stacks(n, stack_bytes);
  threads_.resize(n);
  const uint32_t simd_count = (n + COREAI_CPU_SIMD_WIDTH - 1) / COREAI_CPU_SIMD_WIDTH;
  simds_.resize(simd_count);
  for (uint32_t s = 0; s < simd_count; ++s) {
    SimdGroup& sg = simds_[s];
    sg.running = std::min<uint32_t>(COREAI_CPU_SIMD_WIDTH, n - s * COREAI_CPU_SIMD_WIDTH);
    sg.waiting = 0;
    sg.parity = 0;
  }
  uint32_t index = 0;
  for (uint32_t z = 0; z < group.size[2]; ++z) {
    for (uint32_t y = 0; y < group.size[1]; ++y) {
      for (uint32_t x = 0; x < group.size[0]; ++x, ++index) {
        Thread& t = threads_[index];
        t.info.position[0] = x;
        t.info.position[1] = y;
        t.info.position[2] = z;
        t.info.index = index;
        t.status = Status::Runnable;
        t.parity = 0;
        // 64 colours of one cache line each span a 4 KiB page.
        fiber_prepare(t.context, stacks_[index], &GroupRunner::fiber_main, this,
                      (index % 64) * 64);
      }
    }
  }
  run_thread_ = run_thread;
  args_ = args;
  group_ = &group;
  state_ = &state;
  running_ = n;
  at_barrier_ = 0;
  stuck_ = false;
  current_ = 0;

  KernelThread& thread = KernelThread::current();
  thread.set_stack_guards(guards_.data(), guards_.size());
  tls_active = this;
  const KernelExit exit = thread.run(&GroupRunner::enter_fibers, this);
  tls_active = nullptr;
  thread.set_stack_guards(nullptr, 0);
  if (exit == KernelExit::Returned && stuck_) report_stuck();
  return exit;
}

void GroupRunner::enter_fibers(void* runner) {
  auto* self = static_cast<GroupRunner*>(runner);
  fiber_switch(self->main_, self->threads_[0].context);
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
  threads_.resize(1);
  fiber_prepare(threads_[0].context, private_stack_.back(), &GroupRunner::private_stack_main, this);
  KernelThread& thread = KernelThread::current();
  thread.set_stack_guards(&private_guard_, 1);
  const KernelExit exit = thread.run(&GroupRunner::enter_fibers, this);
  thread.set_stack_guards(nullptr, 0);
  return exit;
}

void GroupRunner::private_stack_main(void* runner) {
  auto* self = static_cast<GroupRunner*>(runner);
  self->run_group_(self->args_, self->group_);
  fiber_switch(self->threads_[0].context, self->main_);
  __builtin_unreachable();  // never resumed
}

void GroupRunner::fiber_main(void* runner) {
  auto* self = static_cast<GroupRunner*>(runner);
  self->run_current_thread();
  self->finish_current_thread();
}

void GroupRunner::run_current_thread() { run_thread_(args_, group_, &threads_[current_].info); }

void GroupRunner::finish_current_thread() {
  Thread& t = threads_[current_];
  t.status = Status::Done;
  --running_;
  SimdGroup& sg = simds_[t.info.index / COREAI_CPU_SIMD_WIDTH];
  --sg.running;
  // The threads waiting for this one no longer need to.
  if (at_barrier_ > 0 && at_barrier_ == running_) release_barrier();
  if (sg.waiting > 0 && sg.waiting == sg.running) {
    release_simd(t.info.index / COREAI_CPU_SIMD_WIDTH, /*include_current=*/false);
  }
  const int64_t next = next_runnable(current_);
  if (next < 0) {
    stuck_ = running_ > 0;
    fiber_switch(t.context, main_);
  } else {
    current_ = static_cast<uint32_t>(next);
    fiber_switch(t.context, threads_[current_].context);
  }
  __builtin_unreachable();  // a finished fiber is never resumed
}

int64_t GroupRunner::next_runnable(uint32_t from) const {
  const uint32_t n = static_cast<uint32_t>(threads_.size());
  for (uint32_t step = 1; step <= n; ++step) {
    const uint32_t k = (from + step) % n;
    if (threads_[k].status == Status::Runnable) return k;
  }
  return -1;
}

void GroupRunner::wait() {
  const uint32_t me = current_;
  const int64_t next = next_runnable(me);
  if (next < 0) {
    // Nobody can release this thread: abandon the group (its fibers are
    // simply never resumed; their stacks are reused by the next group).
    stuck_ = true;
    fiber_switch(threads_[me].context, main_);
    __builtin_unreachable();
  }
  current_ = static_cast<uint32_t>(next);
  fiber_switch(threads_[me].context, threads_[current_].context);
  current_ = me;  // resumed: whoever switched back to this fiber set it too
}

void GroupRunner::current_position(uint32_t out[3]) const {
  const coreai_cpu_thread& t = threads_[current_].info;
  for (int d = 0; d < 3; ++d) {
    out[d] = group_->position[d] * group_->dispatch_size[d] + t.position[d];
  }
}

void GroupRunner::release_barrier() {
  for (Thread& t : threads_) {
    if (t.status == Status::AtBarrier) t.status = Status::Runnable;
  }
  at_barrier_ = 0;
}

void GroupRunner::threadgroup_barrier() {
  ++at_barrier_;
  if (at_barrier_ == running_) {
    release_barrier();  // last to arrive: carry on
    return;
  }
  threads_[current_].status = Status::AtBarrier;
  wait();
}

void GroupRunner::release_simd(uint32_t simd, bool include_current) {
  SimdGroup& sg = simds_[simd];
  uint32_t mask = 0;
  const uint32_t first = simd * COREAI_CPU_SIMD_WIDTH;
  const uint32_t end = std::min<uint32_t>(first + COREAI_CPU_SIMD_WIDTH, threads_.size());
  for (uint32_t k = first; k < end; ++k) {
    Thread& t = threads_[k];
    if (t.status == Status::AtSimd) {
      t.status = Status::Runnable;
      mask |= 1u << (k - first);
    }
  }
  if (include_current) mask |= 1u << (current_ - first);
  sg.active_mask[sg.parity] = mask;
  sg.waiting = 0;
}

coreai_cpu_simd_view GroupRunner::simd_exchange(const void* value, uint32_t size) {
  Thread& t = threads_[current_];
  const uint32_t simd = t.info.index / COREAI_CPU_SIMD_WIDTH;
  const uint32_t lane = t.info.index % COREAI_CPU_SIMD_WIDTH;
  SimdGroup& sg = simds_[simd];
  const uint8_t parity = t.parity;
  t.parity ^= 1;
  if (sg.waiting == 0) sg.parity = parity;
  if (size > 0) std::memcpy(sg.slots[parity][lane], value, size);
  ++sg.waiting;
  if (sg.waiting == sg.running) {
    release_simd(simd, /*include_current=*/true);
  } else {
    t.status = Status::AtSimd;
    wait();
  }
  return {&sg.slots[parity][0][0], sg.active_mask[parity], lane};
}

void GroupRunner::report_stuck() {
  uint32_t at_barrier = 0, at_simd = 0;
  for (const Thread& t : threads_) {
    at_barrier += t.status == Status::AtBarrier;
    at_simd += t.status == Status::AtSimd;
  }
  std::ostringstream msg;
  msg << "kernel '" << state_->kernel() << "': the threads of threadgroup (" << group_->position[0]
      << ", " << group_->position[1] << ", " << group_->position[2]
      << ") cannot all make progress: " << at_barrier << " wait at threadgroup_barrier and "
      << at_simd
      << " wait at a SIMD-group function or simdgroup_barrier for lanes that are elsewhere. "
         "Every running thread of a group must reach the same barrier (and every running lane "
         "of a SIMD-group the same SIMD-group function); the GPU leaves this undefined. The "
         "group was abandoned.";
  state_->fail(msg.str());
}

}  // namespace coreai_torch::cpu
