// Fibers: user-mode execution contexts, one per thread of a threadgroup in
// fiber mode. A switch saves the callee-saved registers on the current stack,
// stores the stack pointer, and resumes another stack the same way; on x86-64
// and aarch64 this is a few instructions of our own assembly (about 3 ns on
// the machines we test on, against about 300 ns for swapcontext, which also
// saves the signal mask with a system call). Other architectures fall back to
// ucontext.
//
// Depends on nothing but the C++ and POSIX libraries, so that tests can build
// it on its own (with COREAI_FIBER_FORCE_UCONTEXT to test the fallback).
#pragma once

#include <cstddef>

namespace coreai_torch::cpu {

// Entry point of a fiber. It must never return: a finished fiber switches
// away for the last time instead.
using FiberEntry = void (*)(void* arg);

// A suspended execution context.
struct FiberContext {
  void* sp = nullptr;  // saved stack pointer (or ucontext_t* in the fallback)
};

// A fiber stack with an inaccessible guard page below it, so that an overflow
// faults instead of corrupting a neighbour. Pages are committed on first touch.
class FiberStack {
 public:
  explicit FiberStack(size_t usable_bytes);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  FiberStack(FiberStack&& other) noexcept;
  FiberStack& operator=(FiberStack&&) = delete;

  void* top() const { return static_cast<char*>(base_) + mapped_; }
  void* bottom() const { return static_cast<char*>(base_) + guard_; }
  // The inaccessible guard page: [guard_begin(), bottom()).
  void* guard_begin() const { return base_; }

 private:
  void* base_ = nullptr;
  size_t mapped_ = 0;
  size_t guard_ = 0;
};

// Makes `ctx` start `entry(arg)` on `stack` at the first switch to it. The
// stack starts `color` bytes below its top: giving each fiber of a group a
// different colour keeps their hot stack lines out of one cache set (the tops
// of equally sized stacks are otherwise equal modulo every cache's set stride).
void fiber_prepare(FiberContext& ctx, const FiberStack& stack, FiberEntry entry, void* arg,
                   size_t color = 0);

// Saves the running context into `from` and resumes `to`.
void fiber_switch(FiberContext& from, const FiberContext& to);

// Measured cost of one switch in nanoseconds (for benchmarks and the report).
double fiber_switch_nanoseconds(int round_trips);

}  // namespace coreai_torch::cpu
