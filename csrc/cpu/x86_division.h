// Completing an x86-64 integer division that trapped. `div` and `idiv` raise
// a divide error (SIGFPE) for a zero divisor and for a quotient that does not
// fit (INT_MIN / -1), where a GPU simply returns a value. The CPU backend
// gives the results AArch64's `sdiv`/`udiv` give (docs/cpu.md):
//
//   x / 0 == 0, x % 0 == x, INT_MIN / -1 == INT_MIN, INT_MIN % -1 == 0
//
// by decoding the faulting instruction, writing its quotient and remainder
// registers and stepping over it.
#pragma once

#include <cstdint>

namespace coreai_torch::cpu {

// The general-purpose registers in the x86-64 encoding order (rax, rcx, rdx,
// rbx, rsp, rbp, rsi, rdi, r8 ... r15) and the instruction pointer.
struct X86Registers {
  uint64_t gpr[16];
  uint64_t rip;
};

// If `regs.rip` points at a `div` or `idiv` (any operand size, register or
// memory divisor), completes it as above and advances `regs.rip`; returns
// false, changing nothing, for any other instruction. A memory divisor is
// read from its address: the CPU has just read it without faulting.
bool complete_x86_division(X86Registers& regs);

}  // namespace coreai_torch::cpu
