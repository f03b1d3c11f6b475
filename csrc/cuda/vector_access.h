// One load or store of a kernel's optimized LLVM IR, as the CUDA backend's
// rewrites of vector accesses read it (vector_alignment.h, async_copies.h).
#pragma once

#include "cuda/llvm_ir_text.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>

namespace coreai_torch::cuda {

// PTX's widest access (ld.v4.b32, ld.v2.b64) moves 16 bytes: a vector of more
// is split into 16-byte accesses however it is aligned.
constexpr int kWidestAccess = 16;

inline int element_bytes(std::string_view t) {
  if (t == "i8") return 1;
  if (t == "i16" || t == "half" || t == "bfloat") return 2;
  if (t == "i32" || t == "float") return 4;
  if (t == "i64" || t == "double") return 8;
  return 0;
}

// The type an access moves.
struct AccessType {
  std::string spelling;  // "<4 x half>", "i32"
  int bytes = 0;
};

// The access type that `s` starts with: a vector `<N x T>` or a scalar of two
// bytes or more, of a power-of-two size. (clang reads a vector whose elements
// are used as one value, such as the bits of a half2, as an integer.)
inline std::optional<AccessType> access_type(std::string_view s) {
  if (s.empty()) return std::nullopt;
  if (s[0] != '<') {
    const size_t end = s.find_first_of(", ");
    const std::string_view scalar = s.substr(0, end);
    const int bytes = element_bytes(scalar);
    if (bytes < 2) return std::nullopt;
    return AccessType{std::string(scalar), bytes};
  }
  const size_t close = s.find('>');
  const size_t x = s.find(" x ");
  if (close == std::string_view::npos || x == std::string_view::npos || x > close) {
    return std::nullopt;
  }
  const std::string_view count = s.substr(1, x - 1);
  const std::string_view element = s.substr(x + 3, close - x - 3);
  if (count.empty() || count.size() > 3 ||
      !std::all_of(count.begin(), count.end(), [](char c) { return std::isdigit(c) != 0; })) {
    return std::nullopt;
  }
  const int bytes = std::stoi(std::string(count)) * element_bytes(element);
  if (bytes < 2 || (bytes & (bytes - 1)) != 0) return std::nullopt;  // not a power of two
  return AccessType{std::string(s.substr(0, close + 1)), bytes};
}

// One vector load or store, as the rewrite needs it.
struct Access {
  bool store = false;
  AccessType type;
  std::string space;    // "" (generic) or " addrspace(N)"
  std::string pointer;  // the address operand, a named value
  std::string value;    // a store's value operand
  std::string result;   // a load's result name
  int align = 0;
  std::string metadata;  // what follows the alignment: ", !tbaa !5" and the like, or ""
};

// `rest` = "ptr[ addrspace(N)] OPERAND": the address space and the operand.
inline bool parse_pointer(std::string_view rest, Access& a) {
  if (rest.substr(0, 4) != "ptr ") return false;
  rest.remove_prefix(4);
  if (rest.substr(0, 10) == "addrspace(") {
    const size_t close = rest.find(") ");
    if (close == std::string_view::npos) return false;
    a.space = " " + std::string(rest.substr(0, close + 1));
    rest.remove_prefix(close + 2);
  }
  a.pointer = std::string(rest);
  return llvm_ir::is_named_value(rest);
}

// `tail` = ", align A[, metadata...]" ends the instruction.
inline bool parse_alignment(std::string_view tail, Access& a) {
  constexpr std::string_view kAlign = ", align ";
  if (tail.substr(0, kAlign.size()) != kAlign) return false;
  tail.remove_prefix(kAlign.size());
  size_t digits = 0;
  while (digits < tail.size() && std::isdigit(static_cast<unsigned char>(tail[digits])) != 0) {
    ++digits;
  }
  if (digits == 0 || digits > 5) return false;
  a.align = std::stoi(std::string(tail.substr(0, digits)));
  tail.remove_prefix(digits);
  if (!tail.empty() && tail.substr(0, 3) != ", !") return false;
  a.metadata = std::string(tail);
  return true;
}

// The access on `line`, if it is a plain (not volatile, not atomic) load or
// store of a vector or a scalar of two bytes or more through a named pointer.
inline std::optional<Access> parse_access(std::string_view line) {
  const size_t start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) return std::nullopt;
  line.remove_prefix(start);
  Access a;
  std::string_view rest;
  if (line.substr(0, 6) == "store ") {
    a.store = true;
    rest = line.substr(6);
  } else if (line[0] == '%') {
    const size_t eq = line.find(" = load ");
    if (eq == std::string_view::npos || !llvm_ir::is_named_value(line.substr(0, eq))) return std::nullopt;
    a.result = std::string(line.substr(0, eq));
    rest = line.substr(eq + 8);
  } else {
    return std::nullopt;
  }
  std::optional<AccessType> type = access_type(rest);  // volatile and atomic fail here
  if (!type) return std::nullopt;
  a.type = *type;
  rest.remove_prefix(type->spelling.size());
  const size_t align = rest.find(", align ");
  if (align == std::string_view::npos || !parse_alignment(rest.substr(align), a)) {
    return std::nullopt;
  }
  rest = rest.substr(0, align);
  if (a.store) {
    // " VALUE, ptr ... OPERAND": the value may be a constant vector with commas.
    const size_t ptr = rest.rfind(", ptr ");
    if (rest.substr(0, 1) != " " || ptr == std::string_view::npos || ptr < 2) return std::nullopt;
    a.value = std::string(rest.substr(1, ptr - 1));
    rest.remove_prefix(ptr + 2);
  } else {
    if (rest.substr(0, 2) != ", ") return std::nullopt;
    rest.remove_prefix(2);
  }
  if (!parse_pointer(rest, a)) return std::nullopt;
  return a;
}

inline int gain_of(const Access& a) { return std::min(a.type.bytes, kWidestAccess); }

// The access as it was, with the alignment `align`.
inline std::string access_line(const Access& a, int align) {
  const std::string ptr = "ptr" + a.space + " " + a.pointer;
  const std::string head = a.store ? "  store " + a.type.spelling + " " + a.value + ", "
                                   : "  " + a.result + " = load " + a.type.spelling + ", ";
  return head + ptr + ", align " + std::to_string(align) + a.metadata + "\n";
}

}  // namespace coreai_torch::cuda
