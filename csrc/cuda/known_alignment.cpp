#include "cuda/known_alignment.h"

#include "cuda/llvm_ir_text.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <optional>

namespace coreai_torch::cuda {
namespace {

using llvm_ir::operands_of;

constexpr int kMaxBits = 12;  // 4096: more than any access needs
constexpr size_t kMaxDepth = 48;

// `s` without its leading words that are in `words` (flags such as nuw).
std::string_view skip_words(std::string_view s, std::initializer_list<std::string_view> words) {
  for (bool again = true; again;) {
    again = false;
    for (std::string_view w : words) {
      if (s.substr(0, w.size()) == w && s.size() > w.size() && s[w.size()] == ' ') {
        s.remove_prefix(w.size() + 1);
        again = true;
      }
    }
  }
  return s;
}

// The value of a typed operand: "i32 %x", "ptr addrspace(3) %p", "ptr @g".
std::string_view operand_value(std::string_view typed) {
  constexpr std::string_view kSpace = "ptr addrspace(";
  if (typed.substr(0, kSpace.size()) == kSpace) {
    const size_t close = typed.find(") ");
    return close == std::string_view::npos ? std::string_view() : typed.substr(close + 2);
  }
  const size_t space = typed.find(' ');
  return space == std::string_view::npos ? std::string_view() : typed.substr(space + 1);
}

int type_bits(std::string_view type) {  // log2 of the size, -1 if unknown
  if (type == "i8") return 0;
  if (type == "i16" || type == "half" || type == "bfloat") return 1;
  if (type == "i32" || type == "float") return 2;
  if (type == "i64" || type == "double") return 3;
  return -1;
}

std::optional<int64_t> literal(std::string_view v) {
  if (v.empty()) return std::nullopt;
  size_t i = v[0] == '-' ? 1 : 0;
  if (i == v.size() || v.size() > 19) return std::nullopt;
  for (size_t j = i; j < v.size(); ++j) {
    if (std::isdigit(static_cast<unsigned char>(v[j])) == 0) return std::nullopt;
  }
  return std::stoll(std::string(v));
}

int literal_bits(int64_t v) {
  if (v == 0) return kMaxBits;
  int bits = 0;
  while (bits < kMaxBits && (v & 1) == 0) {
    v >>= 1;
    ++bits;
  }
  return bits;
}

}  // namespace

std::map<std::string, int> KnownAlignment::global_alignments(
    const std::vector<std::string_view>& module) {
  std::map<std::string, int> out;
  for (std::string_view line : module) {
    if (line.empty() || line[0] != '@') continue;
    const size_t eq = line.find(" = ");
    const size_t align = line.rfind(", align ");
    if (eq == std::string_view::npos || align == std::string_view::npos) continue;
    if (line.find(" global ") == std::string_view::npos &&
        line.find(" constant ") == std::string_view::npos) {
      continue;
    }
    std::string_view digits = line.substr(align + 8);
    digits = digits.substr(0, digits.find_first_not_of("0123456789"));
    if (std::optional<int64_t> n = literal(digits); n && *n > 0) {
      out[std::string(line.substr(0, eq))] = static_cast<int>(std::min<int64_t>(*n, 1 << kMaxBits));
    }
  }
  return out;
}

KnownAlignment::KnownAlignment(const std::vector<std::string_view>& function,
                               const std::map<std::string, int>& globals)
    : globals_(globals) {
  for (size_t i = 1; i < function.size(); ++i) {
    std::string name = llvm_ir::defined_by(function[i]);
    if (name.empty()) continue;
    const std::string_view rest = function[i].substr(2 + name.size() + 3);
    definitions_.emplace(std::move(name), rest);
  }
}

int KnownAlignment::of_pointer(std::string_view pointer) { return 1 << pointer_bits(pointer); }

int KnownAlignment::pointer_bits(std::string_view p) {
  if (p.empty()) return 0;
  if (p[0] == '@') {
    auto found = globals_.find(std::string(p));
    return found == globals_.end() ? 0 : literal_bits(found->second);
  }
  if (p[0] == '%') return definition_bits(std::string(p), true);
  // A constant expression: addrspacecast (ptr addrspace(N) @g to ptr),
  // getelementptr [flags] (T, ptr BASE, iN C).
  const size_t open = p.find(" (");
  if (open == std::string_view::npos || p.back() != ')') return 0;
  const std::string_view op = p.substr(0, p.find(' '));
  const std::string_view inner = p.substr(open + 2, p.size() - open - 3);
  if (op == "addrspacecast") {
    const size_t to = inner.rfind(" to ");
    return to == std::string_view::npos ? 0 : pointer_bits(operand_value(inner.substr(0, to)));
  }
  return op == "getelementptr" ? element_pointer_bits(inner) : 0;
}

int KnownAlignment::element_pointer_bits(std::string_view operands) {
  // T, ptr BASE, iN INDEX: one index, into elements of a known size.
  const std::vector<std::string_view> parts = operands_of(operands);
  if (parts.size() != 3) return 0;
  const int element = type_bits(parts[0]);
  if (element < 0) return 0;
  const int base = pointer_bits(operand_value(parts[1]));
  return std::min({base, integer_bits(operand_value(parts[2])) + element, kMaxBits});
}

int KnownAlignment::integer_bits(std::string_view v) {
  if (std::optional<int64_t> n = literal(v)) return literal_bits(*n);
  if (!v.empty() && v[0] == '%') return definition_bits(std::string(v), false);
  return 0;
}

int KnownAlignment::definition_bits(const std::string& name, bool pointer) {
  if (auto found = known_.find(name); found != known_.end()) return found->second;
  auto def = definitions_.find(name);
  if (def == definitions_.end()) return 0;  // a parameter: nothing known
  const bool is_phi = def->second.substr(0, 4) == "phi ";
  if (pending_.count(name) != 0) {
    // A loop: optimistic for the innermost phi being computed (its value is
    // then the least of what enters it, every path through the loop
    // included), nothing known otherwise.
    if (is_phi && !phis_.empty() && phis_.back() == name) {
      ++optimistic_;
      return kMaxBits;
    }
    return 0;
  }
  if (pending_.size() >= kMaxDepth) return 0;
  pending_.insert(name);
  if (is_phi) phis_.push_back(name);
  const int optimistic_before = optimistic_;
  const int bits = compute(def->second, pointer);
  if (is_phi) phis_.pop_back();
  pending_.erase(name);
  // A phi's value is sound; any other value computed under the assumption
  // about a phi still being computed is valid only within that computation.
  if (is_phi || optimistic_ == optimistic_before) known_[name] = bits;
  return bits;
}

int KnownAlignment::compute(std::string_view rhs, bool pointer) {
  const size_t space = rhs.find(' ');
  if (space == std::string_view::npos) return 0;
  const std::string_view op = rhs.substr(0, space);
  std::string_view rest = skip_words(rhs.substr(space + 1), {"nuw", "nsw", "exact", "disjoint",
                                                            "nneg", "inbounds", "nusw"});
  if (op == "getelementptr") return pointer ? element_pointer_bits(rest) : 0;
  if (op == "addrspacecast" || op == "zext" || op == "sext" || op == "trunc" ||
      op == "bitcast") {
    // "T X to U"
    const size_t to = rest.rfind(" to ");
    if (to == std::string_view::npos) return 0;
    const std::string_view from = rest.substr(0, to);
    const std::string_view x = operand_value(from);
    int bits = pointer ? pointer_bits(x) : integer_bits(x);
    if (op == "addrspacecast" && !pointer) return 0;
    if (op == "trunc") {
      const std::string_view to_type = rest.substr(to + 4);
      if (to_type.size() < 2 || to_type[0] != 'i') return 0;
      std::optional<int64_t> width = literal(to_type.substr(1));
      if (!width) return 0;
      bits = std::min<int>(bits, static_cast<int>(*width));
    }
    return bits;
  }
  if (op == "phi" || op == "select") {
    // phi T [ X, %a ], [ Y, %b ] / select i1 C, T X, T Y
    const std::vector<std::string_view> parts = operands_of(rest);
    int bits = kMaxBits;
    if (op == "select") {
      if (parts.size() != 3) return 0;
      for (size_t i = 1; i < 3; ++i) {
        const std::string_view x = operand_value(parts[i]);
        bits = std::min(bits, pointer ? pointer_bits(x) : integer_bits(x));
      }
      return bits;
    }
    const size_t type_end = rest.find(' ');
    if (type_end == std::string_view::npos) return 0;
    for (std::string_view incoming : operands_of(rest.substr(type_end + 1))) {
      if (incoming.size() < 4 || incoming.front() != '[' || incoming.back() != ']') return 0;
      const std::vector<std::string_view> pair =
          operands_of(incoming.substr(2, incoming.size() - 4));
      if (pair.size() != 2) return 0;
      bits = std::min(bits, pointer ? pointer_bits(pair[0]) : integer_bits(pair[0]));
    }
    return bits;
  }
  if (pointer) return 0;
  // Integer arithmetic: OP iN X, Y.
  const std::vector<std::string_view> parts = operands_of(rest);
  if (parts.size() != 2) return 0;
  const int x = integer_bits(operand_value(parts[0]));
  const std::string_view y_text = parts[1];
  if (op == "shl") {
    const std::optional<int64_t> by = literal(y_text);
    if (!by || *by < 0) return x;
    return static_cast<int>(std::min<int64_t>(kMaxBits, x + *by));
  }
  const int y = integer_bits(y_text);
  if (op == "mul") return std::min(kMaxBits, x + y);
  if (op == "and") return std::max(x, y);
  if (op == "or" || op == "add" || op == "sub" || op == "xor") return std::min(x, y);
  return 0;
}

}  // namespace coreai_torch::cuda
