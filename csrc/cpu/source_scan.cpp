#include "cpu/source_scan.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace coreai_torch::cpu {
namespace {

enum class TokenKind { Identifier, Punct, Other };

struct Token {
  TokenKind kind;
  size_t begin;
  size_t end;
};

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Tokens of the code. Comments and literals are skipped, so their text is never
// rewritten nor taken for a call; preprocessor lines are skipped unless
// `with_directives` (a macro body may call simd_sum, but the rewrite cannot
// know what a macro expands into, so it leaves directives alone).
std::vector<Token> tokenize(std::string_view s, bool with_directives) {
  std::vector<Token> tokens;
  size_t i = 0;
  bool line_start = true;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      line_start = true;
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (line_start && c == '#' && !with_directives) {
      // A directive runs to the end of the line, continued by backslashes.
      while (i < s.size() && s[i] != '\n') i += (s[i] == '\\' && i + 1 < s.size()) ? 2 : 1;
      continue;
    }
    line_start = false;
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const size_t close = s.find("*/", i + 2);
      i = close == std::string_view::npos ? s.size() : close + 2;
      continue;
    }
    if (c == '"' || c == '\'') {
      size_t j = i + 1;
      while (j < s.size() && s[j] != c && s[j] != '\n') j += (s[j] == '\\') ? 2 : 1;
      tokens.push_back({TokenKind::Other, i, std::min(j + 1, s.size())});
      i = std::min(j + 1, s.size());
      continue;
    }
    if (is_ident_start(c)) {
      size_t j = i;
      while (j < s.size() && is_ident_char(s[j])) ++j;
      tokens.push_back({TokenKind::Identifier, i, j});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && (is_ident_char(s[j]) || s[j] == '.' || s[j] == '\'')) ++j;
      tokens.push_back({TokenKind::Other, i, j});
      i = j;
      continue;
    }
    const size_t len = (c == ':' && i + 1 < s.size() && s[i + 1] == ':') ? 2 : 1;
    tokens.push_back({TokenKind::Punct, i, i + len});
    i += len;
  }
  return tokens;
}

std::string_view text(std::string_view s, const Token& t) {
  return s.substr(t.begin, t.end - t.begin);
}

enum class Qualified { Storage, PointerOrReference, Unknown };

// What the declaration after the `threadgroup` at tokens[at] declares.
Qualified classify(std::string_view s, const std::vector<Token>& tokens, size_t at) {
  int identifiers = 0;
  int angle_depth = 0;
  for (size_t k = at + 1; k < tokens.size(); ++k) {
    const Token& t = tokens[k];
    const std::string_view word = text(s, t);
    if (t.kind == TokenKind::Identifier) {
      ++identifiers;
      continue;
    }
    if (angle_depth > 0) {
      if (word == "<") ++angle_depth;
      if (word == ">") --angle_depth;
      continue;
    }
    if (word == "<") {
      ++angle_depth;
      continue;
    }
    if (word == "::") continue;
    if (word == "*" || word == "&") return Qualified::PointerOrReference;
    // A type and a name, then what follows a declarator name.
    if (identifiers >= 2 && (word == "[" || word == ";" || word == "=" || word == "," ||
                             word == "{" || word == "(" || word == ")")) {
      return Qualified::Storage;
    }
    return Qualified::Unknown;
  }
  return Qualified::Unknown;
}

}  // namespace

std::string rewrite_threadgroup(std::string_view source) {
  const std::vector<Token> tokens = tokenize(source, false);
  std::string out;
  out.reserve(source.size() + 64);
  size_t copied = 0;
  for (size_t k = 0; k < tokens.size(); ++k) {
    const Token& t = tokens[k];
    if (t.kind != TokenKind::Identifier || text(source, t) != "threadgroup") continue;
    const Qualified what = classify(source, tokens, k);
    if (what == Qualified::Unknown) continue;  // left for the compiler to reject
    out.append(source.substr(copied, t.begin - copied));
    // Spaces keep the columns of the rest of the line for pointers.
    out.append(what == Qualified::Storage ? "COREAI_THREADGROUP_STORAGE" : "           ");
    copied = t.end;
  }
  out.append(source.substr(copied));
  return out;
}

bool needs_fibers(std::string_view source) {
  const std::vector<Token> tokens = tokenize(source, true);
  for (size_t k = 0; k + 1 < tokens.size(); ++k) {
    if (tokens[k].kind != TokenKind::Identifier || text(source, tokens[k + 1]) != "(") continue;
    const std::string_view name = text(source, tokens[k]);
    if (name == "threadgroup_barrier" || name == "simdgroup_barrier" ||
        name.substr(0, 5) == "simd_" || name.substr(0, 5) == "quad_") {
      return true;
    }
  }
  return false;
}

}  // namespace coreai_torch::cpu

namespace coreai_torch::cpu {
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

}  // namespace coreai_torch::cpu

namespace coreai_torch::cpu {
namespace {

// float4, uint2, bfloat3, bool4 ...: Metal's vector type names.
bool is_vector_type_name(std::string_view w) {
  if (w.size() < 2) return false;
  const char n = w.back();
  if (n < '2' || n > '4') return false;
  std::string_view base = w.substr(0, w.size() - 1);
  if (base.size() > 1 && base[0] == 'u') base.remove_prefix(1);
  return base == "char" || base == "short" || base == "int" || base == "long" ||
         base == "half" || base == "bfloat" || base == "float" || base == "bool";
}

}  // namespace

std::string reject_c_style_vector_casts(std::string_view source) {
  const std::vector<Token> tokens = tokenize(source, false);
  std::string out;
  size_t copied = 0;
  for (size_t k = 0; k + 3 < tokens.size(); ++k) {
    if (text(source, tokens[k]) != "(" || text(source, tokens[k + 2]) != ")") continue;
    const Token& type = tokens[k + 1];
    if (type.kind != TokenKind::Identifier || !is_vector_type_name(text(source, type))) continue;
    if (k > 0) {  // sizeof(float4), f(float4): a call or operator, not a cast
      const std::string_view before = text(source, tokens[k - 1]);
      const bool name = tokens[k - 1].kind == TokenKind::Identifier;
      if ((name && before != "return" && before != "case") || before == ")" || before == "]" ||
          before == ">") {
        continue;
      }
    }
    const Token& next = tokens[k + 3];
    const std::string_view after = text(source, next);
    if (next.kind == TokenKind::Other) continue;  // a literal: splats as Metal does
    if (next.kind == TokenKind::Punct && after != "(" && after != "-" && after != "+" &&
        after != "!" && after != "~" && after != "*") {
      continue;  // not followed by an operand
    }
    const std::string name(text(source, type));
    out.append(source.substr(copied, type.begin - copied));
    out.append("coreai_c_style_cast_to_" + name + "_is_not_supported_write_" + name +
               "_of_x_instead");
    copied = type.end;
  }
  out.append(source.substr(copied));
  return out;
}

}  // namespace coreai_torch::cpu

namespace coreai_torch::cpu {

std::string metal_source_as_cpp(std::string_view source) {
  return reject_c_style_vector_casts(rewrite_half_literals(rewrite_threadgroup(source)));
}

}  // namespace coreai_torch::cpu
