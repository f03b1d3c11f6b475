// The threadgroup-access pass (source_scan.h): what each access to
// threadgroup memory does, for the lockstep points of fiber mode
// (coreai_msl/fiber_runtime.h).
#include <algorithm>
#include <map>
#include <string>

#include "source/metal_tokens.h"
#include "source/source_scan.h"

namespace coreai_torch::source {
namespace {

bool is(std::string_view s, const std::vector<Token>& t, size_t k, std::string_view word) {
  return k < t.size() && text(s, t[k]) == word;
}

// Tokens k and k + 1 are written together (`+=` is two tokens).
bool joined(const std::vector<Token>& t, size_t k) {
  return k + 1 < t.size() && t[k].end == t[k + 1].begin;
}

bool is_cv(std::string_view w) {
  return w == "const" || w == "volatile" || w == "__restrict" || w == "restrict";
}

bool inside_attribute(std::string_view s, const std::vector<Token>& t, size_t k) {
  return k >= 2 && is(s, t, k - 1, "[") && is(s, t, k - 2, "[");
}

// The names of threadgroup memory in the source and how many subscripts
// reach an element: arrays declared `threadgroup T name[A][B]` (2),
// pointers `threadgroup T* name` (1), and `auto name = <such a name> ...`.
struct Names {
  std::map<std::string, int, std::less<>> subscripts;
  std::vector<size_t> declarations;  // tokens that declare a name: not accesses
  bool storage = false;              // the source declares threadgroup storage
  bool reference_parameters = false;  // a `threadgroup T&` somewhere
};

Names find_names(std::string_view s, const std::vector<Token>& t) {
  Names names;
  for (size_t k = 0; k < t.size(); ++k) {
    if (t[k].kind != TokenKind::Identifier || text(s, t[k]) != "threadgroup" ||
        inside_attribute(s, t, k)) {
      continue;
    }
    // The type: identifiers, `::` and template argument lists.
    size_t j = k + 1;
    int identifiers = 0;
    while (j < t.size()) {
      const std::string_view w = text(s, t[j]);
      if (t[j].kind == TokenKind::Identifier) {
        ++identifiers;
        ++j;
      } else if (w == "::") {
        ++j;
      } else if (w == "<") {
        int depth = 0;
        for (; j < t.size(); ++j) {
          if (is(s, t, j, "<")) ++depth;
          if (is(s, t, j, ">") && --depth == 0) break;
          if (is(s, t, j, ";") || is(s, t, j, "{")) break;
        }
        ++j;
      } else {
        break;
      }
    }
    if (is(s, t, j, "&")) {
      names.reference_parameters = true;
      continue;
    }
    if (is(s, t, j, "*")) {
      size_t n = j + 1;
      while (n < t.size() && is_cv(text(s, t[n]))) ++n;
      if (n < t.size() && t[n].kind == TokenKind::Identifier) {
        names.subscripts.emplace(std::string(text(s, t[n])), 1);
        names.declarations.push_back(n);
      }
      continue;
    }
    // Storage: `threadgroup T name;` or `threadgroup T name[A][B];`.
    if (identifiers >= 2 && j - 1 > k && t[j - 1].kind == TokenKind::Identifier) {
      int dims = 0;
      for (size_t d = j; is(s, t, d, "["); d = skip_group(s, t, d)) ++dims;
      names.storage = true;
      if (dims > 0) {
        names.subscripts.emplace(std::string(text(s, t[j - 1])), dims);
        names.declarations.push_back(j - 1);
      }
    }
  }
  // `auto p = ss + ty;` points where ss does.
  for (size_t k = 0; k + 3 < t.size(); ++k) {
    if (text(s, t[k]) != "auto" || t[k + 1].kind != TokenKind::Identifier ||
        !is(s, t, k + 2, "=") || joined(t, k + 2)) {
      continue;
    }
    const auto found = names.subscripts.find(text(s, t[k + 3]));
    if (found == names.subscripts.end()) continue;
    int left = found->second;
    for (size_t d = k + 4; is(s, t, d, "[") && left > 1; d = skip_group(s, t, d)) --left;
    names.subscripts.emplace(std::string(text(s, t[k + 1])), left);
    names.declarations.push_back(k + 1);
  }
  return names;
}

// True if tokens k.. spell an assignment operator that is not `=`: `+=`,
// `<<=`, ... (and not the comparisons `<=`, `>=`, `==`, `!=`).
bool compound_assignment(std::string_view s, const std::vector<Token>& t, size_t k) {
  if (k + 1 >= t.size() || !joined(t, k)) return false;
  const std::string_view a = text(s, t[k]);
  if (text(s, t[k + 1]) == "=") {
    return a == "+" || a == "-" || a == "*" || a == "/" || a == "%" || a == "&" || a == "|" ||
           a == "^";
  }
  return (a == "<" || a == ">") && is(s, t, k + 1, a) && joined(t, k + 1) && is(s, t, k + 2, "=");
}

bool plain_assignment(std::string_view s, const std::vector<Token>& t, size_t k) {
  return is(s, t, k, "=") && !(joined(t, k) && is(s, t, k + 1, "="));
}

bool increment(std::string_view s, const std::vector<Token>& t, size_t k) {
  return k + 1 < t.size() && joined(t, k) &&
         ((is(s, t, k, "+") && is(s, t, k + 1, "+")) || (is(s, t, k, "-") && is(s, t, k + 1, "-")));
}

// Whether the token before k ends an operand (then `*` / `&` at k are binary).
bool ends_operand(std::string_view s, const std::vector<Token>& t, size_t k) {
  if (k == 0) return false;
  const Token& p = t[k - 1];
  if (p.kind == TokenKind::Other) return true;
  if (p.kind == TokenKind::Identifier) {
    const std::string_view w = text(s, p);
    return w != "return" && w != "case" && w != "sizeof";
  }
  const std::string_view w = text(s, p);
  return w == ")" || w == "]";
}

// Inside the parentheses of a call (not of a cast or a grouping): the
// innermost unclosed `(` before k follows an identifier or a `>`.
bool in_call_arguments(std::string_view s, const std::vector<Token>& t, size_t k) {
  int depth = 0;
  for (size_t j = k; j-- > 0;) {
    const std::string_view w = text(s, t[j]);
    if (w == ")" || w == "]") ++depth;
    if (w == "[" && depth-- == 0) return false;
    if (w == ";" || w == "{" || w == "}") return false;
    if (w == "(" && depth-- == 0) {
      if (j == 0) return false;
      const Token& callee = t[j - 1];
      const std::string_view c = text(s, callee);
      return (callee.kind == TokenKind::Identifier && c != "if" && c != "while" && c != "for" &&
              c != "switch" && c != "return" && c != "sizeof") ||
             c == ">";
    }
  }
  return false;
}

}  // namespace

std::vector<ThreadgroupAccess> find_threadgroup_accesses(std::string_view source) {
  const std::vector<Token> t = tokenize(source, false);
  const Names names = find_names(source, t);
  std::vector<ThreadgroupAccess> accesses;
  for (size_t k = 0; k < t.size(); ++k) {
    if (t[k].kind != TokenKind::Identifier) continue;
    const auto found = names.subscripts.find(text(source, t[k]));
    if (found == names.subscripts.end()) continue;
    if (std::find(names.declarations.begin(), names.declarations.end(), k) !=
        names.declarations.end()) {
      continue;
    }
    if (k > 0 && (is(source, t, k - 1, ".") || is(source, t, k - 1, "::") ||
                  (is(source, t, k - 1, ">") && k > 1 && is(source, t, k - 2, "-") &&
                   joined(t, k - 2)))) {
      continue;  // a member or a qualified name of the same spelling
    }
    // The postfix chain: subscripts, then members and their subscripts.
    size_t j = k + 1;
    int subscripts = 0;
    while (is(source, t, j, "[")) {
      j = skip_group(source, t, j);
      ++subscripts;
    }
    const bool arrow = is(source, t, j, "-") && joined(t, j) && is(source, t, j + 1, ">");
    const bool deref = k > 0 && is(source, t, k - 1, "*") && !ends_operand(source, t, k - 1);
    const bool element = subscripts >= found->second || (subscripts == 0 && (arrow || deref));
    if (!element) continue;
    const bool address = k > 0 && is(source, t, k - 1, "&") && !ends_operand(source, t, k - 1) &&
                         !(k > 1 && is(source, t, k - 2, "&") && joined(t, k - 2));
    bool member_call = false;
    while (true) {
      if (is(source, t, j, ".") && j + 1 < t.size() && t[j + 1].kind == TokenKind::Identifier) {
        j += 2;
      } else if (is(source, t, j, "-") && joined(t, j) && is(source, t, j + 1, ">") &&
                 j + 2 < t.size() && t[j + 2].kind == TokenKind::Identifier) {
        j += 3;
      } else if (is(source, t, j, "[")) {
        j = skip_group(source, t, j);
        continue;
      } else {
        break;
      }
      if (is(source, t, j, "(")) {
        member_call = true;
        break;
      }
    }
    const bool before_increment = k >= 2 && increment(source, t, deref ? k - 3 : k - 2);
    ThreadgroupAccess::Kind kind;
    if (address) {
      kind = ThreadgroupAccess::Kind::Address;
    } else if (member_call || before_increment || increment(source, t, j) ||
               compound_assignment(source, t, j)) {
      kind = ThreadgroupAccess::Kind::Other;
    } else if (plain_assignment(source, t, j)) {
      kind = ThreadgroupAccess::Kind::Write;
    } else if (names.reference_parameters && in_call_arguments(source, t, k)) {
      kind = ThreadgroupAccess::Kind::Other;  // it may be bound to a threadgroup reference
    } else {
      kind = ThreadgroupAccess::Kind::Read;
    }
    accesses.push_back({t[k].begin, t[k].end, kind});
  }
  return accesses;
}

std::string mark_threadgroup_accesses(std::string_view source) {
  static constexpr const char* kWrappers[] = {"tg_address", "tg_read", "tg_write", "tg_other"};
  SourceEdits edits;
  for (const ThreadgroupAccess& a : find_threadgroup_accesses(source)) {
    const std::string name(source.substr(a.begin, a.end - a.begin));
    edits.replace(a.begin, a.end,
                  std::string("::coreai::") + kWrappers[static_cast<int>(a.kind)] + "(" + name +
                      ")");
  }
  return edits.empty() ? std::string(source) : edits.apply(source);
}

bool declares_threadgroup_storage(std::string_view source) {
  return find_names(source, tokenize(source, false)).storage;
}

}  // namespace coreai_torch::source
