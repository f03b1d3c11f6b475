// Reading LLVM IR as clang prints it (-emit-llvm -S), line by line: what the
// CUDA backend's rewrites of a kernel's optimized IR (vector_alignment.h,
// paired_products.h, chained_products.h) share. They run between clang's
// optimizer and its code generator, where no LLVM library is linked into the
// extension.
#pragma once

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coreai_torch::cuda::llvm_ir {

// A character of an unquoted IR name.
inline bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '$' || c == '.' ||
         c == '_';
}

// A value named in the IR: %x, @g, %"quoted name".
inline bool is_named_value(std::string_view s) {
  if (s.size() < 2 || (s[0] != '%' && s[0] != '@')) return false;
  if (s[1] == '"') return s.size() >= 3 && s.back() == '"' && s.find('"', 2) == s.size() - 1;
  return std::all_of(s.begin() + 1, s.end(), is_name_char);
}

// The lines of `text`, without their line ends.
inline std::vector<std::string_view> lines_of(const std::string& text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.emplace_back(text.data() + start, end - start);
    start = end + 1;
  }
  return lines;
}

// The block a label line starts ("%5" for `5:`, "%name" for `name:`), or "".
inline std::string block_of_label(std::string_view line) {
  if (line.empty() || line[0] == ' ' || line[0] == ';' || line[0] == '}') return {};
  size_t end = 0;
  if (line[0] == '"') {
    end = line.find('"', 1);
    if (end == std::string_view::npos) return {};
    ++end;
  } else {
    while (end < line.size() && is_name_char(line[end])) ++end;
  }
  if (end == 0 || end >= line.size() || line[end] != ':') return {};
  return "%" + std::string(line.substr(0, end));
}

// The value `line` defines (`  %x = ...`), or "".
inline std::string defined_by(std::string_view line) {
  if (line.substr(0, 3) != "  %") return {};
  const size_t eq = line.find(" = ");
  if (eq == std::string_view::npos || !is_named_value(line.substr(2, eq - 2))) return {};
  return std::string(line.substr(2, eq - 2));
}

// The named values a line mentions, with where each starts.
inline std::vector<std::pair<size_t, std::string>> names_in(std::string_view line) {
  std::vector<std::pair<size_t, std::string>> names;
  for (size_t at = line.find('%'); at != std::string_view::npos; at = line.find('%', at + 1)) {
    size_t end = at + 1;
    if (end < line.size() && line[end] == '"') {
      end = line.find('"', end + 1);
      if (end == std::string_view::npos) break;
      ++end;
    } else {
      while (end < line.size() && is_name_char(line[end])) ++end;
    }
    if (end > at + 1) names.emplace_back(at, std::string(line.substr(at, end - at)));
    at = end - 1;
  }
  return names;
}

// What `line` does: what follows `  %x = ` on a line that defines %x, or
// the line without its indent.
inline std::string_view instruction_of(std::string_view line) {
  const std::string defined = defined_by(line);
  if (!defined.empty()) return line.substr(2 + defined.size() + 3);
  const size_t start = line.find_first_not_of(' ');
  return start == std::string_view::npos ? std::string_view() : line.substr(start);
}

// A function's named values: the line that defines each, and the lines that
// read each (in order, a line once per mention).
struct ValueLines {
  std::map<std::string, size_t> definition;
  std::map<std::string, std::vector<size_t>> uses;
};

// The values of a function's `lines` (the `define` line first, not read).
inline ValueLines value_lines(const std::vector<std::string_view>& lines) {
  ValueLines values;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string defined = defined_by(lines[i]);
    if (!defined.empty()) values.definition[defined] = i;
    for (const auto& [at, name] : names_in(lines[i])) {
      if (at != 2 || name != defined) values.uses[name].push_back(i);
    }
  }
  return values;
}

// `s` split at its top-level ", " (not inside (), [], <> or {}): an
// instruction's operands.
inline std::vector<std::string_view> operands_of(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(' || c == '[' || c == '<' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '>' || c == '}') --depth;
    if (depth == 0 && c == ',' && i + 1 < s.size() && s[i + 1] == ' ') {
      parts.push_back(s.substr(start, i - start));
      start = i + 2;
    }
  }
  parts.push_back(s.substr(start));
  return parts;
}

// Whether an instruction (what follows `  %x = `, or a line without a
// result, unindented) is a call.
inline bool is_call(std::string_view instruction) {
  for (std::string_view marker : {"tail ", "notail ", "musttail "}) {
    if (instruction.substr(0, marker.size()) == marker) instruction.remove_prefix(marker.size());
  }
  return instruction.substr(0, 5) == "call ";
}

// Whether an instruction calls inline assembly that is not volatile and
// clobbers no memory: it reads its operands and writes its results only
// (the headers' tensor-core products, lane shuffles).
inline bool is_pure_asm_call(std::string_view instruction) {
  return is_call(instruction) && instruction.find(" asm ") != std::string_view::npos &&
         instruction.find(" asm sideeffect ") == std::string_view::npos &&
         instruction.find("~{memory}") == std::string_view::npos;
}

// Whether `line` opens a function body (`define ... {`).
inline bool opens_function(std::string_view line) {
  return line.substr(0, 7) == "define " && !line.empty() && line.back() == '{';
}

// The module's `lines` written to `out`, each function's body (its `define`
// line and the lines up to its closing brace, which follows as it was) as
// `rewrite(body, out)` writes it.
template <class Rewrite>
void rewrite_functions(const std::vector<std::string_view>& lines, std::string& out,
                       Rewrite&& rewrite) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!opens_function(lines[i])) {
      out += lines[i];
      out += '\n';
      continue;
    }
    size_t end = i;
    while (end < lines.size() && lines[end] != "}") ++end;
    rewrite(std::vector<std::string_view>(lines.begin() + i, lines.begin() + end), out);
    i = end - 1;
  }
}

}  // namespace coreai_torch::cuda::llvm_ir
