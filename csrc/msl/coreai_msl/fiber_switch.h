// The fiber context switch of the CPU backend, shared by the launcher (_C,
// csrc/cpu/fiber.cpp) and every kernel library (fiber_runtime.h), which each
// compile their own copy: a switch is a direct call inside the library that
// runs it.
//
// A suspended fiber is one pointer: its saved stack pointer. A switch pushes
// the callee-saved registers on the current stack, stores the stack pointer,
// loads the other fiber's and pops its registers; on x86-64 and aarch64 that is
// a few instructions of assembly (about 300 ns less than swapcontext, which
// also saves the signal mask with a system call). Other architectures, and
// builds with COREAI_FIBER_FORCE_UCONTEXT (to test it), use ucontext, and a
// suspended fiber's pointer is its ucontext_t.
//
// One translation unit per shared object defines the assembly: the one that
// defines COREAI_FIBER_SWITCH_DEFINITION before including this header.
#ifndef COREAI_MSL_FIBER_SWITCH_H
#define COREAI_MSL_FIBER_SWITCH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if (!defined(__x86_64__) && !defined(__aarch64__)) || defined(COREAI_FIBER_FORCE_UCONTEXT)
#define COREAI_FIBER_UCONTEXT 1
#include <ucontext.h>
#else
#define COREAI_FIBER_UCONTEXT 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Entry point of a fiber. It must never return: a finished fiber switches
// away for the last time instead.
typedef void (*coreai_fiber_entry)(void* arg);

#if !COREAI_FIBER_UCONTEXT

// Saves the callee-saved registers and the stack pointer into *save_sp, then
// loads them from resume_sp and returns into the resumed context.
void coreai_fiber_switch(void** save_sp, void* resume_sp);
// First code a new fiber runs: calls entry(arg), both taken from the
// registers coreai_fiber_prepare filled in.
void coreai_fiber_trampoline(void);

#ifdef COREAI_FIBER_SWITCH_DEFINITION
#ifdef __APPLE__
#define COREAI_ASM_FUNCTION(name) \
  ".globl _" #name "\n.private_extern _" #name "\n.p2align 4\n_" #name ":\n"
#define COREAI_ASM_END(name) ""
#else
#define COREAI_ASM_FUNCTION(name) \
  ".globl " #name "\n.hidden " #name "\n.type " #name ",@function\n.p2align 4\n" #name ":\n"
#define COREAI_ASM_END(name) ".size " #name ", .-" #name "\n"
#endif
#if defined(__x86_64__)
// System V and macOS x86-64: rbx, rbp, r12-r15 are callee-saved. MXCSR and
// the x87 control word are left alone: every fiber of a group runs kernel code
// on one OS thread that never changes the floating-point environment.
__asm__(".text\n" COREAI_ASM_FUNCTION(coreai_fiber_switch)
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
        // r12 = arg, r13 = entry (see coreai_fiber_prepare); realign for the call.
        "  movq %r12, %rdi\n"
        "  andq $-16, %rsp\n"
        "  callq *%r13\n"
        "  ud2\n" COREAI_ASM_END(coreai_fiber_trampoline));
#elif defined(__aarch64__)
// AAPCS64: x19-x29, the link register x30 and the low halves of v8-v15 are
// callee-saved; sp stays 16-byte aligned (a 160-byte frame).
__asm__(".text\n" COREAI_ASM_FUNCTION(coreai_fiber_switch)
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
        // x19 = arg, x20 = entry (see coreai_fiber_prepare).
        "  mov x0, x19\n"
        "  blr x20\n"
        "  brk #0\n" COREAI_ASM_END(coreai_fiber_trampoline));
#endif
#undef COREAI_ASM_FUNCTION
#undef COREAI_ASM_END
#endif  // COREAI_FIBER_SWITCH_DEFINITION

// The saved context of a fiber that starts entry(arg) at its first
// resumption, on the stack [bottom, top).
static inline void* coreai_fiber_prepare(void* top, void* bottom, coreai_fiber_entry entry,
                                         void* arg) {
  (void)bottom;
  void** frame = (void**)((uintptr_t)top & ~(uintptr_t)15);
#if defined(__x86_64__)
  // Popped by coreai_fiber_switch: r15 r14 r13 r12 rbx rbp, then the return address.
  frame -= 8;
  memset(frame, 0, 8 * sizeof(void*));
  frame[2] = (void*)entry;  // r13
  frame[3] = arg;           // r12
  frame[6] = (void*)&coreai_fiber_trampoline;
#else
  // Loaded by coreai_fiber_switch: x19..x30, then d8..d15.
  frame -= 20;
  memset(frame, 0, 20 * sizeof(void*));
  frame[0] = arg;                                  // x19
  frame[1] = (void*)entry;                         // x20
  frame[11] = (void*)&coreai_fiber_trampoline;     // x30
#endif
  return frame;
}

#else  // COREAI_FIBER_UCONTEXT

typedef struct coreai_fiber_start {
  coreai_fiber_entry entry;
  void* arg;
} coreai_fiber_start;

static inline void coreai_fiber_ucontext_trampoline(unsigned hi, unsigned lo) {
  coreai_fiber_start* start = (coreai_fiber_start*)(((uintptr_t)hi << 32) | (uintptr_t)lo);
  start->entry(start->arg);
}

// The ucontext_t, and where the fiber starts, live at the top of its own stack.
static inline void* coreai_fiber_prepare(void* top, void* bottom, coreai_fiber_entry entry,
                                         void* arg) {
  uintptr_t at = ((uintptr_t)top - sizeof(ucontext_t) - sizeof(coreai_fiber_start)) &
                 ~(uintptr_t)63;
  ucontext_t* uc = (ucontext_t*)at;
  coreai_fiber_start* start = (coreai_fiber_start*)(at + sizeof(ucontext_t));
  start->entry = entry;
  start->arg = arg;
  getcontext(uc);
  uc->uc_stack.ss_sp = bottom;
  uc->uc_stack.ss_size = at - (uintptr_t)bottom;
  uc->uc_link = NULL;
  makecontext(uc, (void (*)(void))&coreai_fiber_ucontext_trampoline, 2,
              (unsigned)((uint64_t)(uintptr_t)start >> 32), (unsigned)(uintptr_t)start);
  return uc;
}

// *save_sp must hold a ucontext_t to save into (the caller provides one for a
// context that was never prepared, such as an OS thread's own).
static inline void coreai_fiber_switch(void** save_sp, void* resume_sp) {
  swapcontext((ucontext_t*)*save_sp, (ucontext_t*)resume_sp);
}

#endif  // COREAI_FIBER_UCONTEXT

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // COREAI_MSL_FIBER_SWITCH_H
