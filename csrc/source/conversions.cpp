// The conversion pass (source_scan.h, coreai_msl/conversion.h).
#include <set>
#include <string>

#include "source/metal_tokens.h"
#include "source/source_scan.h"

namespace coreai_torch::source {
namespace {

bool is(std::string_view s, const std::vector<Token>& t, size_t k, std::string_view word) {
  return k < t.size() && text(s, t[k]) == word;
}

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

// Names declared as types in the source: template type parameters
// (`typename T`, `class T` before `,`, `>`, `=` or `...`), `using T = ...;`
// and `typedef ... T;`. Casts through them may be vector casts.
std::set<std::string, std::less<>> declared_type_names(std::string_view s,
                                                       const std::vector<Token>& t) {
  std::set<std::string, std::less<>> names;
  for (size_t k = 0; k + 2 < t.size(); ++k) {
    const std::string_view w = text(s, t[k]);
    if ((w == "typename" || w == "class") && t[k + 1].kind == TokenKind::Identifier) {
      const std::string_view next = text(s, t[k + 2]);
      if (next == "," || next == ">" || next == "=") names.emplace(text(s, t[k + 1]));
    } else if (w == "using" && t[k + 1].kind == TokenKind::Identifier && is(s, t, k + 2, "=")) {
      names.emplace(text(s, t[k + 1]));
    } else if (w == "typedef") {
      size_t end = k + 1;
      bool simple = true;
      while (end < t.size() && text(s, t[end]) != ";") {
        const std::string_view e = text(s, t[end]);
        simple = simple && e != "(" && e != "[" && e != "{";
        ++end;
      }
      if (simple && end < t.size() && t[end - 1].kind == TokenKind::Identifier) {
        names.emplace(text(s, t[end - 1]));
      }
    }
  }
  return names;
}

bool is_type_keyword(std::string_view w) {
  return w == "const" || w == "volatile" || w == "typename";
}

// End (one past) of the type-id starting at tokens[k]: `name`, `ns::name`,
// `name<...>`, with cv-qualifiers or `typename` in front and cv-qualifiers
// after; k itself when there is none.
size_t type_id_end(std::string_view s, const std::vector<Token>& t, size_t k) {
  size_t j = k;
  while (j < t.size() && is_type_keyword(text(s, t[j]))) ++j;
  if (is(s, t, j, "::")) ++j;
  while (j < t.size() && t[j].kind == TokenKind::Identifier) {
    ++j;
    if (is(s, t, j, "<")) {
      int depth = 0;
      for (; j < t.size(); ++j) {
        const std::string_view w = text(s, t[j]);
        if (w == "<") ++depth;
        if (w == ">" && --depth == 0) break;
        if (w == ";" || w == "{" || w == "}") return k;
      }
      if (j >= t.size()) return k;
      ++j;
    }
    if (!is(s, t, j, "::")) {
      while (j < t.size() && is_type_keyword(text(s, t[j])) && text(s, t[j]) != "typename") ++j;
      return j;
    }
    ++j;
  }
  return k;
}

// The last identifier of the type-id [begin, end): the name that says what it is.
std::string_view last_name(std::string_view s, const std::vector<Token>& t, size_t begin,
                           size_t end) {
  std::string_view name;
  int depth = 0;
  for (size_t k = begin; k < end; ++k) {
    const std::string_view w = text(s, t[k]);
    if (w == "<") ++depth;
    if (w == ">") --depth;
    if (depth == 0 && t[k].kind == TokenKind::Identifier && !is_type_keyword(w)) name = w;
  }
  return name;
}

// The `)` that closes the `(` at tokens[open]; tokens.size() if none does.
size_t matching_paren(std::string_view s, const std::vector<Token>& t, size_t open) {
  int depth = 0;
  for (size_t k = open; k < t.size(); ++k) {
    const std::string_view w = text(s, t[k]);
    if (w == "(") ++depth;
    if (w == ")" && --depth == 0) return k;
    if (w == ";" || w == "{" || w == "}") break;
  }
  return t.size();
}

bool starts_operand(std::string_view s, const Token& t) {
  if (t.kind != TokenKind::Punct) return true;  // a name, a literal
  const std::string_view w = text(s, t);
  return w == "(" || w == "-" || w == "+" || w == "!" || w == "~" || w == "*" || w == "&" ||
         w == "::";
}

// A token before `(` that makes `(T)` an argument list rather than a cast:
// a function or macro name, a call's closing parenthesis, a subscript, a
// template argument list.
bool ends_callee(std::string_view s, const std::vector<Token>& t, size_t k) {
  const std::string_view w = text(s, t[k]);
  if (t[k].kind == TokenKind::Identifier) {
    return w != "return" && w != "case" && w != "else" && w != "do" && w != "co_return";
  }
  return w == ")" || w == "]" || w == ">";
}

}  // namespace

std::string rewrite_conversions(std::string_view source) {
  const std::vector<Token> t = tokenize(source, true);
  const auto declared = declared_type_names(source, t);
  auto vector_type = [&](size_t begin, size_t end) {
    const std::string_view name = last_name(source, t, begin, end);
    return is_vector_type_name(name) || name == "vec" || declared.count(name) != 0;
  };
  SourceEdits edits;
  size_t cast_close = t.size();  // the `)` of the last cast rewritten
  for (size_t k = 0; k + 1 < t.size(); ++k) {
    // C-style casts: `(T)` then an operand. After another cast's `)` a `(`
    // starts an operand, not an argument list: `(half4)(float4)x`.
    if (text(source, t[k]) == "(" &&
        (k == 0 || k - 1 == cast_close || !ends_callee(source, t, k - 1))) {
      // `(decltype(e))x`: a cast to the type of e, without e's reference.
      if (is(source, t, k + 1, "decltype") && is(source, t, k + 2, "(")) {
        const size_t close = matching_paren(source, t, k + 2);
        if (close + 2 < t.size() && is(source, t, close + 1, ")") &&
            starts_operand(source, t[close + 2])) {
          const std::string type(source.substr(t[k + 1].begin, t[close].end - t[k + 1].begin));
          edits.replace(t[k].begin, t[close + 1].end,
                        "::coreai::cast_to<::std::remove_reference_t<" + type + ">>->*");
          cast_close = close + 1;
          k = close + 1;
          continue;
        }
      }
      const size_t end = type_id_end(source, t, k + 1);
      if (end > k + 1 && is(source, t, end, ")") && end + 1 < t.size() &&
          starts_operand(source, t[end + 1]) && vector_type(k + 1, end)) {
        const std::string type(source.substr(t[k + 1].begin, t[end - 1].end - t[k + 1].begin));
        edits.replace(t[k].begin, t[end].end, "::coreai::cast_to<" + type + ">->*");
        cast_close = end;
        k = end;
        continue;
      }
    }
    // Functional casts through a declared name or vec<...>: `T(args)`. Metal's
    // own vector names are macros already (vector.h).
    if (t[k].kind != TokenKind::Identifier) continue;
    const std::string_view name = text(source, t[k]);
    if (name != "vec" && declared.count(name) == 0) continue;
    // A qualified name starts at its first qualifier: metal::vec<int, 2>(x).
    size_t first = k;
    while (first >= 2 && is(source, t, first - 1, "::") &&
           t[first - 2].kind == TokenKind::Identifier) {
      first -= 2;
    }
    if (first > 0) {
      const std::string_view before = text(source, t[first - 1]);
      const bool member =
          before == "." || (before == ">" && first > 1 && is(source, t, first - 2, "-"));
      if (member || before == "~" || before == "operator" || before == "::" ||
          (t[first - 1].kind == TokenKind::Identifier && ends_callee(source, t, first - 1) &&
           before != "typename")) {
        continue;
      }
    }
    const size_t end = type_id_end(source, t, k);
    if (end <= k || !is(source, t, end, "(")) continue;
    // `T::f(` calls a member of T: the name before `(` must be the type's.
    const std::string_view last = last_name(source, t, k, end);
    if (last != "vec" && declared.count(last) == 0) continue;
    const std::string type(source.substr(t[first].begin, t[end - 1].end - t[first].begin));
    edits.replace(t[first].begin, t[end].end, "::coreai::construct<" + type + ">(");
    k = end;
  }
  return edits.apply(source);
}

}  // namespace coreai_torch::source
