// The headers' tensor-core products (target_nvptx.h, multiply_8x8_fragments)
// as clang prints them in a kernel's optimized IR: what the rewrites that
// merge products (paired_products.h, chained_products.h) read and write.
#pragma once

#include "cuda/llvm_ir_text.h"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coreai_torch::cuda::mma_text {

constexpr std::string_view kResultType = "{ float, float, float, float }";
constexpr std::string_view kFloatZero = "0.000000e+00";

// The m16n8k8 product's call up to its element type, and what follows the
// type up to its operands.
constexpr std::string_view kCallK8 =
    "call { float, float, float, float } asm \"mma.sync.aligned.m16n8k8.row.col.f32.";
constexpr std::string_view kOperandsK8 =
    ".f32 {$0, $1, $2, $3}, {$4, $5}, {$6}, {$7, $8, $9, $10};\", "
    "\"=f,=f,=f,=f,r,r,r,f,f,f,f\"(";
constexpr std::string_view kCallK16 =
    "call { float, float, float, float } asm \"mma.sync.aligned.m16n8k16.row.col.f32.";
constexpr std::string_view kOperandsK16 =
    ".f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};\", "
    "\"=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f\"(";

// One m16n8k8 product, D = A B + C, with its operands as written (without
// their types). A's registers hold rows 0..7 and rows 8..15; C's four floats
// are D's layout: rows 0..7 in 0 and 1, rows 8..15 in 2 and 3.
struct ProductK8 {
  size_t line = 0;
  int block = 0;
  std::string result;   // its name, %N
  bool tail = false;
  std::string element;  // "f16" or "bf16"
  std::string a_low, a_high, b;
  std::array<std::string, 4> c;
  std::string after;  // what follows the operands: attributes, metadata
};

// `text` with the prefix `what` removed, or nullopt if it does not start so.
inline std::optional<std::string_view> after_prefix(std::string_view text, std::string_view what) {
  if (text.substr(0, what.size()) != what) return std::nullopt;
  return text.substr(what.size());
}

// The operand of `argument` ("i32 %x", "float 1.0") if its type is `type`:
// a plain value or literal, no attributes, no constant expressions.
inline std::optional<std::string> operand(std::string_view argument, std::string_view type) {
  std::optional<std::string_view> value = after_prefix(argument, type);
  if (!value || value->empty() || (*value)[0] != ' ') return std::nullopt;
  value->remove_prefix(1);
  if (value->empty() || value->find_first_of(" (") != std::string_view::npos) return std::nullopt;
  return std::string(*value);
}

// The m16n8k8 product on `line`, if it is one.
inline std::optional<ProductK8> parse_k8(std::string_view line) {
  ProductK8 p;
  p.result = llvm_ir::defined_by(line);
  if (p.result.empty()) return std::nullopt;
  std::string_view rest = llvm_ir::instruction_of(line);
  if (std::optional<std::string_view> t = after_prefix(rest, "tail ")) {
    p.tail = true;
    rest = *t;
  }
  std::optional<std::string_view> call = after_prefix(rest, kCallK8);
  if (!call) return std::nullopt;
  rest = *call;
  for (std::string_view element : {"f16", "bf16"}) {
    const std::string twice = std::string(element) + "." + std::string(element);
    if (std::optional<std::string_view> r = after_prefix(rest, twice)) {
      p.element = element;
      rest = *r;
      break;
    }
  }
  std::optional<std::string_view> args =
      p.element.empty() ? std::nullopt : after_prefix(rest, kOperandsK8);
  if (!args) return std::nullopt;
  const size_t close = args->find(')');
  if (close == std::string_view::npos) return std::nullopt;
  p.after = std::string(args->substr(close + 1));
  const std::vector<std::string_view> parts = llvm_ir::operands_of(args->substr(0, close));
  if (parts.size() != 7) return std::nullopt;
  std::optional<std::string> a_low = operand(parts[0], "i32"), a_high = operand(parts[1], "i32"),
                             b = operand(parts[2], "i32");
  if (!a_low || !a_high || !b) return std::nullopt;
  p.a_low = *a_low;
  p.a_high = *a_high;
  p.b = *b;
  for (int k = 0; k < 4; ++k) {
    std::optional<std::string> c = operand(parts[3 + k], "float");
    if (!c) return std::nullopt;
    p.c[k] = *c;
  }
  return p;
}

// The line that defines `result` as the m16n8k8 product with these operands.
inline std::string k8_line(const std::string& result, bool tail, const std::string& element,
                           const std::string& a_low, const std::string& a_high,
                           const std::string& b, const std::array<std::string, 4>& c,
                           const std::string& after) {
  return "  " + result + " = " + (tail ? "tail " : "") + std::string(kCallK8) + element + "." +
         element + std::string(kOperandsK8) + "i32 " + a_low + ", i32 " + a_high + ", i32 " + b +
         ", float " + c[0] + ", float " + c[1] + ", float " + c[2] + ", float " + c[3] + ")" +
         after;
}

// The line that defines `result` as an m16n8k16 product: A's registers are
// rows 0..7 and 8..15 of columns 0..7, then of columns 8..15; B's are rows
// 0..7, then 8..15.
inline std::string k16_line(const std::string& result, bool tail, const std::string& element,
                            const std::array<std::string, 4>& a,
                            const std::array<std::string, 2>& b,
                            const std::array<std::string, 4>& c, const std::string& after) {
  std::string line = "  " + result + " = " + (tail ? "tail " : "") + std::string(kCallK16) +
                     element + "." + element + std::string(kOperandsK16);
  for (const std::string& v : a) line += "i32 " + v + ", ";
  for (const std::string& v : b) line += "i32 " + v + ", ";
  line += "float " + c[0] + ", float " + c[1] + ", float " + c[2] + ", float " + c[3] + ")";
  return line + after;
}

}  // namespace coreai_torch::cuda::mma_text
