#include "cpu/kernel_statements.h"

namespace coreai_torch::cpu {
namespace {

// Index of the token that closes the group opened at `open` ((, [ or {), or
// tokens.size() when it is never closed.
size_t closing(std::string_view s, const std::vector<Token>& t, size_t open) {
  int depth = 0;
  for (size_t k = open; k < t.size(); ++k) {
    const std::string_view w = text(s, t[k]);
    if (w == "(" || w == "[" || w == "{") ++depth;
    if ((w == ")" || w == "]" || w == "}") && --depth == 0) return k;
  }
  return t.size();
}

// Index just past the `>` closing the `<` at `open`, or `open` if none closes
// before a `;`, `{` or `}`.
size_t skip_angles(std::string_view s, const std::vector<Token>& t, size_t open, size_t last) {
  int angles = 0;
  for (size_t k = open; k < last; ++k) {
    const std::string_view w = text(s, t[k]);
    if (w == "(" || w == "[") {
      k = skip_group(s, t, k) - 1;
      continue;
    }
    if (w == "<") ++angles;
    if (w == ">" && --angles == 0) return k + 1;
    if (w == ";" || w == "{" || w == "}") break;
  }
  return open;
}

// The first token at or after `k` (before `last`) that is `word` outside any
// parentheses, brackets and braces; `last` if none.
size_t find_top_level(std::string_view s, const std::vector<Token>& t, size_t k, size_t last,
                      std::string_view word) {
  while (k < last) {
    const std::string_view w = text(s, t[k]);
    if (w == word) return k;
    if (w == "(" || w == "[" || w == "{") {
      k = skip_group(s, t, k);
      continue;
    }
    ++k;
  }
  return last;
}

// The first `,` at or after `k` (before `last`) outside parentheses,
// brackets, braces and template argument lists (`f<a, b>(x)`, `T<a, b>::c`);
// `last` if none.
size_t find_top_level_comma(std::string_view s, const std::vector<Token>& t, size_t k,
                            size_t last) {
  while (k < last) {
    const std::string_view w = text(s, t[k]);
    if (w == ",") return k;
    if (w == "(" || w == "[" || w == "{") {
      k = skip_group(s, t, k);
      continue;
    }
    if (w == "<" && k > 0 && t[k - 1].kind == TokenKind::Identifier) {
      const size_t after = skip_angles(s, t, k, last);
      if (after > k && (token_is(s, t, after, "(") || token_is(s, t, after, "::") ||
                        token_is(s, t, after, "{"))) {
        k = after;
        continue;
      }
    }
    ++k;
  }
  return last;
}

KernelParameter read_parameter(std::string_view s, const std::vector<Token>& t, size_t first,
                               size_t last) {
  KernelParameter p;
  p.first = first;
  p.last = last;
  size_t attr = last;
  for (size_t k = first; k + 1 < last; ++k) {
    if (token_is(s, t, k, "[") && token_is(s, t, k + 1, "[")) {
      attr = k;
      break;
    }
  }
  if (attr < last && attr + 2 < last && t[attr + 2].kind == TokenKind::Identifier) {
    const std::string_view word = text(s, t[attr + 2]);
    if (word != "buffer") p.attribute = std::string(word);
  }
  if (attr > first && t[attr - 1].kind == TokenKind::Identifier) {
    p.name = std::string(text(s, t[attr - 1]));
    if (attr - 1 > first) {
      p.type = std::string(s.substr(t[first].begin, t[attr - 2].end - t[first].begin));
    }
  }
  return p;
}

struct Parser {
  std::string_view s;
  const std::vector<Token>& t;

  bool is(size_t k, std::string_view word) const { return token_is(s, t, k, word); }

  // The parenthesised head at `open` as a range inside the parentheses;
  // returns the index after `)`, or npos.
  size_t head(size_t open, size_t last, TokenRange& range) const {
    if (open >= last || !is(open, "(")) return std::string_view::npos;
    const size_t close = closing(s, t, open);
    if (close >= last) return std::string_view::npos;
    range = {open + 1, close};
    return close + 1;
  }

