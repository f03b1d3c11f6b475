#include "cuda/paired_products.h"

#include "cuda/llvm_ir_text.h"
#include "cuda/mma_text.h"

#include <map>
#include <optional>
#include <string_view>
#include <vector>

namespace coreai_torch::cuda {
namespace {

using llvm_ir::defined_by;
using llvm_ir::names_in;
using mma_text::kFloatZero;
using mma_text::kResultType;
using mma_text::ProductK8;

// How deep a chain of extracts and casts an operand is repeated through.
constexpr int kCopyDepth = 3;

// The product on `line`, if it is the headers' 8x8 product (A's rows 8..15
// and C's zero).
std::optional<ProductK8> parse_product(std::string_view line) {
  std::optional<ProductK8> p = mma_text::parse_k8(line);
  if (!p || p->a_high != "0" || p->c[2] != kFloatZero || p->c[3] != kFloatZero) return std::nullopt;
  return p;
}

// One function of the module, paired.
class FunctionPairing {
 public:
  FunctionPairing(const std::vector<std::string_view>& lines, int& pairs)
      : lines_(lines),
        pairs_(pairs),
        values_(llvm_ir::value_lines(lines)),
        block_of_(lines.size(), 0),
        replaced_(lines.size()),
        before_(lines.size()) {
    int block = 0;
    for (size_t i = 1; i < lines_.size(); ++i) {
      if (!llvm_ir::block_of_label(lines_[i]).empty()) ++block;
      block_of_[i] = block;
      if (std::optional<ProductK8> p = parse_product(lines_[i])) {
        p->line = i;
        p->block = block;
        products_.push_back(std::move(*p));
      }
    }
    for (const ProductK8& p : products_) low_rows_only_.push_back(low_rows_only(p));
  }

  void pair_all() {
    std::vector<bool> taken(products_.size(), false);
    for (size_t x = 0; x < products_.size(); ++x) {
      if (taken[x] || !low_rows_only_[x]) continue;
      for (size_t y = x + 1; y < products_.size(); ++y) {
        const ProductK8& first = products_[x];
        const ProductK8& second = products_[y];
        if (taken[y] || second.block != first.block || second.element != first.element ||
            second.b != first.b || !low_rows_only_[y]) {
          continue;
        }
        Copies copies;
        const std::string tag = "%coreai.pair" + std::to_string(pairs_);
        auto at_first = [&](const std::string& v) { return available(v, first, tag, 0, copies); };
        std::optional<std::string> a = at_first(second.a_low), c0 = at_first(second.c[0]),
                                   c1 = at_first(second.c[1]);
        if (!a || !c0 || !c1) continue;
        emit(first, second, *a, *c0, *c1, tag, copies.text);
        taken[x] = taken[y] = true;
        ++pairs_;
        break;
      }
    }
  }

  void write(std::string& out) const {
    for (size_t i = 0; i < lines_.size(); ++i) {
      out += before_[i];
      if (replaced_[i]) {
        out += *replaced_[i];
      } else {
        out += lines_[i];
      }
      out += '\n';
    }
  }

 private:
  // Definitions repeated before a product: their text, and the copy of each value.
  struct Copies {
    std::string text;
    std::map<std::string, std::string> of;
  };

  // Whether nothing reads rows 8..15 of the product's result: every use is
  // an extract of element 0 or 1.
  bool low_rows_only(const ProductK8& p) const {
    auto found = values_.uses.find(p.result);
    if (found == values_.uses.end()) return true;
    for (size_t line : found->second) {
      if (defined_by(lines_[line]).empty()) return false;
      const std::string_view rest = llvm_ir::instruction_of(lines_[line]);
      const std::string extract =
          "extractvalue " + std::string(kResultType) + " " + p.result + ", ";
      if (rest.substr(0, extract.size()) != extract) return false;
      // Element 0 or 1, then the end of the line or its metadata (!dbg).
      const std::string_view index = rest.substr(extract.size());
      if (index.empty() || (index[0] != '0' && index[0] != '1')) return false;
      if (index.size() > 1 && index.substr(1, 3) != ", !") return false;
    }
    return true;
  }

  // The operand `v` usable at the product `at`: itself where it is known
  // there, or a copy of its definition made just before it (an extract or a
  // cast of values known there, `depth` levels deep); nullopt otherwise.
  std::optional<std::string> available(const std::string& v, const ProductK8& at,
                                       const std::string& tag, int depth, Copies& copies) const {
    if (v.empty() || v[0] != '%') return v;  // a literal
    auto found = values_.definition.find(v);
    // A parameter; or defined in another block, which then dominates this
    // one (the second product reads it here); or earlier in this block.
    if (found == values_.definition.end() || block_of_[found->second] != at.block ||
        found->second < at.line) {
      return v;
    }
    if (auto made = copies.of.find(v); made != copies.of.end()) return made->second;
    if (depth == kCopyDepth) return std::nullopt;
    const std::string_view rest = llvm_ir::instruction_of(lines_[found->second]);
    const bool pure = rest.substr(0, 13) == "extractvalue " ||
                      rest.substr(0, 15) == "extractelement " || rest.substr(0, 8) == "bitcast ";
    if (!pure) return std::nullopt;
    std::string text;
    size_t from = 0;
    for (const auto& [pos, name] : names_in(rest)) {
      std::optional<std::string> known = available(name, at, tag, depth + 1, copies);
      if (!known) return std::nullopt;
      text += rest.substr(from, pos - from);
      text += *known;
      from = pos + name.size();
    }
    text += rest.substr(from);
    const std::string copy = tag + ".copy" + std::to_string(copies.of.size());
    copies.text += "  " + copy + " = " + text + "\n";
    copies.of[v] = copy;
    return copy;
  }

  void emit(const ProductK8& first, const ProductK8& second, const std::string& a,
            const std::string& c0, const std::string& c1, const std::string& tag,
            const std::string& copies) {
    before_[first.line] = copies;
    replaced_[first.line] = mma_text::k8_line(first.result, first.tail, first.element,
                                              first.a_low, a, first.b,
                                              {first.c[0], first.c[1], c0, c1}, first.after);
    const std::string type(kResultType);
    replaced_[second.line] =
        "  " + tag + ".d2 = extractvalue " + type + " " + first.result + ", 2\n" +  //
        "  " + tag + ".d3 = extractvalue " + type + " " + first.result + ", 3\n" +  //
        "  " + tag + ".low = insertvalue " + type + " poison, float " + tag + ".d2, 0\n" +
        "  " + second.result + " = insertvalue " + type + " " + tag + ".low, float " + tag +
        ".d3, 1";
  }

  const std::vector<std::string_view>& lines_;
  int& pairs_;
  const llvm_ir::ValueLines values_;
  std::vector<int> block_of_;  // per line: its block's number in the function
  std::vector<ProductK8> products_;
  std::vector<bool> low_rows_only_;  // per product: nothing reads its rows 8..15
  std::vector<std::optional<std::string>> replaced_;
  std::vector<std::string> before_;
};

}  // namespace

PairedProducts pair_products_sharing_b(const std::string& ir) {
  PairedProducts out;
  if (ir.find("mma.sync.aligned.m16n8k8") == std::string::npos) {
    out.ir = ir;
    return out;
  }
  out.ir.reserve(ir.size() + 4096);
  llvm_ir::rewrite_functions(llvm_ir::lines_of(ir), out.ir,
                             [&](const std::vector<std::string_view>& body, std::string& to) {
                               FunctionPairing pairing(body, out.count);
                               pairing.pair_all();
                               pairing.write(to);
                             });
  return out;
}

}  // namespace coreai_torch::cuda
