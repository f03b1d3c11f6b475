// The address-space pass and the `namespace metal` pass (source_scan.h).
#include <algorithm>
#include <array>
#include <map>
#include <string>

#include "source/metal_tokens.h"
#include "source/source_scan.h"

namespace coreai_torch::source {
namespace {

bool is(std::string_view s, const std::vector<Token>& t, size_t k, std::string_view word) {
  return k < t.size() && text(s, t[k]) == word;
}

bool is_space_word(std::string_view w) {
  return w == "device" || w == "constant" || w == "threadgroup";
}

bool is_cv(std::string_view w) { return w == "const" || w == "volatile"; }

// Index just past the `>` that closes the `<` at tokens[open].
size_t skip_angles(std::string_view s, const std::vector<Token>& t, size_t open) {
  int angles = 0, parens = 0;
  for (size_t k = open; k < t.size(); ++k) {
    const std::string_view w = text(s, t[k]);
    if (w == "(") ++parens;
    if (w == ")") --parens;
    if (parens > 0) continue;
    if (w == "<") ++angles;
    if (w == ">" && --angles == 0) return k + 1;
    if (w == ";" || w == "{" || w == "}" || parens < 0) break;
  }
  return t.size();
}

// Tokens the address-space pass leaves alone: inside attributes
// (`[[threadgroup(0)]]`) and inside the parameter lists of kernel functions
// (`[[kernel]] void f(...)` or `kernel void f(...)`), which the launcher binds
// as plain pointers.
std::vector<bool> exempt_tokens(std::string_view s, const std::vector<Token>& t) {
  std::vector<bool> inside(t.size(), false);
  for (size_t k = 0; k + 1 < t.size(); ++k) {
    if (!is(s, t, k, "[") || !is(s, t, k + 1, "[")) continue;
    size_t close = k + 2;
    while (close + 1 < t.size() && !(is(s, t, close, "]") && is(s, t, close + 1, "]"))) ++close;
    std::fill(inside.begin() + k, inside.begin() + std::min(close + 2, t.size()), true);
  }
  for (size_t k = 0; k < t.size(); ++k) {
    if (text(s, t[k]) != "kernel" || t[k].kind != TokenKind::Identifier) continue;
    const bool attribute = k >= 2 && is(s, t, k - 1, "[") && is(s, t, k - 2, "[");
    if (!attribute && !is(s, t, k + 1, "void")) continue;
    size_t open = k + 1;
    while (open < t.size() && text(s, t[open]) != "(" && text(s, t[open]) != ";") ++open;
    if (!is(s, t, open, "(")) continue;
    const size_t close = skip_group(s, t, open);
    std::fill(inside.begin() + open, inside.begin() + std::min(close, t.size()), true);
  }
  return inside;
}

struct TypeSpan {
  size_t end;        // first token after the type
  int identifiers;   // identifiers in it (a declarator name counts too)
};

// The type after an address-space word at `k`: identifiers, `::` and template
// argument lists.
TypeSpan type_after(std::string_view s, const std::vector<Token>& t, size_t k) {
  TypeSpan span{k + 1, 0};
  while (span.end < t.size()) {
    const Token& tok = t[span.end];
    const std::string_view w = text(s, tok);
    if (tok.kind == TokenKind::Identifier) {
      if (is_space_word(w)) break;
      ++span.identifiers;
      ++span.end;
    } else if (w == "::") {
      ++span.end;
    } else if (w == "<" && span.identifiers > 0) {
      span.end = skip_angles(s, t, span.end);
    } else {
      break;
    }
  }
  return span;
}

std::string blank(std::string_view word) { return std::string(word.size(), ' '); }

// What follows a threadgroup variable declared in a function body: a note of
// its name, line and size (coreai_msl/threadgroup_notes.h), which the launcher
// checks against Metal's limit and debug mode uses to find the variable.
std::string threadgroup_note(const std::string& storage, const std::string& name) {
  return " COREAI_THREADGROUP_NOTE(" + storage + ", " + name + ");";
}

// `threadgroup T name[D1][D2]...;` as storage plus a tagged pointer with the
// array's name, so that the name used in an expression is a threadgroup
// pointer as in Metal. Returns false for other declarations.
bool rewrite_threadgroup_array(std::string_view s, const std::vector<Token>& t, size_t k,
                               const TypeSpan& span, bool noted, SourceEdits& edits) {
  const size_t name = span.end - 1;
  if (t[name].kind != TokenKind::Identifier || name <= k + 1) return false;
  size_t end = span.end;
  std::vector<std::pair<size_t, size_t>> dims;
  while (is(s, t, end, "[")) {
    const size_t close = skip_group(s, t, end);
    if (close >= t.size()) return false;
    dims.emplace_back(t[end].begin, t[close - 1].end);
    end = close;
  }
  if (dims.empty() || !is(s, t, end, ";")) return false;
  const std::string type(s.substr(t[k + 1].begin, t[name - 1].end - t[k + 1].begin));
  const std::string id(text(s, t[name]));
  std::string all_dims, inner_dims;
  for (size_t d = 0; d < dims.size(); ++d) {
    const std::string dim(s.substr(dims[d].first, dims[d].second - dims[d].first));
    all_dims += dim;
    if (d > 0) inner_dims += dim;
  }
  const std::string storage = "coreai_threadgroup_" + id;
  edits.replace(t[k].begin, t[end].end,
                "COREAI_THREADGROUP_STORAGE " + type + " " + storage + all_dims + "; const ::coreai::" +
                    "threadgroup_ptr<" + type + inner_dims + "> " + id + " = " + storage + ";" +
                    (noted ? threadgroup_note(storage, id) : std::string()));
  return true;
}

// Other threadgroup storage (`threadgroup float x;`, `threadgroup float a[4],
// b[4];`): the note of every declarator, to follow the declaration's `;`.
// Empty if the declaration does not end where expected.
std::string threadgroup_declarator_notes(std::string_view s, const std::vector<Token>& t,
                                         const TypeSpan& span, size_t& semicolon) {
  std::vector<std::string_view> names{text(s, t[span.end - 1])};
  size_t k = span.end;
  while (k < t.size() && !is(s, t, k, ";")) {
    const std::string_view w = text(s, t[k]);
    if (w == "(" || w == "[" || w == "{") {
      k = skip_group(s, t, k);
      continue;
    }
    if (w == "}" || w == ")") return {};
    if (w == "," && k + 1 < t.size() && t[k + 1].kind == TokenKind::Identifier) {
      names.push_back(text(s, t[k + 1]));
    }
    ++k;
  }
  if (k >= t.size()) return {};
  semicolon = k;
  std::string notes;
  for (std::string_view name : names) {
    notes += threadgroup_note(std::string(name), std::string(name));
  }
  return notes;
}

// After the `*` of a rewritten declarator: `device float *a, *b;` declares two
// tagged pointers, so the `*` of the later declarators goes.
void drop_later_declarator_stars(std::string_view s, const std::vector<Token>& t, size_t star,
                                 SourceEdits& edits) {
  size_t k = star + 1;
  while (k < t.size()) {
    const std::string_view w = text(s, t[k]);
    if (w == "(" || w == "[" || w == "{") {
      k = skip_group(s, t, k);
      continue;
    }
    if (w == ";" || w == ")" || w == "}" || w == "]") return;
    if (w == "," && is(s, t, k + 1, "*")) {
      edits.replace(t[k + 1].begin, t[k + 1].end, " ");
      k += 2;
      continue;
    }
    if (w == ",") return;  // the next parameter (or a declarator Metal refuses)
    ++k;
  }
}

}  // namespace

std::string rewrite_address_spaces(std::string_view source) {
  const std::vector<Token> t = tokenize(source, false);
  const std::vector<bool> exempt = exempt_tokens(source, t);
  const std::vector<bool> in_body = in_function_bodies(source, t);
  SourceEdits edits;
  for (size_t k = 0; k < t.size(); ++k) {
    const std::string_view word = text(source, t[k]);
    if (t[k].kind != TokenKind::Identifier || !is_space_word(word) || exempt[k]) continue;
    size_t first = k;  // `const device T*`: the qualifiers belong to the pointee
    while (first > 0 && is_cv(text(source, t[first - 1]))) --first;
    const TypeSpan span = type_after(source, t, k);
    const std::string_view after = span.end < t.size() ? text(source, t[span.end]) : "";

    // `const constant auto* p = q;` takes its type from q, tagged already.
    if (after == "*" && span.identifiers == 1 && span.end == k + 2 &&
        text(source, t[k + 1]) == "auto") {
      edits.replace(t[first].begin, t[span.end].end, "auto");
      k = span.end;
      continue;
    }
    if (after == "*" && span.identifiers > 0) {
      if (span.end + 2 < t.size() && is_space_word(text(source, t[span.end + 1])) &&
          is(source, t, span.end + 2, "*")) {
        // A pointer held in device or threadgroup memory: not supported.
        edits.replace(t[span.end + 1].begin, t[span.end + 1].end,
                      "coreai_pointers_stored_in_" + std::string(text(source, t[span.end + 1])) +
                          "_memory_are_not_supported");
      }
      std::string pointee(source.substr(t[first].begin, t[k].begin - t[first].begin));
      bool already_const = false;
      for (size_t j = first; j < span.end; ++j) already_const |= text(source, t[j]) == "const";
      if (word == "constant" && !already_const) pointee += "const ";
      pointee += source.substr(t[k + 1].begin, t[span.end - 1].end - t[k + 1].begin);
      // reinterpret_cast<device T*>(p): a tagged pointer is a class, so the cast
      // becomes an explicit conversion.
      if (first >= 2 && is(source, t, first - 1, "<")) {
        const std::string_view cast = text(source, t[first - 2]);
        if (cast == "reinterpret_cast" || cast == "static_cast" || cast == "const_cast") {
          edits.replace(t[first - 2].begin, t[first - 2].end, "::coreai::pointer_cast");
        }
      }
      edits.replace(t[first].begin, t[span.end].end,
                    "::coreai::" + std::string(word) + "_ptr<" + pointee + ">");
      drop_later_declarator_stars(source, t, span.end, edits);
      k = span.end;
      continue;
    }
    if (word != "threadgroup") continue;  // device and constant are macros (coreai_msl.h)
    // Storage: a type and a name, then what follows a declarator name.
    const bool storage = span.identifiers >= 2 && (after == "[" || after == ";" || after == "=" ||
                                                   after == "," || after == "{" || after == "(" ||
                                                   after == ")");
    // Notes are statements: only threadgroup variables of a function body get
    // one (Metal has no others; metal_fidelity.h refuses them).
    const bool noted = storage && in_body[k];
    if (storage && after == "[" &&
        rewrite_threadgroup_array(source, t, k, span, noted, edits)) {
      continue;
    }
    edits.replace(t[k].begin, t[k].end, storage ? "COREAI_THREADGROUP_STORAGE" : blank(word));
    size_t semicolon = 0;
    const std::string notes =
        noted ? threadgroup_declarator_notes(source, t, span, semicolon) : std::string();
    if (!notes.empty()) edits.replace(t[semicolon].end, t[semicolon].end, notes);
  }
  return edits.apply(source);
}

namespace {

bool is_member_qualifier(std::string_view w) {
  return is_space_word(w) || w == "thread" || w == "const" || w == "volatile" ||
         w == "noexcept" || w == "override" || w == "final";
}

// One function declaration: the text it spans, the key that tells its
// overloads apart once address spaces are gone, and whether it names a
// non-thread address space outside a pointer type.
struct MemberDeclaration {
  size_t begin = 0, end = 0;  // byte offsets
  std::string key;
  bool other_space = false;
};

// Whether the address-space word at k qualifies a pointer declarator, which
// keeps it in the type (the address-space pass tags the pointer).
bool on_pointer(std::string_view s, const std::vector<Token>& t, size_t k) {
  const TypeSpan span = type_after(s, t, k);
  return span.identifiers > 0 && is(s, t, span.end, "*");
}

// The text of tokens [from, to) without the address-space words that do not
// make a type of their own (on references, values and member functions).
std::string normalized(std::string_view s, const std::vector<Token>& t, size_t from, size_t to) {
  std::string out;
  for (size_t k = from; k < to && k < t.size(); ++k) {
    const std::string_view w = text(s, t[k]);
    if ((is_space_word(w) || w == "thread") && !on_pointer(s, t, k)) continue;
    out.append(w).push_back(' ');
  }
  return out;
}

}  // namespace

std::string drop_address_space_variants(std::string_view source) {
  const std::vector<Token> t = tokenize(source, false);
  // The innermost enclosing `{` of every token, and each brace's partner.
  std::vector<size_t> block(t.size(), t.size()), partner(t.size(), t.size());
  std::vector<size_t> open;
  for (size_t k = 0; k < t.size(); ++k) {
    const std::string_view w = text(source, t[k]);
    if (w == "}" && !open.empty()) {
      partner[open.back()] = k;
      partner[k] = open.back();
      open.pop_back();
    }
    block[k] = open.empty() ? t.size() : open.back();
    if (w == "{") open.push_back(k);
  }
  std::map<size_t, std::vector<MemberDeclaration>> by_block;
  for (size_t r = 0; r < t.size(); ++r) {
    if (text(source, t[r]) != ")") continue;
    size_t q = r + 1;
    while (q < t.size() && is_member_qualifier(text(source, t[q]))) ++q;
    if (q >= t.size()) continue;
    const std::string_view after = text(source, t[q]);
    if (after != "{" && after != ":" && after != ";" && after != "=") continue;
    // The parameter list and the declaration's first token: just after the
    // previous member (`;`, `}` or an access specifier) of the same block.
    size_t depth = 0, lparen = r;
    for (size_t k = r + 1; k-- > 0;) {
      const std::string_view w = text(source, t[k]);
      if (w == ")") ++depth;
      if (w == "(" && --depth == 0) {
        lparen = k;
        break;
      }
    }
    if (lparen == r || lparen == 0) continue;
    size_t first = lparen;
    while (first > 0 && block[first - 1] == block[lparen]) {
      const std::string_view w = text(source, t[first - 1]);
      if (w == ";" || w == "}" || w == "{" ||
          (w == ":" && first >= 2 && t[first - 2].kind == TokenKind::Identifier &&
           (text(source, t[first - 2]) == "public" || text(source, t[first - 2]) == "private" ||
            text(source, t[first - 2]) == "protected"))) {
        break;
      }
      --first;
    }
    // The end: the body (after any member initializers), or the `;`.
    size_t last = q;
    if (after == "{") {
      last = partner[q];
    } else if (after == ":") {
      size_t parens = 0;
      for (last = q + 1; last < t.size(); ++last) {
        const std::string_view w = text(source, t[last]);
        if (w == "(") ++parens;
        if (w == ")") --parens;
        if (w == "{" && parens == 0 && t[last - 1].kind != TokenKind::Identifier) {
          last = partner[last];
          break;
        }
        if (w == "{") last = partner[last];
      }
    } else {
      while (last < t.size() && text(source, t[last]) != ";") ++last;
    }
    if (last >= t.size()) continue;
    // A version for another address space names one on a reference, a value
    // or the member function itself; the thread version names none or thread.
    bool other_space = false;
    for (size_t k = first; k < q; ++k) {
      other_space |= is_space_word(text(source, t[k])) && !on_pointer(source, t, k);
    }
    MemberDeclaration d;
    d.begin = t[first].begin;
    d.end = t[last].end;
    d.other_space = other_space;
    d.key = normalized(source, t, first, lparen) + "(" + normalized(source, t, lparen, r) + ")" +
            normalized(source, t, r + 1, q);
    by_block[block[lparen]].push_back(std::move(d));
  }
  // Per overload: with a thread (or unqualified) version, every version
  // qualified with another address space goes; without one, all but the
  // first. Declarations without an address-space word (and statements that
  // merely look alike, in function bodies) are never touched.
  SourceEdits edits;
  for (const auto& [unused, members] : by_block) {
    std::map<std::string, bool> has_thread_version;
    for (const MemberDeclaration& m : members) has_thread_version[m.key] |= !m.other_space;
    std::map<std::string, bool> kept_one;
    for (const MemberDeclaration& m : members) {
      if (!m.other_space) continue;
      if (!has_thread_version[m.key] && !kept_one[m.key]) {
        kept_one[m.key] = true;
        continue;
      }
      edits.replace(m.begin, m.end, "");
    }
  }
  return edits.apply(source);
}

namespace {

// Words after which `::X` is still a global qualification (not X::Y's `::`).
bool leads_global_name(std::string_view w) {
  static constexpr std::array<std::string_view, 16> words = {
      "typename", "template", "return",   "const", "constexpr", "static",
      "using",    "new",      "delete",   "case",  "throw",     "volatile",
      "inline",   "extern",   "friend",   "co_return"};
  return is_space_word(w) || w == "thread" ||
         std::find(words.begin(), words.end(), w) != words.end();
}

}  // namespace

std::string drop_metal_namespace_reopening(std::string_view source) {
  const std::vector<Token> t = tokenize(source, false);
  SourceEdits edits;
  std::vector<size_t> closers;  // brace depth at which a dropped namespace closes
  std::vector<std::string> top_level;  // namespaces the source opens at its top level
  int depth = 0;
  for (size_t k = 0; k < t.size(); ++k) {
    const std::string_view w = text(source, t[k]);
    if (w == "{") {
      ++depth;
      continue;
    }
    if (w == "}") {
      if (!closers.empty() && closers.back() == static_cast<size_t>(depth)) {
        edits.replace(t[k].begin, t[k].end, " ");
        closers.pop_back();
      }
      --depth;
      continue;
    }
    if (w != "namespace" || k + 1 >= t.size() || t[k + 1].kind != TokenKind::Identifier) continue;
    // Only a reopening at the top level of the kernel's text (namespace
    // mlx { namespace metal { ... } } is another namespace).
    if (depth != static_cast<int>(closers.size())) continue;
    const std::string_view name = text(source, t[k + 1]);
    if (name != "metal") {
      if (k == 0 || text(source, t[k - 1]) != "using") top_level.emplace_back(name);
      continue;
    }
    if (is(source, t, k + 2, "{")) {
      edits.replace(t[k].begin, t[k + 2].end, "");
      closers.push_back(static_cast<size_t>(depth + 1));
      ++depth;
      k += 2;
    } else if (is(source, t, k + 2, "::")) {
      // namespace metal::detail { ... } is namespace detail inside ours.
      edits.replace(t[k + 1].begin, t[k + 2].end, "");
      if (k + 3 < t.size() && t[k + 3].kind == TokenKind::Identifier) {
        top_level.emplace_back(text(source, t[k + 3]));
      }
      k += 2;
    }
  }
  // The kernel's namespaces live in namespace metal: `::c10::x` (PyTorch's
  // helpers qualify their own namespace so) is `::metal::c10::x`. Directives
  // count too (a macro may expand to such a name).
  const std::vector<Token> all = tokenize(source, true);
  for (size_t k = 0; k + 1 < all.size(); ++k) {
    if (text(source, all[k]) != "::" || all[k + 1].kind != TokenKind::Identifier) continue;
    const std::string_view name = text(source, all[k + 1]);
    if (name == "std" || name == "coreai" ||
        std::find(top_level.begin(), top_level.end(), name) == top_level.end()) {
      continue;
    }
    // (`#define X ::c10::y`: X is the macro's name.)
    const bool macro_body = k >= 2 && text(source, all[k - 2]) == "define";
    if (k > 0 && all[k - 1].kind == TokenKind::Identifier && !macro_body &&
        !leads_global_name(text(source, all[k - 1]))) {
      continue;  // A::c10, a member of A
    }
    edits.replace(all[k].begin, all[k].end, "::metal::");
  }
  return edits.apply(source);
}

}  // namespace coreai_torch::source
