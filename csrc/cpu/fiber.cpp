#include "cpu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>

// COREAI_FIBER_FORCE_UCONTEXT builds the fallback on x86-64 and aarch64 too,
// so that it can be tested there.
#if (!defined(__x86_64__) && !defined(__aarch64__)) || defined(COREAI_FIBER_FORCE_UCONTEXT)
#define COREAI_FIBER_UCONTEXT 1
#include <ucontext.h>

#include <deque>
#endif

#ifdef __APPLE__
#define COREAI_ASM_NAME(name) "_" #name
#define COREAI_ASM_FUNCTION(name) \
  ".globl _" #name "\n.private_extern _" #name "\n.p2align 4\n_" #name ":\n"
#define COREAI_ASM_END(name) ""
#else
#define COREAI_ASM_NAME(name) #name
#define COREAI_ASM_FUNCTION(name) \
  ".globl " #name "\n.hidden " #name "\n.type " #name ",@function\n.p2align 4\n" #name ":\n"
#define COREAI_ASM_END(name) ".size " #name ", .-" #name "\n"
#endif

#ifndef COREAI_FIBER_UCONTEXT
extern "C" {
// Saves the callee-saved registers and the stack pointer into *save_sp, then
// loads them from resume_sp and returns into the resumed context.
void coreai_fiber_switch(void** save_sp, void* resume_sp);
// First code a new fiber runs: calls entry(arg) with entry and arg taken from
// the registers fiber_prepare filled in.
void coreai_fiber_trampoline();
}
#endif

#if defined(COREAI_FIBER_UCONTEXT)
// No assembly: see the fallback below.
#elif defined(__x86_64__)
// System V and macOS x86-64: rbx, rbp, r12-r15 are callee-saved. MXCSR and
// the x87 control word are left alone: every fiber of a group runs kernel code
// on one OS thread that never changes the floating-point environment.
asm(".text\n" COREAI_ASM_FUNCTION(coreai_fiber_switch)
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n" COREAI_ASM_END(coreai_fiber_switch)
    COREAI_ASM_FUNCTION(coreai_fiber_trampoline)
    // r12 = arg, r13 = entry (see fiber_prepare); realign for the call.
    "  movq %r12, %rdi\n"
    "  andq $-16, %rsp\n"
    "  callq *%r13\n"
    "  ud2\n" COREAI_ASM_END(coreai_fiber_trampoline));
#elif defined(__aarch64__)
// AAPCS64: x19-x29, the link register x30 and the low halves of v8-v15 are
// callee-saved; sp stays 16-byte aligned (a 160-byte frame).
asm(".text\n" COREAI_ASM_FUNCTION(coreai_fiber_switch)
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n"
    "  stp x21, x22, [sp, #16]\n"
    "  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n"
    "  stp x27, x28, [sp, #64]\n"
    "  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n"
    "  stp d10, d11, [sp, #112]\n"
    "  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n"
    "  str x9, [x0]\n"
    "  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n"
    "  ldp x21, x22, [sp, #16]\n"
    "  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n"
    "  ldp x27, x28, [sp, #64]\n"
    "  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n"
    "  ldp d10, d11, [sp, #112]\n"
    "  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n"
    "  ret\n" COREAI_ASM_END(coreai_fiber_switch)
    COREAI_ASM_FUNCTION(coreai_fiber_trampoline)
    // x19 = arg, x20 = entry (see fiber_prepare).
    "  mov x0, x19\n"
    "  blr x20\n"
    "  brk #0\n" COREAI_ASM_END(coreai_fiber_trampoline));
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

#ifndef COREAI_FIBER_UCONTEXT

void fiber_prepare(FiberContext& ctx, const FiberStack& stack, FiberEntry entry, void* arg,
                   size_t color) {
  auto top = (reinterpret_cast<uintptr_t>(stack.top()) - color) & ~uintptr_t{15};
  auto* frame = reinterpret_cast<void**>(top);
#if defined(__x86_64__)
  // Popped by coreai_fiber_switch: r15 r14 r13 r12 rbx rbp, then the return address.
  frame -= 8;
  std::memset(frame, 0, 8 * sizeof(void*));
  frame[2] = reinterpret_cast<void*>(entry);  // r13
  frame[3] = arg;                             // r12
  frame[6] = reinterpret_cast<void*>(&coreai_fiber_trampoline);
#else
  // Loaded by coreai_fiber_switch: x19..x30, then d8..d15.
  frame -= 20;
  std::memset(frame, 0, 20 * sizeof(void*));
  frame[0] = arg;                             // x19
  frame[1] = reinterpret_cast<void*>(entry);  // x20
  frame[11] = reinterpret_cast<void*>(&coreai_fiber_trampoline);  // x30
#endif
  ctx.sp = frame;
}

void fiber_switch(FiberContext& from, const FiberContext& to) {
  coreai_fiber_switch(&from.sp, to.sp);
}

#else  // COREAI_FIBER_UCONTEXT

namespace {
struct UcontextStart {
  FiberEntry entry;
  void* arg;
};
void ucontext_trampoline(unsigned hi, unsigned lo) {
  auto* start = reinterpret_cast<UcontextStart*>((uintptr_t{hi} << 32) | uintptr_t{lo});
  start->entry(start->arg);
}
}  // namespace

// The ucontext_t lives at the top of the fiber's own stack.
void fiber_prepare(FiberContext& ctx, const FiberStack& stack, FiberEntry entry, void* arg,
                   size_t color) {
  auto top = reinterpret_cast<uintptr_t>(stack.top()) - color;
  top = (top - sizeof(ucontext_t) - sizeof(UcontextStart)) & ~uintptr_t{63};
  auto* uc = reinterpret_cast<ucontext_t*>(top);
  auto* start = reinterpret_cast<UcontextStart*>(top + sizeof(ucontext_t));
  *start = {entry, arg};
  getcontext(uc);
  uc->uc_stack.ss_sp = stack.bottom();
  uc->uc_stack.ss_size = top - reinterpret_cast<uintptr_t>(stack.bottom());
  uc->uc_link = nullptr;
  const auto bits = reinterpret_cast<uintptr_t>(start);
  makecontext(uc, reinterpret_cast<void (*)()>(&ucontext_trampoline), 2,
              static_cast<unsigned>(uint64_t{bits} >> 32), static_cast<unsigned>(bits));
  ctx.sp = uc;
}

void fiber_switch(FiberContext& from, const FiberContext& to) {
  // A context that was never prepared (an OS thread's own) gets storage the
  // first time it is switched away from; it lives as long as the OS thread.
  thread_local std::deque<ucontext_t> saved;
  if (from.sp == nullptr) from.sp = &saved.emplace_back();
  swapcontext(static_cast<ucontext_t*>(from.sp), static_cast<ucontext_t*>(to.sp));
}

#endif  // COREAI_FIBER_UCONTEXT

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