  Statement unsupported(size_t first, size_t last) const {
    Statement st;
    st.kind = StatementKind::Unsupported;
    st.first = first;
    st.last = last;
    return st;
  }

  // One statement starting at `k`; its `last` says where the next starts.
  Statement statement(size_t k, size_t last) const {
    Statement st;
    st.first = k;
    const Token& tok = t[k];
    const std::string_view w = text(s, tok);
    if (w == "{") {
      const size_t close = closing(s, t, k);
      if (close >= last) return unsupported(k, last);
      st.kind = StatementKind::Block;
      st.body = list(k + 1, close);
      st.last = close + 1;
      return st;
    }
    if (w == ";") {
      st.kind = StatementKind::Empty;
      st.last = k + 1;
      return st;
    }
    if (tok.kind == TokenKind::Identifier) {
      if (w == "if") {
        size_t open = k + 1;
        if (is(open, "constexpr")) ++open;
        const size_t after = head(open, last, st.head[0]);
        if (after == std::string_view::npos || after >= last) return unsupported(k, last);
        // `if (init; condition)` is not followed.
        if (find_top_level(s, t, st.head[0].first, st.head[0].second, ";") < st.head[0].second) {
          return unsupported(k, last);
        }
        st.kind = StatementKind::If;
        st.body.push_back(statement(after, last));
        size_t next = st.body[0].last;
        if (next < last && is(next, "else")) {
          if (next + 1 >= last) return unsupported(k, last);
          st.body.push_back(statement(next + 1, last));
          st.has_else = true;
          next = st.body[1].last;
        }
        st.last = next;
        return st;
      }
      if (w == "for") {
        TokenRange inside;
        const size_t after = head(k + 1, last, inside);
        if (after == std::string_view::npos || after >= last) return unsupported(k, last);
        st.kind = StatementKind::For;
        const size_t semi1 = find_top_level(s, t, inside.first, inside.second, ";");
        if (semi1 >= inside.second) {
          st.range_for = true;
          st.head[0] = inside;
        } else {
          const size_t semi2 = find_top_level(s, t, semi1 + 1, inside.second, ";");
          if (semi2 >= inside.second) return unsupported(k, last);
          st.head = {TokenRange{inside.first, semi1}, TokenRange{semi1 + 1, semi2},
                     TokenRange{semi2 + 1, inside.second}};
        }
        st.body.push_back(statement(after, last));
        st.last = st.body[0].last;
        return st;
      }
      if (w == "while" || w == "switch") {
        const size_t after = head(k + 1, last, st.head[0]);
        if (after == std::string_view::npos || after >= last) return unsupported(k, last);
        st.kind = w == "while" ? StatementKind::While : StatementKind::Switch;
        st.body.push_back(statement(after, last));
        st.last = st.body[0].last;
        return st;
      }
      if (w == "do") {
        if (k + 1 >= last) return unsupported(k, last);
        st.kind = StatementKind::Do;
        st.body.push_back(statement(k + 1, last));
        const size_t w_at = st.body[0].last;
        if (!is(w_at, "while")) return unsupported(k, last);
        const size_t after = head(w_at + 1, last, st.head[0]);
        if (after == std::string_view::npos || !is(after, ";")) return unsupported(k, last);
        st.last = after + 1;
        return st;
      }
      if (w == "return" || w == "break" || w == "continue") {
        const size_t semi = find_top_level(s, t, k, last, ";");
        if (semi >= last) return unsupported(k, last);
        st.kind = w == "return"  ? StatementKind::Return
                  : w == "break" ? StatementKind::Break
                                 : StatementKind::Continue;
        st.last = semi + 1;
        return st;
      }
      if (w == "goto" || w == "case" || w == "default" || w == "else") {
        const size_t semi = find_top_level(s, t, k, last, ";");
        return unsupported(k, semi < last ? semi + 1 : last);
      }
      // A label: `name:` (not `name::`).
      if (is(k + 1, ":")) return unsupported(k, k + 2);
    }
    const size_t semi = find_top_level(s, t, k, last, ";");
    if (semi >= last) return unsupported(k, last);
    st.kind = StatementKind::Simple;
    st.last = semi + 1;
    return st;
  }

