#include "cuda/vector_alignment.h"

#include "cuda/known_alignment.h"
#include "cuda/llvm_ir_text.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace coreai_torch::cuda {
namespace {

using llvm_ir::block_of_label;
using llvm_ir::is_named_value;
using llvm_ir::lines_of;

// PTX's widest access (ld.v4.b32, ld.v2.b64) moves 16 bytes: a vector of more
// is split into 16-byte accesses however it is aligned.
constexpr int kWidestAccess = 16;

int element_bytes(std::string_view t) {
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
std::optional<AccessType> access_type(std::string_view s) {
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
bool parse_pointer(std::string_view rest, Access& a) {
  if (rest.substr(0, 4) != "ptr ") return false;
  rest.remove_prefix(4);
  if (rest.substr(0, 10) == "addrspace(") {
    const size_t close = rest.find(") ");
    if (close == std::string_view::npos) return false;
    a.space = " " + std::string(rest.substr(0, close + 1));
    rest.remove_prefix(close + 2);
  }
  a.pointer = std::string(rest);
  return is_named_value(rest);
}

// `tail` = ", align A[, metadata...]" ends the instruction.
bool parse_alignment(std::string_view tail, Access& a) {
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
std::optional<Access> parse_access(std::string_view line) {
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
    if (eq == std::string_view::npos || !is_named_value(line.substr(0, eq))) return std::nullopt;
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

int gain_of(const Access& a) { return std::min(a.type.bytes, kWidestAccess); }

// The entry block's name: unnamed, it takes the number after the unnamed
// parameters (%0, %1 ... then the block).
std::string entry_block(std::string_view define) {
  const size_t open = define.find('(');
  const size_t close = define.rfind(')');
  int unnamed = 0;
  for (size_t i = open; open != std::string_view::npos && i + 1 < close; ++i) {
    if (define[i] != ' ' || define[i + 1] != '%') continue;
    size_t j = i + 2;
    while (j < define.size() && std::isdigit(static_cast<unsigned char>(define[j])) != 0) ++j;
    if (j > i + 2 && j < define.size() && (define[j] == ',' || define[j] == ')')) ++unnamed;
  }
  return "%" + std::to_string(unnamed);
}

// The access as it was, with the alignment `align`.
std::string realigned(const Access& a, int align) {
  const std::string ptr = "ptr" + a.space + " " + a.pointer;
  const std::string head = a.store ? "  store " + a.type.spelling + " " + a.value + ", "
                                   : "  " + a.result + " = load " + a.type.spelling + ", ";
  return head + ptr + ", align " + std::to_string(align) + a.metadata + "\n";
}

// The access, tested: a branch on the address's low bits to one vector access
// of the full alignment or to the access as it was, which the code generator
// splits into element accesses; a load's value joins in a phi. The block is
// split there: what follows the access, its terminator included, is now in
// the block `%<id>.join`.
std::string versioned(const Access& a, const std::string& id) {
  const std::string ptr = "ptr" + a.space + " " + a.pointer;
  const std::string& t = a.type.spelling;
  const int gain = gain_of(a);
  std::string v;
  v += "  %" + id + ".address = ptrtoint " + ptr + " to i64\n";
  v += "  %" + id + ".low = and i64 %" + id + ".address, " + std::to_string(gain - 1) + "\n";
  v += "  %" + id + ".aligned = icmp eq i64 %" + id + ".low, 0\n";
  v += "  br i1 %" + id + ".aligned, label %" + id + ".whole, label %" + id + ".elements\n";
  for (const char* path : {"whole", "elements"}) {
    const int align = std::string(path) == "whole" ? gain : a.align;
    v += id + "." + path + ":\n";
    if (a.store) {
      v += "  store " + t + " " + a.value + ", " + ptr;
    } else {
      v += "  %" + id + "." + path + ".value = load " + t + ", " + ptr;
    }
    v += ", align " + std::to_string(align) + a.metadata + "\n";
    v += "  br label %" + id + ".join\n";
  }
  v += id + ".join:\n";
  if (!a.store) {
    v += "  " + a.result + " = phi " + t + " [ %" + id + ".whole.value, %" + id + ".whole ], [ %" +
         id + ".elements.value, %" + id + ".elements ]\n";
  }
  return v;
}

// A function's lines with its under-aligned vector accesses versioned, or
// given their full alignment where the IR proves it (known_alignment.h);
// `out.count` and `out.proven` grow by their numbers. The entry block is left
// whole where it holds allocas (split, the allocas after the split would no
// longer be static).
void version_function(const std::vector<std::string_view>& lines,
                      const std::map<std::string, int>& globals, VersionedVectors& out) {
  KnownAlignment known(lines, globals);
  const std::string entry = entry_block(lines.front());
  bool entry_has_allocas = false;
  for (size_t i = 1; i < lines.size() && block_of_label(lines[i]).empty(); ++i) {
    if (lines[i].find(" = alloca ") != std::string_view::npos) entry_has_allocas = true;
  }
  std::string block = entry;  // the current block, as it was named
  std::string current = entry;  // where its code after the last split goes
  std::vector<std::pair<std::string, std::string>> moved;  // block -> its terminator's block
  std::string body;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (std::string label = block_of_label(line); !label.empty()) {
      if (current != block) moved.emplace_back(block, current);
      block = current = label;
    }
    std::optional<Access> a = i == 0 ? std::nullopt : parse_access(line);
    if (a && a->align < gain_of(*a) && known.of_pointer(a->pointer) >= gain_of(*a)) {
      body += realigned(*a, gain_of(*a));
      ++out.proven;
      continue;
    }
    if (a && a->align < gain_of(*a) && !(block == entry && entry_has_allocas)) {
      const std::string id = "coreai.vector" + std::to_string(out.count++);
      body += versioned(*a, id);
      current = "%" + id + ".join";
      continue;
    }
    body += line;
    body += '\n';
  }
  if (current != block) moved.emplace_back(block, current);
  if (moved.empty()) {
    out.ir += body;
    return;
  }
  // A block whose terminator moved is no longer its successors' predecessor:
  // the block that took the terminator is.
  for (std::string_view line : lines_of(body)) {
    if (line.find(" = phi ") != std::string_view::npos) {
      std::string phi(line);
      for (const auto& [from, to] : moved) {
        const std::string was = ", " + from + " ]";
        const std::string now = ", " + to + " ]";
        for (size_t at = phi.find(was); at != std::string::npos; at = phi.find(was, at + now.size())) {
          phi.replace(at, was.size(), now);
        }
      }
      out.ir += phi;
    } else {
      out.ir += line;
    }
    out.ir += '\n';
  }
}

}  // namespace

VersionedVectors version_underaligned_vectors(const std::string& ir) {
  VersionedVectors out;
  out.ir.reserve(ir.size() + 4096);
  const std::vector<std::string_view> lines = lines_of(ir);
  const std::map<std::string, int> globals = KnownAlignment::global_alignments(lines);
  llvm_ir::rewrite_functions(lines, out.ir,
                             [&](const std::vector<std::string_view>& body, std::string&) {
                               version_function(body, globals, out);
                             });
  return out;
}

}  // namespace coreai_torch::cuda
