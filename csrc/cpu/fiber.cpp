#include "cpu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>

// The switch itself is shared with the kernel libraries; this translation
// unit holds _C's copy of its assembly.
#define COREAI_FIBER_SWITCH_DEFINITION 1
#include "msl/coreai_msl/fiber_switch.h"

#if COREAI_FIBER_UCONTEXT
#include <deque>
#endif

namespace coreai_torch::cpu {

FiberStack::FiberStack(size_t usable_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  guard_ = page;
  mapped_ = guard_ + (usable_bytes + page - 1) / page * page;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
  flags |= MAP_NORESERVE;
#endif
  base_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    throw std::system_error(errno, std::generic_category(),
                            "coreai_torch CPU backend: cannot map a " + std::to_string(mapped_) +
                                "-byte fiber stack");
  }
  if (mprotect(base_, guard_, PROT_NONE) != 0) {
    const int error = errno;
    munmap(base_, mapped_);
    base_ = nullptr;
    throw std::system_error(error, std::generic_category(),
                            "coreai_torch CPU backend: cannot protect a fiber stack's guard page");
  }
}

FiberStack::~FiberStack() {
  if (base_ != nullptr) munmap(base_, mapped_);
}

FiberStack::FiberStack(FiberStack&& other) noexcept
    : base_(other.base_), mapped_(other.mapped_), guard_(other.guard_) {
  other.base_ = nullptr;
}

void fiber_prepare(FiberContext& ctx, const FiberStack& stack, FiberEntry entry, void* arg,
                   size_t color) {
  ctx.sp = coreai_fiber_prepare(static_cast<char*>(stack.top()) - color, stack.bottom(), entry,
                                arg);
}

void fiber_switch(FiberContext& from, const FiberContext& to) {
#if COREAI_FIBER_UCONTEXT
  // A context that was never prepared (an OS thread's own) gets storage the
  // first time it is switched away from; it lives as long as the OS thread.
  thread_local std::deque<ucontext_t> saved;
  if (from.sp == nullptr) from.sp = &saved.emplace_back();
#endif
  coreai_fiber_switch(&from.sp, to.sp);
}

namespace {
struct PingPong {
  FiberContext main;
  FiberContext fiber;
  int remaining = 0;
};
void ping_pong_entry(void* arg) {
  auto* p = static_cast<PingPong*>(arg);
  while (true) {
    --p->remaining;
    fiber_switch(p->fiber, p->main);
  }
}
}  // namespace

double fiber_switch_nanoseconds(int round_trips) {
  FiberStack stack(64 * 1024);
  PingPong p;
  p.remaining = round_trips;
  fiber_prepare(p.fiber, stack, &ping_pong_entry, &p);
  const auto start = std::chrono::steady_clock::now();
  while (p.remaining > 0) fiber_switch(p.main, p.fiber);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / (2.0 * round_trips);
}

}  // namespace coreai_torch::cpu
