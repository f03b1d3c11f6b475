#include "cuda/chained_products.h"

#include "cuda/llvm_ir_text.h"
#include "cuda/mma_text.h"

#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace coreai_torch::cuda {
namespace {

using llvm_ir::defined_by;
using llvm_ir::instruction_of;
using mma_text::after_prefix;
using mma_text::kFloatZero;
using mma_text::kResultType;
using mma_text::ProductK8;

// How many extracts and inserts an element of D is followed through.
constexpr int kTraceDepth = 8;

// An element of a product's D: the product's line and the element's index.
using Element = std::pair<size_t, int>;

// Whether the instruction reads only its operands and writes only its
// result, so that with its result unused it is dead: the value shuffles and
// casts between a product's D and the next product's C.
bool is_pure(std::string_view instruction) {
  for (std::string_view op : {"extractvalue ", "insertvalue ", "extractelement ",
                              "insertelement ", "bitcast "}) {
    if (instruction.substr(0, op.size()) == op) return true;
  }
  return llvm_ir::is_pure_asm_call(instruction);
}

// One function of the module, its chains fused.
class FunctionChains {
 public:
  FunctionChains(const std::vector<std::string_view>& lines, int& fused)
      : lines_(lines), fused_(fused), values_(llvm_ir::value_lines(lines)),
        replaced_(lines.size()) {
    int block = 0;
    for (size_t i = 1; i < lines_.size(); ++i) {
      if (!llvm_ir::block_of_label(lines_[i]).empty()) ++block;
      if (std::optional<ProductK8> p = mma_text::parse_k8(lines_[i])) {
        p->line = i;
        p->block = block;
        product_at_[i] = products_.size();
        products_.push_back(std::move(*p));
      }
    }
  }

  void fuse_all() {
    std::vector<bool> taken(products_.size(), false);
    for (size_t y = 0; y < products_.size(); ++y) {
      const ProductK8& second = products_[y];
      const std::optional<Element> from = element_of(second.c[0], 0);
      if (taken[y] || !from || from->second != 0) continue;
      const size_t x = product_at_.at(from->first);
      const ProductK8& first = products_[x];
      if (taken[x] || first.block != second.block || first.element != second.element ||
          !continues(first, second)) {
        continue;
      }
      std::map<std::string, bool> memo;
      if (!feeds_only(first.result, second, memo)) continue;
      replaced_[second.line] = mma_text::k16_line(
          second.result, second.tail, second.element,
          {first.a_low, first.a_high, second.a_low, second.a_high}, {first.b, second.b}, first.c,
          second.after);
      taken[x] = taken[y] = true;
      ++fused_;
    }
  }

  void write(std::string& out) const {
    for (size_t i = 0; i < lines_.size(); ++i) {
      out += replaced_[i] ? std::string_view(*replaced_[i]) : lines_[i];
      out += '\n';
    }
  }

 private:
  // Whether `second`'s C is `first`'s D: element for element, or, for rows
  // 8..15, zero in both where both A are zero there (the two products'
  // rows 8..15 then add up to zero, as `second`'s alone).
  bool continues(const ProductK8& first, const ProductK8& second) const {
    const bool upper_zero = first.a_high == "0" && second.a_high == "0" &&
                            first.c[2] == kFloatZero && first.c[3] == kFloatZero;
    for (int k = 0; k < 4; ++k) {
      if (k >= 2 && upper_zero && second.c[k] == kFloatZero) continue;
      const std::optional<Element> e = element_of(second.c[k], 0);
      if (!e || e->first != first.line || e->second != k) return false;
    }
    return true;
  }

  // The product element the float `v` is, through extracts and inserts.
  std::optional<Element> element_of(const std::string& v, int depth) const {
    auto found = values_.definition.find(v);
    if (found == values_.definition.end() || depth == kTraceDepth) return std::nullopt;
    std::optional<std::string_view> rest = after_prefix(
        instruction_of(lines_[found->second]), "extractvalue " + std::string(kResultType) + " ");
    if (!rest) return std::nullopt;
    const std::vector<std::string_view> parts = llvm_ir::operands_of(*rest);
    if (parts.size() < 2 || (parts[1] != "0" && parts[1] != "1" && parts[1] != "2" &&
                             parts[1] != "3")) {
      return std::nullopt;
    }
    return element_of_struct(std::string(parts[0]), parts[1][0] - '0', depth + 1);
  }

  // Element `k` of the four-float struct `s`: a product's D, or an insert
  // into one.
  std::optional<Element> element_of_struct(const std::string& s, int k, int depth) const {
    auto found = values_.definition.find(s);
    if (found == values_.definition.end() || depth == kTraceDepth) return std::nullopt;
    if (product_at_.count(found->second) != 0) return Element{found->second, k};
    std::optional<std::string_view> rest = after_prefix(
        instruction_of(lines_[found->second]), "insertvalue " + std::string(kResultType) + " ");
    if (!rest) return std::nullopt;
    const std::vector<std::string_view> parts = llvm_ir::operands_of(*rest);
    if (parts.size() < 3) return std::nullopt;
    std::optional<std::string> inserted = mma_text::operand(parts[1], "float");
    if (!inserted) return std::nullopt;
    if (parts[2] == std::to_string(k)) return element_of(*inserted, depth + 1);
    return element_of_struct(std::string(parts[0]), k, depth + 1);
  }

  // Whether every use of `v` reaches only `second`'s C, through pure
  // instructions, or ends unused.
  bool feeds_only(const std::string& v, const ProductK8& second,
                  std::map<std::string, bool>& memo) const {
    if (auto known = memo.find(v); known != memo.end()) return known->second;
    memo[v] = false;  // a use that comes back to `v` is no chain
    bool only = true;
    if (auto found = values_.uses.find(v); found != values_.uses.end()) {
      for (size_t line : found->second) {
        if (line == second.line) {
          only = v != second.a_low && v != second.a_high && v != second.b;
        } else {
          const std::string defined = defined_by(lines_[line]);
          only = !defined.empty() && is_pure(instruction_of(lines_[line])) &&
                 feeds_only(defined, second, memo);
        }
        if (!only) break;
      }
    }
    memo[v] = only;
    return only;
  }

  const std::vector<std::string_view>& lines_;
  int& fused_;
  const llvm_ir::ValueLines values_;
  std::vector<ProductK8> products_;
  std::map<size_t, size_t> product_at_;  // line -> index in products_
  std::vector<std::optional<std::string>> replaced_;
};

}  // namespace

ChainedProducts fuse_chained_products(const std::string& ir) {
  ChainedProducts out;
  if (ir.find("mma.sync.aligned.m16n8k8") == std::string::npos) {
    out.ir = ir;
    return out;
  }
  out.ir.reserve(ir.size());
  llvm_ir::rewrite_functions(llvm_ir::lines_of(ir), out.ir,
                             [&](const std::vector<std::string_view>& body, std::string& to) {
                               FunctionChains chains(body, out.count);
                               chains.fuse_all();
                               chains.write(to);
                             });
  return out;
}

}  // namespace coreai_torch::cuda
