// Debug mode's integer division checks. Debug libraries are compiled with
// clang's -fsanitize=integer-divide-by-zero,signed-integer-overflow, which
// checks every scalar division and remainder (and signed + - *) and calls the
// handlers below when a check fails; they are defined here, in the kernel
// library, in place of a sanitizer runtime. A division by zero or INT_MIN / -1
// is reported to the launcher with its source position (the #line directives
// of the rendering make that the user's `src` or `helper_src` line), which
// fails the launch. Signed overflow of + - * wraps on the GPU and is not
// reported. Vector divisions are not instrumented by clang; on x86-64 the
// launcher catches those when they trap.
#ifndef COREAI_MSL_DEBUG_CHECKS_H
#define COREAI_MSL_DEBUG_CHECKS_H

#include <cstdint>

#include "runtime.h"

namespace coreai::debug_checks {

// The layouts clang's instrumentation passes to the handlers.
struct SourceLocation {
  const char* file;
  std::uint32_t line;
  std::uint32_t column;
};
struct TypeDescriptor {
  std::uint16_t kind;  // 0: an integer type
  std::uint16_t info;  // integers: bit 0 signed, the rest log2(bits)
  char name[1];
};
struct OverflowData {
  SourceLocation location;
  const TypeDescriptor* type;
};

// An integer operand as the 64-bit pattern of its value (sign-extended when
// the type is signed). Operands of up to 64 bits are passed by value.
inline std::uint64_t operand(const TypeDescriptor& type, std::uintptr_t value) {
  const unsigned bits = 1u << (type.info >> 1);
  if ((type.info & 1) != 0 && bits < 64) {
    const unsigned shift = 64 - bits;
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(std::uint64_t{value} << shift) >>
                                      shift);
  }
  return value;
}

}  // namespace coreai::debug_checks

// Defined, not inline: the instrumentation calls them without the source
// naming them. One translation unit per kernel library includes this header.
extern "C" {

void __ubsan_handle_divrem_overflow(coreai::debug_checks::OverflowData* data,
                                           std::uintptr_t lhs, std::uintptr_t rhs) {
  const auto& type = *data->type;
  const std::uint64_t divisor = coreai::debug_checks::operand(type, rhs);
  coreai::g_runtime->report_division(divisor == 0 ? 0u : 1u, data->location.file,
                                     data->location.line, data->location.column, type.name,
                                     coreai::debug_checks::operand(type, lhs), divisor,
                                     type.info & 1u, coreai::g_debug_thread_position);
}

// Signed + - * and negation wrap, as on the GPU.
void __ubsan_handle_add_overflow(void*, std::uintptr_t, std::uintptr_t) {}
void __ubsan_handle_sub_overflow(void*, std::uintptr_t, std::uintptr_t) {}
void __ubsan_handle_mul_overflow(void*, std::uintptr_t, std::uintptr_t) {}
void __ubsan_handle_negate_overflow(void*, std::uintptr_t) {}

}  // extern "C"

#endif  // COREAI_MSL_DEBUG_CHECKS_H
