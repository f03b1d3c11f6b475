#include "cpu/x86_division.h"

#include <cstring>

namespace coreai_torch::cpu {
namespace {

constexpr int kRax = 0, kRdx = 2, kRsp = 4, kRbp = 5;

uint64_t low_bits(uint64_t v, int bits) { return bits == 64 ? v : v & ((uint64_t{1} << bits) - 1); }

int64_t sign_extend(uint64_t v, int bits) {
  return bits == 64 ? static_cast<int64_t>(v)
                    : static_cast<int64_t>(v << (64 - bits)) >> (64 - bits);
}

// Replaces the low `bits` of a register, as an x86 write of that width does
// (a 32-bit write also clears the upper half).
void write_low(uint64_t& reg, uint64_t value, int bits) {
  if (bits >= 32) {
    reg = low_bits(value, bits);
  } else {
    const uint64_t mask = (uint64_t{1} << bits) - 1;
    reg = (reg & ~mask) | (value & mask);
  }
}

struct Decoded {
  int bits = 32;         // operand size
  bool is_signed = false;
  uint64_t divisor = 0;  // zero-extended from `bits`
  size_t length = 0;     // instruction bytes
};

// Decodes `div`/`idiv` at `code` (prefixes, REX, F6/F7 /6 or /7, ModRM, SIB,
// displacement) and reads its divisor. False for anything else.
bool decode(const X86Registers& regs, const uint8_t* code, Decoded& out) {
  size_t i = 0;
  bool operand16 = false, address32 = false;
  for (;; ++i) {
    if (i == 14) return false;  // longer than any instruction
    const uint8_t b = code[i];
    if (b == 0x66) {
      operand16 = true;
    } else if (b == 0x67) {
      address32 = true;
    } else if (b == 0xF0 || b == 0xF2 || b == 0xF3 || b == 0x2E || b == 0x36 || b == 0x3E ||
               b == 0x26) {
      // lock/rep and the null segment overrides of 64-bit mode change nothing here
    } else if (b == 0x64 || b == 0x65) {
      return false;  // fs/gs-relative divisors: not code clang emits for a kernel
    } else {
      break;
    }
  }
  uint8_t rex = 0;
  if ((code[i] & 0xF0) == 0x40) rex = code[i++];
  const uint8_t opcode = code[i++];
  if (opcode != 0xF6 && opcode != 0xF7) return false;
  const uint8_t modrm = code[i++];
  const int mod = modrm >> 6, reg = (modrm >> 3) & 7, rm = modrm & 7;
  if (reg != 6 && reg != 7) return false;  // F6/F7 /6 is div, /7 idiv
  out.is_signed = reg == 7;
  out.bits = opcode == 0xF6 ? 8 : (rex & 0x08) ? 64 : operand16 ? 16 : 32;

  if (mod == 3) {
    const int index = rm | ((rex & 1) << 3);
    uint64_t value = regs.gpr[index];
    // Without REX, byte registers 4-7 are ah, ch, dh, bh.
    if (out.bits == 8 && rex == 0 && rm >= 4) value = regs.gpr[rm - 4] >> 8;
    out.divisor = low_bits(value, out.bits);
    out.length = i;
    return true;
  }

  uint64_t address = 0;
  int base = rm;
  if (rm == 4) {  // SIB
    const uint8_t sib = code[i++];
    const int scale = sib >> 6;
    const int index = ((sib >> 3) & 7) | ((rex & 2) << 2);
    base = sib & 7;
    if (index != kRsp) address += regs.gpr[index] << scale;
    if (base == kRbp && mod == 0) {
      int32_t disp;
      std::memcpy(&disp, code + i, 4);
      i += 4;
      address += static_cast<uint64_t>(static_cast<int64_t>(disp));
      base = -1;
    }
  } else if (rm == kRbp && mod == 0) {  // rip-relative
    int32_t disp;
    std::memcpy(&disp, code + i, 4);
    i += 4;
    address = regs.rip + i + static_cast<uint64_t>(static_cast<int64_t>(disp));
    base = -1;
  }
  if (base >= 0) address += regs.gpr[base | ((rex & 1) << 3)];
  if (mod == 1) {
    address += static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(code[i])));
    i += 1;
  } else if (mod == 2) {
    int32_t disp;
    std::memcpy(&disp, code + i, 4);
    i += 4;
    address += static_cast<uint64_t>(static_cast<int64_t>(disp));
  }
  if (address32) address &= 0xFFFFFFFFu;
  uint64_t value = 0;
  std::memcpy(&value, reinterpret_cast<const void*>(address), static_cast<size_t>(out.bits / 8));
  out.divisor = low_bits(value, out.bits);
  out.length = i;
  return true;
}

}  // namespace

bool complete_x86_division(X86Registers& regs) {
  const auto* code = reinterpret_cast<const uint8_t*>(regs.rip);
  Decoded d;
  if (!decode(regs, code, d)) return false;
  const int bits = d.bits;
  // The dividend: ax for a byte divisor, else dx:ax at the operand size. The
  // convention's `x` is its low half, which compilers fill with the
  // numerator (the high half is its sign or zero extension).
  const uint64_t low = bits == 8 ? low_bits(regs.gpr[kRax], 8) : low_bits(regs.gpr[kRax], bits);
  const uint64_t high =
      bits == 8 ? low_bits(regs.gpr[kRax] >> 8, 8) : low_bits(regs.gpr[kRdx], bits);
  uint64_t quotient = 0, remainder = 0;
  if (d.divisor == 0) {
    quotient = 0;
    remainder = low;
  } else {
    // The quotient does not fit: INT_MIN / -1 from compiled code, or a high
    // half that is not an extension of the low one (hand-written code).
    // Wrap the true quotient to the operand size, as AArch64 does.
    const unsigned __int128 dividend = (static_cast<unsigned __int128>(high) << bits) | low;
    if (d.is_signed) {
      const int total = 2 * bits;
      __int128 n = static_cast<__int128>(dividend << (128 - total)) >> (128 - total);
      const __int128 v = sign_extend(d.divisor, bits);
      if (v == -1) {
        quotient = static_cast<uint64_t>(-static_cast<unsigned __int128>(n));
        remainder = 0;
      } else {
        quotient = static_cast<uint64_t>(n / v);
        remainder = static_cast<uint64_t>(n % v);
      }
    } else {
      quotient = static_cast<uint64_t>(dividend / d.divisor);
      remainder = static_cast<uint64_t>(dividend % d.divisor);
    }
  }
  if (bits == 8) {
    const uint64_t ax = low_bits(quotient, 8) | (low_bits(remainder, 8) << 8);
    write_low(regs.gpr[kRax], ax, 16);
  } else {
    write_low(regs.gpr[kRax], quotient, bits);
    write_low(regs.gpr[kRdx], remainder, bits);
  }
  regs.rip += d.length;
  return true;
}

}  // namespace coreai_torch::cpu