  std::vector<Statement> list(size_t first, size_t last) const {
    std::vector<Statement> out;
    size_t k = first;
    while (k < last) {
      out.push_back(statement(k, last));
      if (out.back().last <= k) {  // cannot happen; guards against a loop
        out.back() = unsupported(k, last);
        break;
      }
      k = out.back().last;
    }
    return out;
  }
};

bool is_cv_word(std::string_view w) { return w == "const" || w == "volatile"; }

}  // namespace

std::optional<KernelFunction> find_kernel_function(std::string_view s,
                                                   const std::vector<Token>& t) {
  // The rendering's kernel follows its signature's #line directive; helper
  // code before it may hold kernels of its own.
  const size_t signature = s.find("#line 1 \"generated_signature\"");
  const size_t from_pos = signature == std::string_view::npos ? 0 : signature;
  int depth = 0;
  for (size_t k = 0; k + 6 < t.size(); ++k) {
    if (t[k].begin < from_pos) continue;
    const std::string_view w = text(s, t[k]);
    if (w == "{") ++depth;
    if (w == "}") --depth;
    if (depth != 0 || w != "[" || !token_is(s, t, k + 1, "[") ||
        !token_is(s, t, k + 2, "kernel") || !token_is(s, t, k + 3, "]") ||
        !token_is(s, t, k + 4, "]") || !token_is(s, t, k + 5, "void")) {
      continue;
    }
    KernelFunction f;
    f.start = k;
    f.name = k + 6;
    f.open_paren = k + 7;
    if (t[f.name].kind != TokenKind::Identifier || !token_is(s, t, f.open_paren, "(")) {
      return std::nullopt;
    }
    f.close_paren = closing(s, t, f.open_paren);
    if (f.close_paren >= t.size()) return std::nullopt;
    size_t from = f.open_paren + 1;
    while (from < f.close_paren) {
      size_t comma = from;
      while (comma < f.close_paren && !token_is(s, t, comma, ",")) {
        const std::string_view c = text(s, t[comma]);
        if (c == "(" || c == "[" || c == "{") {
          comma = skip_group(s, t, comma);
        } else if (c == "<") {
          const size_t after = skip_angles(s, t, comma, f.close_paren);
          comma = after > comma ? after : comma + 1;
        } else {
          ++comma;
        }
      }
      f.params.push_back(read_parameter(s, t, from, comma));
      from = comma + 1;
    }
    f.body_open = f.close_paren + 1;
    if (!token_is(s, t, f.body_open, "{")) return std::nullopt;
    f.body_close = closing(s, t, f.body_open);
    if (f.body_close >= t.size()) return std::nullopt;
    // The user's body runs from its #line directive to the function's end.
    const size_t src = s.find("#line 1 \"src\"", t[f.body_open].end);
    if (src == std::string_view::npos || src > t[f.body_close].begin) return std::nullopt;
    f.user_first = f.body_open + 1;
    while (f.user_first < f.body_close && t[f.user_first].begin < src) ++f.user_first;
    f.user_last = f.body_close;
    return f;
  }
  return std::nullopt;
}

std::vector<Statement> parse_statements(std::string_view s, const std::vector<Token>& t,
                                        size_t first, size_t last) {
  return Parser{s, t}.list(first, last);
}

bool declares_type(std::string_view s, const std::vector<Token>& t, const Statement& st) {
  if (st.kind != StatementKind::Simple) return false;
  const std::string_view w = text(s, t[st.first]);
  return w == "using" || w == "typedef" || w == "struct" || w == "class" || w == "enum" ||
         w == "union" || w == "template" || w == "static_assert" || w == "namespace";
}

std::optional<Declaration> parse_declaration(std::string_view s, const std::vector<Token>& t,
                                             const Statement& st) {
  if (st.kind != StatementKind::Simple || declares_type(s, t, st)) return std::nullopt;
  const size_t last = st.last - 1;  // the `;`
  Declaration d;
  // The decl-specifiers: identifiers, `::` and template argument lists.
  size_t k = st.first;
  size_t last_identifier = std::string_view::npos;
  int identifiers = 0;
  while (k < last) {
    const Token& tok = t[k];
    const std::string_view w = text(s, tok);
    if (tok.kind == TokenKind::Identifier) {
      if (w == "return" || w == "sizeof" || w == "operator" || w == "new" || w == "delete") {
        return std::nullopt;
      }
      last_identifier = k;
      ++identifiers;
      ++k;
    } else if (w == "::") {
      ++k;
    } else if (w == "<" && k > st.first && t[k - 1].kind == TokenKind::Identifier) {
      const size_t after = skip_angles(s, t, k, last);
      if (after == k) return std::nullopt;
      k = after;
    } else {
      break;
    }
  }
  if (last_identifier == std::string_view::npos) return std::nullopt;
  const bool ptr_ops = token_is(s, t, k, "*") || token_is(s, t, k, "&");
  size_t name;
  if (ptr_ops) {
    if (identifiers < 1) return std::nullopt;
    d.specifiers = {st.first, k};
  } else {
    // The name is the last identifier; the specifiers hold at least one more.
    if (last_identifier + 1 != k || identifiers < 2) return std::nullopt;
    if (token_is(s, t, last_identifier - 1, "::")) return std::nullopt;
    d.specifiers = {st.first, last_identifier};
    k = last_identifier;
  }
  for (size_t j = d.specifiers.first; j < d.specifiers.second; ++j) {
    const std::string_view w = text(s, t[j]);
    d.is_auto |= w == "auto";
    d.is_const |= w == "const";
    d.is_constexpr |= w == "constexpr";
    d.is_static |= w == "static" || w == "thread_local" || w == "extern";
    d.is_threadgroup |= w == "threadgroup";
  }
  // The declarators.
  while (k < last) {
    Declarator dc;
    dc.first = k;
    while (token_is(s, t, k, "*") || token_is(s, t, k, "&") ||
           (k < last && is_cv_word(text(s, t[k])) && (dc.pointer || dc.reference))) {
      dc.pointer |= token_is(s, t, k, "*");
      dc.reference |= token_is(s, t, k, "&");
      ++k;
    }
    if (k >= last || t[k].kind != TokenKind::Identifier) return std::nullopt;
    dc.name = k++;
    dc.dims_first = dc.dims_last = k;
    while (token_is(s, t, k, "[")) {
      k = skip_group(s, t, k);
      dc.dims_last = k;
    }
    if (token_is(s, t, k, "=")) {
      const size_t end = find_top_level_comma(s, t, k + 1, last);
      dc.init = Declarator::Init::Equals;
      dc.init_tokens = {k + 1, end};
      if (end == k + 1) return std::nullopt;
      k = end;
    } else if (token_is(s, t, k, "{") || token_is(s, t, k, "(")) {
      const size_t after = skip_group(s, t, k);
      if (after > last) return std::nullopt;
      dc.init = token_is(s, t, k, "{") ? Declarator::Init::Braces : Declarator::Init::Parens;
      dc.init_tokens = {k + 1, after - 1};
      k = after;
    }
    dc.last = k;
    d.declarators.push_back(dc);
    if (k == last) break;
    if (!token_is(s, t, k, ",")) return std::nullopt;
    ++k;
  }
  if (d.declarators.empty()) return std::nullopt;
  return d;
}

}  // namespace coreai_torch::cpu
