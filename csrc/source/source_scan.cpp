#include "source/source_scan.h"

#include "source/metal_fidelity.h"
#include "source/metal_tokens.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace coreai_torch::source {

std::string metal_to_cpp(std::string_view source) {
  const std::string cpp = rewrite_conversions(rewrite_half_literals(rewrite_address_spaces(
      mark_threadgroup_accesses(drop_address_space_variants(drop_metal_namespace_reopening(
          refuse_function_constants(rewrite_metal_pragmas(source))))))));
  return with_refused_word_guards(cpp);
}

std::string refuse_function_constants(std::string_view source) {
  const std::vector<Token> t = tokenize(source, false);
  SourceEdits edits;
  for (size_t k = 0; k + 3 < t.size(); ++k) {
    if (text(source, t[k]) != "[" || text(source, t[k + 1]) != "[" ||
        text(source, t[k + 2]) != "function_constant" || text(source, t[k + 3]) != "(") {
      continue;
    }
    size_t close = k + 4;
    while (close + 1 < t.size() &&
           !(text(source, t[close]) == "]" && text(source, t[close + 1]) == "]")) {
      ++close;
    }
    if (close + 1 >= t.size()) break;
    edits.replace(t[k].begin, t[close + 1].end, "= ::coreai::function_constant_unsupported{}");
    k = close + 1;
  }
  return edits.apply(source);
}

std::string rewrite_metal_pragmas(std::string_view source) {
  std::string out(source);
  for (size_t line = 0; line < out.size();) {
    size_t i = line;
    while (i < out.size() && (out[i] == ' ' || out[i] == '\t')) ++i;
    const std::string_view rest = std::string_view(out).substr(i);
    if (rest.starts_with("#pragma unroll full")) {
      // Metal's spelling of a full unroll; clang's is the bare pragma.
      out.replace(i + 14, 5, "     ");
    }
    const size_t next = out.find('\n', line);
    line = next == std::string::npos ? out.size() : next + 1;
  }
  return out;
}

bool needs_fibers(std::string_view source) {
  // Lanes of a SIMD-group may pass values through threadgroup memory in
  // lockstep, without a barrier: only fiber mode keeps them in step.
  if (declares_threadgroup_storage(source)) return true;
  const std::vector<Token> tokens = tokenize(source, true);
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (tokens[k].kind != TokenKind::Identifier) continue;
    const std::string_view name = text(source, tokens[k]);
    // Cooperative MPP operations synchronise their scope (MetalPerformancePrimitives.h).
    if (name == "execution_simdgroup" || name == "execution_simdgroups") return true;
    if (k + 1 == tokens.size()) break;
    const std::string_view next = text(source, tokens[k + 1]);
    // simdgroup_matrix<...>(diagonal) and the simdgroup_matrix functions need the lane.
    if (name.starts_with("simdgroup_") && (next == "(" || next == "<")) return true;
    if (next != "(") continue;
    if (name == "threadgroup_barrier" || name.starts_with("simd_") ||
        name.starts_with("quad_")) {
      return true;
    }
  }
  return false;
}

}  // namespace coreai_torch::source

namespace coreai_torch::source {
namespace {

// True if the digits at `begin` end a literal the tokenizer split: the
// fraction of `.5h` or the exponent of `1.0e+5h`.
bool continues_literal(std::string_view s, size_t begin) {
  if (begin >= 1 && s[begin - 1] == '.') return begin < 2 || !is_ident_char(s[begin - 2]);
  if (begin < 3 || (s[begin - 1] != '+' && s[begin - 1] != '-')) return false;
  if (s[begin - 2] != 'e' && s[begin - 2] != 'E') return false;
  size_t k = begin - 2;
  while (k > 0 && (std::isdigit(static_cast<unsigned char>(s[k - 1])) || s[k - 1] == '.')) --k;
  return k < begin - 2 && !(k > 0 && is_ident_char(s[k - 1]));
}

}  // namespace

std::string rewrite_half_literals(std::string_view source) {
  std::string out;
  out.reserve(source.size() + 16);
  size_t copied = 0;
  for (const Token& t : tokenize(source, false)) {
    const std::string_view word = text(source, t);
    if (t.kind != TokenKind::Other || word.size() < 2 ||
        !std::isdigit(static_cast<unsigned char>(word[0]))) {
      continue;
    }
    const char suffix = word.back();
    if (suffix != 'h' && suffix != 'H') continue;
    if (word.size() > 2 && word[0] == '0' && (word[1] == 'x' || word[1] == 'X' ||
                                               word[1] == 'b' || word[1] == 'B')) {
      continue;  // hexadecimal and binary literals have no half suffix
    }
    // A decimal literal: digits, '.', and an exponent marker only.
    const std::string_view body = word.substr(0, word.size() - 1);
    const bool decimal = std::all_of(body.begin(), body.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E';
    });
    if (!decimal) continue;
    const bool fraction_or_exponent = body.find_first_of(".eE") != std::string_view::npos;
    if (!fraction_or_exponent && !continues_literal(source, t.begin)) {
      continue;  // `2h` is not a Metal literal either: leave it to the compiler
    }
    out.append(source.substr(copied, t.end - 1 - copied));
    out.append("f16");
    copied = t.end;
  }
  out.append(source.substr(copied));
  return out;
}

}  // namespace coreai_torch::source
