#include "cpu/group_form_analysis.h"

#include <algorithm>
#include <array>
#include <set>
#include <string>
#include <unordered_map>

#include "source/source_scan.h"

namespace coreai_torch::cpu::group_form {
namespace {

bool in(std::string_view w, std::initializer_list<std::string_view> words) {
  return std::find(words.begin(), words.end(), w) != words.end();
}

// Metal's functions without effects (the math, integer, relational and
// geometric functions, conversions): a call of one is as uniform as its
// arguments.
bool is_pure_function(std::string_view w) {
  return in(w, {"abs", "fabs", "min", "max", "fmin", "fmax", "fmin3", "fmax3", "min3", "max3",
                "median3", "clamp", "saturate", "exp", "exp2", "exp10", "log", "log2", "log10",
                "sqrt", "rsqrt", "pow", "powr", "sin", "cos", "tan", "asin", "acos", "atan",
                "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sinpi", "cospi",
                "tanpi", "floor", "ceil", "round", "rint", "trunc", "fract", "fmod", "fma", "mad",
                "mix", "step", "smoothstep", "sign", "copysign", "select", "all", "any", "isnan",
                "isinf", "isfinite", "isnormal", "signbit", "isordered", "isunordered", "dot",
                "length", "length_squared", "normalize", "cross", "distance",
                "distance_squared", "popcount", "clz", "ctz", "mulhi", "mul24", "mad24",
                "madhi", "absdiff", "addsat", "subsat", "hadd", "rhadd", "rotate",
                "extract_bits", "insert_bits", "reverse_bits", "as_type", "static_cast",
                "reinterpret_cast", "const_cast", "bit_cast", "sizeof", "alignof", "divide",
                "ldexp", "frexp", "ilogb", "nextafter", "precise_divide", "fdim", "maxmag",
                "minmag", "uint", "int", "float", "half", "bfloat", "bool", "short", "ushort",
                "char", "uchar", "long", "ulong", "size_t", "get_extent", "get_data_ptr",
                "get_rank", "lowest", "epsilon", "infinity", "quiet_NaN", "denorm_min"});
}

// A Metal type name used as a constructor or cast: float4(...), uint2(...).
bool is_metal_type(std::string_view w) {
  if (w.starts_with("packed_")) w.remove_prefix(7);
  static constexpr std::string_view kBases[] = {"bool",  "char",  "uchar", "short", "ushort",
                                                "int",   "uint",  "long",  "ulong", "half",
                                                "float", "bfloat"};
  for (std::string_view base : kBases) {
    if (!w.starts_with(base)) continue;
    std::string_view rest = w.substr(base.size());
    if (rest.empty() || rest == "2" || rest == "3" || rest == "4") return true;
    if (rest.size() == 3 && rest[1] == 'x' && rest[0] >= '2' && rest[0] <= '4' && rest[2] >= '2' &&
        rest[2] <= '4') {
      return true;  // matrices: float4x4
    }
  }
  return in(w, {"vec", "matrix", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t",
                "uint32_t", "int64_t", "uint64_t", "ptrdiff_t", "array"});
}

bool is_keyword(std::string_view w) {
  return in(w, {"true", "false", "nullptr", "sizeof", "alignof", "const", "constexpr", "static",
                "auto", "return", "if", "else", "for", "while", "do", "switch", "case", "break",
                "continue", "default", "typename", "template", "thread", "device", "constant",
                "threadgroup", "using", "namespace", "struct", "class", "enum", "union"});
}

// SIMD-group functions whose result every active lane shares.
bool shares_result(std::string_view w) {
  return in(w, {"simd_sum", "simd_product", "simd_min", "simd_max", "simd_and", "simd_or",
                "simd_xor", "simd_broadcast", "simd_broadcast_first", "simd_ballot",
                "simd_all", "simd_any", "simd_active_threads_mask"});
}

Sync sync_of_call(std::string_view w) {
  if (w == "threadgroup_barrier") return Sync::Barrier;
  if (w == "simdgroup_barrier") return Sync::SimdBarrier;
  if (w.starts_with("simd_") || w.starts_with("quad_")) return Sync::SimdValue;
  if (in(w, {"simdgroup_load", "simdgroup_store", "simdgroup_multiply",
             "simdgroup_multiply_accumulate", "make_filled_simdgroup_matrix"})) {
    return Sync::MatrixCall;
  }
  return Sync::None;
}

bool is_matrix_type(std::string_view w) {
  return in(w, {"simdgroup_float8x8", "simdgroup_half8x8", "simdgroup_bfloat8x8",
                "simdgroup_matrix"});
}

// Names that need a whole cooperating scope of threads at once, which only
// fiber mode runs.
bool is_cooperative(std::string_view w) {
  return in(w, {"execution_simdgroup", "execution_simdgroups", "matmul2d", "cooperative_tensor",
                "get_destination_cooperative_tensor", "get_left_input_cooperative_tensor",
                "get_right_input_cooperative_tensor"});
}

// Tokens k and k + 1 are written together (`+=` is two tokens).
bool joined(const std::vector<Token>& t, size_t k) {
  return k + 1 < t.size() && t[k].end == t[k + 1].begin;
}

}  // namespace

Uniformity attribute_uniformity(std::string_view a) {
  if (in(a, {"thread_position_in_grid", "thread_position_in_threadgroup",
             "thread_index_in_threadgroup", "thread_index_in_simdgroup",
             "quadgroup_index_in_threadgroup", "thread_index_in_quadgroup"})) {
    return Uniformity::Varying;
  }
  if (a == "simdgroup_index_in_threadgroup") return Uniformity::Simd;
  return Uniformity::Group;
}

// ---- construction ------------------------------------------------------------

namespace {

// The macros the source defines: name -> whether it expands to a constant
// (an object-like macro of literals and operators: `#define TILE 16`). The
// bodies of all of them, for the check that none hides a synchronisation.
struct Macros {
  std::unordered_map<std::string, bool> constant;
  std::vector<std::pair<std::string, std::string>> bodies;
};

Macros find_macros(std::string_view s) {
  Macros macros;
  size_t line = 0;
  while (line < s.size()) {
    size_t end = s.find('\n', line);
    // A directive continues over backslash-newlines.
    while (end != std::string_view::npos && end > line && s[end - 1] == '\\') {
      end = s.find('\n', end + 1);
    }
    if (end == std::string_view::npos) end = s.size();
    std::string_view l = s.substr(line, end - line);
    const size_t hash = l.find_first_not_of(" \t");
    if (hash != std::string_view::npos && l[hash] == '#') {
      std::string_view rest = l.substr(hash + 1);
      rest.remove_prefix(std::min(rest.find_first_not_of(" \t"), rest.size()));
      if (rest.starts_with("define")) {
        rest.remove_prefix(6);
        rest.remove_prefix(std::min(rest.find_first_not_of(" \t"), rest.size()));
        size_t n = 0;
        while (n < rest.size() && is_ident_char(rest[n])) ++n;
        if (n > 0) {
          const std::string name(rest.substr(0, n));
          const bool function_like = n < rest.size() && rest[n] == '(';
          const std::string body(rest.substr(n));
          const std::vector<Token> bt = tokenize(body, true);
          macros.constant[name] =
              !function_like && std::all_of(bt.begin(), bt.end(), [](const Token& b) {
                return b.kind != TokenKind::Identifier;
              });
          macros.bodies.emplace_back(name, body);
        }
      }
    }
    line = end + 1;
  }
  return macros;
}


// Whether token k is a member or a qualified name (x.k, p->k, ns::k).
bool is_member(std::string_view s, const std::vector<Token>& t, size_t k) {
  if (k == 0) return false;
  if (token_is(s, t, k - 1, ".") || token_is(s, t, k - 1, "::")) return true;
  return token_is(s, t, k - 1, ">") && k >= 2 && token_is(s, t, k - 2, "-") && joined(t, k - 2);
}

// Whether the token before k ends an operand (then `*` / `&` at k are binary).
bool ends_operand(std::string_view s, const std::vector<Token>& t, size_t k) {
  if (k == 0) return false;
  const Token& p = t[k - 1];
  if (p.kind == TokenKind::Other) return true;
  const std::string_view w = text(s, p);
  if (p.kind == TokenKind::Identifier) return w != "return" && w != "case" && w != "sizeof";
  return w == ")" || w == "]";
}

// Index of the `(` of a call whose name is at k (`f(`, `f<...>(`), or npos.
size_t call_paren(std::string_view s, const std::vector<Token>& t, size_t k, size_t last) {
  if (token_is(s, t, k + 1, "(")) return k + 1;
  if (!token_is(s, t, k + 1, "<")) return std::string_view::npos;
  int angles = 0;
  for (size_t j = k + 1; j < last; ++j) {
    const std::string_view w = text(s, t[j]);
    if (w == "<") ++angles;
    if (w == ">" && --angles == 0) {
      return token_is(s, t, j + 1, "(") ? j + 1 : std::string_view::npos;
    }
    if (w == ";" || w == "{" || w == "}" || w == "(" || w == ")") break;
  }
  return std::string_view::npos;
}

size_t close_of(std::string_view s, const std::vector<Token>& t, size_t open) {
  return skip_group(s, t, open) - 1;
}

}  // namespace

Analysis::Analysis(std::string_view src, const std::vector<Token>& toks, const KernelFunction& kf,
                   bool lockstep)
    : source(src), tokens(toks), kernel(kf) {
  names.assign(tokens.size(), Name{});
  syncs.assign(tokens.size(), Sync::None);
  threadgroup_access.assign(tokens.size(), -1);
  preamble = parse_statements(source, tokens, kernel.body_open + 1, kernel.user_first);
  body = parse_statements(source, tokens, kernel.user_first, kernel.user_last);
  check_helpers();
  if (!failure_.empty()) return;
  mark_syncs();
  if (!failure_.empty()) return;
  resolve();
  if (!failure_.empty()) return;
  compute_levels();
  compute_placements();
  compute_single_copies();
  if (lockstep) check_lockstep();
}

void Analysis::fail(size_t token, const std::string& why) {
  if (failure_.empty()) failure_ = (token < tokens.size() ? where(token) + ": " : "") + why;
}

std::string Analysis::where(size_t token) const {
  if (token >= tokens.size()) return "src";
  const size_t pos = tokens[token].begin;
  // The last #line directive before pos, and the lines since.
  size_t directive = source.rfind("#line ", pos);
  while (directive != std::string_view::npos && directive > 0 && source[directive - 1] != '\n') {
    directive = directive == 0 ? std::string_view::npos : source.rfind("#line ", directive - 1);
  }
  if (directive == std::string_view::npos) return "src";
  const size_t number = directive + 6;
  int line = 0;
  size_t k = number;
  while (k < source.size() && source[k] >= '0' && source[k] <= '9') {
    line = line * 10 + (source[k++] - '0');
  }
  const size_t quote = source.find('"', k);
  const size_t close = quote == std::string_view::npos ? quote : source.find('"', quote + 1);
  const std::string file = close == std::string_view::npos
                               ? "src"
                               : std::string(source.substr(quote + 1, close - quote - 1));
  const size_t eol = source.find('\n', directive);
  line += static_cast<int>(std::count(source.begin() + static_cast<long>(eol + 1),
                                      source.begin() + static_cast<long>(pos), '\n'));
  return file + ":" + std::to_string(line);
}

// Helper functions and macros may compute, but the barriers and SIMD-group
// functions must be in the kernel's own body, where the form can see them;
// helpers that touch threadgroup memory hide accesses from the lockstep check.
void Analysis::check_helpers() {
  const Macros macros = find_macros(source);
  macros_ = macros.constant;
  for (const auto& [name, body] : macros.bodies) {
    const std::vector<Token> mt = tokenize(body, true);
    for (const Token& m : mt) {
      const std::string_view w = text(body, m);
      if (sync_of_call(w) != Sync::None || is_matrix_type(w) || is_cooperative(w) ||
          w == "threadgroup") {
        fail(std::string_view::npos, "the macro " + name + " uses " + std::string(w) +
                                         ", which the group-loop form does not follow into macros");
        return;
      }
    }
  }
  for (size_t k = 0; k < kernel.start; ++k) {
    if (tokens[k].kind != TokenKind::Identifier) continue;
    const std::string_view w = text(source, tokens[k]);
    const bool call = call_paren(source, tokens, k, kernel.start) != std::string_view::npos;
    if ((call && (sync_of_call(w) != Sync::None || w.starts_with("simdgroup_"))) ||
        is_matrix_type(w) || is_cooperative(w)) {
      fail(k, "helper code uses " + std::string(w) +
                  "; the group-loop form needs synchronisation in the kernel's own body");
      return;
    }
  }
}

void Analysis::mark_syncs() {
  const size_t first = kernel.user_first, last = kernel.user_last;
  for (size_t k = first; k < last; ++k) {
    const Token& tok = tokens[k];
    const std::string_view w = text(source, tok);
    if (tok.kind == TokenKind::Punct && w == "[" && !ends_operand(source, tokens, k) &&
        !token_is(source, tokens, k + 1, "[") && !token_is(source, tokens, k - 1, "[")) {
      fail(k, "a lambda expression, which the group-loop form does not follow");
      return;
    }
    if (tok.kind != TokenKind::Identifier || is_member(source, tokens, k)) {
      if (tok.kind == TokenKind::Identifier && k > 0 && token_is(source, tokens, k - 1, "::") &&
          (sync_of_call(w) != Sync::None || is_matrix_type(w))) {
        // metal::simd_sum(...): the qualified name is the call.
      } else {
        continue;
      }
    }
    if (w == "goto" || w == "asm" || w == "__asm__") {
      fail(k, std::string(w) + ", which the group-loop form does not follow");
      return;
    }
    if (is_cooperative(w)) {
      syncs[k] = Sync::Unsupported;
      fail(k, std::string(w) +
                  " (a cooperative operation of a whole execution scope) runs in fiber mode");
      return;
    }
    if (is_matrix_type(w)) {
      syncs[k] = Sync::MatrixType;
      continue;
    }
    // A call (a variable may be named simd_max too).
    if (call_paren(source, tokens, k, last) == std::string_view::npos) continue;
    const Sync sync = sync_of_call(w);
    if (sync == Sync::None && w.starts_with("simdgroup_")) {
      syncs[k] = Sync::Unsupported;
      fail(k, std::string(w) + " runs in fiber mode");
      return;
    }
    syncs[k] = sync;
  }
  for (const ThreadgroupAccess& a : find_threadgroup_accesses(source)) {
    const auto it = std::lower_bound(
        tokens.begin(), tokens.end(), a.begin,
        [](const Token& tok, size_t pos) { return tok.begin < pos; });
    if (it != tokens.end() && it->begin == a.begin) {
      threadgroup_access[static_cast<size_t>(it - tokens.begin())] = static_cast<int8_t>(a.kind);
    }
  }
}

bool Analysis::has_sync(size_t first, size_t last, bool barrier) const {
  for (size_t k = first; k < last && k < syncs.size(); ++k) {
    const Sync s = syncs[k];
    if (barrier ? s == Sync::Barrier : (s != Sync::None && s != Sync::Barrier)) return true;
  }
  return false;
}

// ---- names -------------------------------------------------------------------

namespace {

// Resolves names with C++'s block scopes and records, per variable, the
// conditions its declaration and its modifications run under.
struct Resolver {
  Analysis& a;
  std::string_view s;
  const std::vector<Token>& t;
  std::vector<std::vector<std::pair<std::string_view, int>>> scopes;
  std::vector<TokenRange> guards;
  std::unordered_map<std::string_view, int> params;
  const std::vector<std::string>* pure_helpers;
  std::string failure;
  size_t failure_token = 0;

  void fail(size_t k, std::string why) {
    if (failure.empty()) {
      failure = std::move(why);
      failure_token = k;
    }
  }

  int lookup(std::string_view n) const {
    for (auto scope = scopes.rbegin(); scope != scopes.rend(); ++scope) {
      for (auto e = scope->rbegin(); e != scope->rend(); ++e) {
        if (e->first == n) return e->second;
      }
    }
    return -1;
  }

  void name_tokens(size_t first, size_t last) {
    for (size_t k = first; k < last; ++k) {
      if (t[k].kind != TokenKind::Identifier || is_member(s, t, k)) continue;
      const std::string_view w = text(s, t[k]);
      const int v = lookup(w);
      if (v >= 0) {
        a.names[k] = {Name::Kind::Variable, v};
        a.variables[static_cast<size_t>(v)].last_use =
            std::max(a.variables[static_cast<size_t>(v)].last_use, k);
        continue;
      }
      const auto p = params.find(w);
      if (p != params.end()) {
        const bool attribute = !a.kernel.params[static_cast<size_t>(p->second)].attribute.empty();
        a.names[k] = {attribute ? Name::Kind::Attribute : Name::Kind::Buffer, p->second};
      }
    }
  }

  // The end of the expression that starts at `k`: the first `;`, `,` or
  // unmatched closer at its depth.
  size_t expression_end(size_t k, size_t last) const {
    while (k < last) {
      const std::string_view w = text(s, t[k]);
      if (w == ";" || w == "," || w == ")" || w == "]" || w == "}") return k;
      if (w == "(" || w == "[" || w == "{") {
        k = skip_group(s, t, k);
        continue;
      }
      ++k;
    }
    return last;
  }

  // The call whose argument list holds token k as a whole argument, or npos.
  size_t enclosing_call(size_t k, size_t first) const {
    int depth = 0;
    for (size_t j = k; j-- > first;) {
      const std::string_view w = text(s, t[j]);
      if (w == ")" || w == "]" || w == "}") ++depth;
      if ((w == "(" || w == "[" || w == "{") && depth-- == 0) {
        if (w != "(" || j == 0) return std::string_view::npos;
        return j - 1;
      }
      if (w == ";") return std::string_view::npos;
    }
    return std::string_view::npos;
  }

  // Modifications of variables in tokens [first, last) of `st`.
  void find_sites(const Statement& st, size_t first, size_t last, bool in_header) {
    bool conditional = false;
    for (size_t k = first; k < last; ++k) {
      const std::string_view w = text(s, t[k]);
      conditional |= w == "?" || (w == "&" && joined(t, k) && token_is(s, t, k + 1, "&")) ||
                     (w == "|" && joined(t, k) && token_is(s, t, k + 1, "|"));
    }
    for (size_t k = first; k < last; ++k) {
      if (a.names[k].kind != Name::Kind::Variable) continue;
      Variable& v = a.variables[static_cast<size_t>(a.names[k].index)];
      if (v.token == k) continue;
      const bool pointer_like = v.declaration.is_auto || v.view ||
                                v.declaration.declarators[v.declarator].pointer ||
                                v.threadgroup;
      size_t j = k + 1;
      if (v.array) {
        while (token_is(s, t, j, "[")) j = skip_group(s, t, j);
      }
      if (!pointer_like) {
        while (token_is(s, t, j, ".") && j + 1 < last && t[j + 1].kind == TokenKind::Identifier &&
               !token_is(s, t, j + 2, "(")) {
          j += 2;
        }
      }
      // x.f(...): a member function may change x.
      if (token_is(s, t, j, ".") && token_is(s, t, j + 2, "(")) {
        const std::string_view method = text(s, t[j + 1]);
        if (!(v.matrix && method == "thread_elements") && !v.view) v.escapes = true;
      }
      // &x: its address may be written through.
      if (k > 0 && token_is(s, t, k - 1, "&") && !ends_operand(s, t, k - 1) &&
          !(k >= 2 && token_is(s, t, k - 2, "&") && joined(t, k - 2)) && !v.threadgroup &&
          !v.view) {
        v.escapes = true;
      }
      // f(x): f may take x by reference.
      if (k > first && (token_is(s, t, k - 1, "(") || token_is(s, t, k - 1, ",")) &&
          (token_is(s, t, j, ")") || token_is(s, t, j, ",")) && !v.threadgroup && !v.view &&
          !v.matrix) {
        const size_t callee = enclosing_call(k, first);
        if (callee != std::string_view::npos && t[callee].kind == TokenKind::Identifier) {
          const std::string_view f = text(s, t[callee]);
          const bool by_value =
              is_pure_function(f) || is_metal_type(f) || sync_of_call(f) != Sync::None ||
              is_keyword(f) ||
              std::find(pure_helpers->begin(), pure_helpers->end(), f) != pure_helpers->end();
          if (!by_value) v.escapes = true;
        } else if (callee != std::string_view::npos && token_is(s, t, callee, ">")) {
          v.escapes = true;  // f<T>(x)
        }
      }
      Site site;
      site.token = k;
      site.statement = &st;
      site.in_header = in_header;
      site.guards = guards;
      if (conditional) site.guards.emplace_back(first, last);
      bool modified = false;
      size_t value_end = j;
      const std::string_view op = j < last ? text(s, t[j]) : "";
      const bool op_joined_eq = joined(t, j) && token_is(s, t, j + 1, "=");
      if (op == "=" && !op_joined_eq) {
        modified = true;
        value_end = expression_end(j + 1, last);
        site.value = {j + 1, value_end};
      } else if (in(op, {"+", "-", "*", "/", "%", "&", "|", "^"}) && op_joined_eq) {
        modified = true;
        site.compound = true;
        value_end = expression_end(j + 2, last);
        site.value = {j + 2, value_end};
      } else if ((op == "<" || op == ">") && token_is(s, t, j + 1, op) && joined(t, j) &&
                 joined(t, j + 1) && token_is(s, t, j + 2, "=")) {
        modified = true;
        site.compound = true;
        value_end = expression_end(j + 3, last);
        site.value = {j + 3, value_end};
      } else if ((op == "+" || op == "-") && token_is(s, t, j + 1, op) && joined(t, j)) {
        modified = true;
        site.compound = true;
        value_end = j + 2;
      }
      size_t start = k;
      if (!modified && k >= 2 && joined(t, k - 2) &&
          ((token_is(s, t, k - 2, "+") && token_is(s, t, k - 1, "+")) ||
           (token_is(s, t, k - 2, "-") && token_is(s, t, k - 1, "-")))) {
        modified = true;
        site.compound = true;
        start = k - 2;
      }
      if (!modified) continue;
      site.standalone = st.kind == StatementKind::Simple && start == st.first &&
                        value_end + 1 == st.last && !in_header;
      if (in_header) site.standalone = value_end == last && start == first;
      v.sites.push_back(std::move(site));
    }
  }

  int declare(const Statement& st, const Declaration& d, size_t i, bool for_header, bool view) {
    Variable v;
    const Declarator& dc = d.declarators[i];
    v.name = std::string(text(s, t[dc.name]));
    v.token = dc.name;
    v.statement = &st;
    v.declaration = d;
    v.declarator = i;
    v.for_header = for_header;
    v.view = view;
    v.threadgroup = d.is_threadgroup;
    for (size_t k = d.specifiers.first; k < d.specifiers.second; ++k) {
      v.matrix |= is_matrix_type(text(s, t[k]));
    }
    v.array = dc.dims_last > dc.dims_first && !dc.pointer && !v.threadgroup;
    v.guards = guards;
    v.last_use = dc.name;
    a.variables.push_back(std::move(v));
    const int index = static_cast<int>(a.variables.size() - 1);
    a.names[dc.name] = {Name::Kind::Variable, index};
    scopes.back().emplace_back(text(s, t[dc.name]), index);
    return index;
  }

  // A declaration or expression statement (or a for header's init, with
  // `st` the for statement and [first, last) the init).
  void simple(const Statement& st, size_t first, size_t last, bool for_header, bool view) {
    Statement probe;
    probe.kind = StatementKind::Simple;
    probe.first = first;
    probe.last = last + 1;  // its `;`
    if (declares_type(s, t, probe)) {
      name_tokens(first, last);
      return;
    }
    const std::optional<Declaration> d = parse_declaration(s, t, probe);
    if (!d) {
      name_tokens(first, last);
      find_sites(st, first, last, for_header);
      return;
    }
    name_tokens(d->specifiers.first, d->specifiers.second);
    for (size_t i = 0; i < d->declarators.size(); ++i) {
      const Declarator& dc = d->declarators[i];
      name_tokens(dc.dims_first, dc.dims_last);
      name_tokens(dc.init_tokens.first, dc.init_tokens.second);
      find_sites(st, dc.init_tokens.first, dc.init_tokens.second, for_header);
      if (dc.reference && !view) {
        fail(dc.name, "a reference variable, which the group-loop form does not follow");
      }
      declare(st, *d, i, for_header, view);
    }
  }

  // Conditions under which a break or continue leaves the loop whose body is `st`.
  void exit_guards(const Statement& st, std::vector<TokenRange>& path,
                   std::vector<TokenRange>& out, bool nested_loop, bool in_switch) const {
    switch (st.kind) {
      case StatementKind::Break:
        if (!nested_loop && !in_switch) out.insert(out.end(), path.begin(), path.end());
        return;
      case StatementKind::Continue:
        if (!nested_loop) out.insert(out.end(), path.begin(), path.end());
        return;
      case StatementKind::If:
        path.push_back(st.head[0]);
        for (const Statement& b : st.body) exit_guards(b, path, out, nested_loop, in_switch);
        path.pop_back();
        return;
      case StatementKind::For:
      case StatementKind::While:
      case StatementKind::Do:
        for (const Statement& b : st.body) exit_guards(b, path, out, true, in_switch);
        return;
      case StatementKind::Switch:
        path.push_back(st.head[0]);
        for (const Statement& b : st.body) exit_guards(b, path, out, nested_loop, true);
        path.pop_back();
        return;
      default:
        for (const Statement& b : st.body) exit_guards(b, path, out, nested_loop, in_switch);
        return;
    }
  }

  void sub(const Statement& st, bool in_switch) {
    scopes.emplace_back();
    statement(st, in_switch);
    scopes.pop_back();
  }

  void loop_body(const Statement& st, TokenRange condition, bool in_switch) {
    std::vector<TokenRange> path, exits;
    exit_guards(st.body[0], path, exits, false, false);
    const size_t pushed = 1 + exits.size();
    guards.push_back(condition);
    guards.insert(guards.end(), exits.begin(), exits.end());
    sub(st.body[0], in_switch);
    guards.resize(guards.size() - pushed);
  }

  void statement(const Statement& st, bool in_switch) {
    switch (st.kind) {
      case StatementKind::Block:
        scopes.emplace_back();
        for (const Statement& b : st.body) statement(b, in_switch);
        scopes.pop_back();
        return;
      case StatementKind::If:
        name_tokens(st.head[0].first, st.head[0].second);
        find_sites(st, st.head[0].first, st.head[0].second, false);
        guards.push_back(st.head[0]);
        for (const Statement& b : st.body) sub(b, in_switch);
        guards.pop_back();
        return;
      case StatementKind::For:
        scopes.emplace_back();
        if (st.range_for) {
          name_tokens(st.head[0].first, st.head[0].second);
          fail(st.first, "a range-based for loop, which the group-loop form does not follow");
        } else {
          if (st.head[0].second > st.head[0].first) {
            simple(st, st.head[0].first, st.head[0].second, true, false);
          }
          name_tokens(st.head[1].first, st.head[1].second);
          name_tokens(st.head[2].first, st.head[2].second);
          std::vector<TokenRange> path, exits;
          exit_guards(st.body[0], path, exits, false, false);
          guards.push_back(st.head[1]);
          guards.insert(guards.end(), exits.begin(), exits.end());
          find_sites(st, st.head[1].first, st.head[1].second, false);
          find_sites(st, st.head[2].first, st.head[2].second, true);
          guards.resize(guards.size() - 1 - exits.size());
        }
        loop_body(st, st.head[1], in_switch);
        scopes.pop_back();
        return;
      case StatementKind::While:
      case StatementKind::Do:
        if (st.kind == StatementKind::While) name_tokens(st.head[0].first, st.head[0].second);
        loop_body(st, st.head[0], in_switch);
        if (st.kind == StatementKind::Do) name_tokens(st.head[0].first, st.head[0].second);
        find_sites(st, st.head[0].first, st.head[0].second, false);
        return;
      case StatementKind::Switch:
        name_tokens(st.head[0].first, st.head[0].second);
        guards.push_back(st.head[0]);
        for (const Statement& b : st.body) sub(b, true);
        guards.pop_back();
        return;
      case StatementKind::Simple:
        simple(st, st.first, st.last - 1, false, false);
        return;
      case StatementKind::Return:
        a.can_return = true;
        name_tokens(st.first, st.last);
        return;
      case StatementKind::Unsupported:
        if (!in_switch) fail(st.first, "a statement the group-loop form does not follow");
        name_tokens(st.first, st.last);
        return;
      default:
        name_tokens(st.first, st.last);
        return;
    }
  }
};

// Helper functions whose parameters are values and whose bodies name no
// memory of any address space: calling one computes from its arguments alone.
std::vector<std::string> find_pure_helpers(std::string_view s, const std::vector<Token>& t,
                                           size_t end) {
  std::vector<std::string> pure, impure;
  int depth = 0;
  for (size_t k = 0; k + 1 < end; ++k) {
    const std::string_view w = text(s, t[k]);
    if (w == "{") ++depth;
    if (w == "}") --depth;
    if (depth != 0 || t[k].kind != TokenKind::Identifier || !token_is(s, t, k + 1, "(")) continue;
    const size_t close = close_of(s, t, k + 1);
    size_t open = close + 1;
    while (open < end && t[open].kind == TokenKind::Identifier) ++open;  // const, noexcept
    if (!token_is(s, t, open, "{")) continue;
    const size_t body_end = close_of(s, t, open);
    bool values_only = true;
    for (size_t j = k + 2; j < body_end && values_only; ++j) {
      const std::string_view p = text(s, t[j]);
      const bool parameter = j < close;
      values_only = !(parameter && (p == "*" || p == "&")) &&
                    !in(p, {"device", "threadgroup", "constant", "thread"});
    }
    (values_only ? pure : impure).emplace_back(w);
    k = body_end;
  }
  std::vector<std::string> out;
  for (const std::string& n : pure) {
    if (std::find(impure.begin(), impure.end(), n) == impure.end()) out.push_back(n);
  }
  return out;
}

}  // namespace

void Analysis::resolve() {
  pure_helpers_ = find_pure_helpers(source, tokens, kernel.start);
  Resolver r{*this, source, tokens, {}, {}, {}, &pure_helpers_, {}, 0};
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    r.params[kernel.params[i].name] = static_cast<int>(i);
  }
  r.scopes.emplace_back();
  for (const Statement& st : preamble) {
    if (st.kind == StatementKind::Simple) r.simple(st, st.first, st.last - 1, false, true);
  }
  r.scopes.emplace_back();
  for (const Statement& st : body) r.statement(st, false);
  if (!r.failure.empty()) fail(r.failure_token, r.failure);
}

// ---- uniformity ------------------------------------------------------------------

namespace {

struct Scan {
  Uniformity level = Uniformity::Group;
  bool pure = true;
};

// One pass over tokens r: how uniform their value is, and whether computing
// it has no effect and reads no memory (then it can run once for all threads).
Scan scan_tokens(const Analysis& a, TokenRange r, const std::vector<std::string>& helpers,
                 const std::unordered_map<std::string, bool>& macros) {
  const std::string_view s = a.source;
  const std::vector<Token>& t = a.tokens;
  Scan out;
  auto lower = [&](Uniformity u) { out.level = meet(out.level, u); };
  for (size_t k = r.first; k < r.second && k < t.size(); ++k) {
    const Token& tok = t[k];
    const std::string_view w = text(s, tok);
    if (tok.kind == TokenKind::Punct) {
      if (w == "=" && !(joined(t, k) && token_is(s, t, k + 1, "=")) &&
          !(k > 0 && joined(t, k - 1) && in(text(s, t[k - 1]), {"=", "!", "<", ">"}) &&
            !(k >= 2 && joined(t, k - 2) && token_is(s, t, k - 2, text(s, t[k - 1]))))) {
        out.pure = false;  // an assignment (or a compound one)
      }
      if ((w == "+" || w == "-") && joined(t, k) && token_is(s, t, k + 1, w)) out.pure = false;
      if (w == "*" && !ends_operand(s, t, k)) {  // a dereference
        lower(Uniformity::Varying);
        out.pure = false;
      }
      if (w == "-" && joined(t, k) && token_is(s, t, k + 1, ">")) {
        lower(Uniformity::Varying);
        out.pure = false;
      }
      continue;
    }
    if (tok.kind != TokenKind::Identifier) continue;
    // A simdgroup matrix type or function: the whole SIMD-group's (the group-loop
    // form runs statements with them once per SIMD-group); its arguments count.
    if (a.syncs[k] == Sync::MatrixType) continue;
    if (a.syncs[k] == Sync::MatrixCall) {
      if (text(s, tok) != "make_filled_simdgroup_matrix") out.pure = false;
      continue;
    }
    const bool address = k > 0 && token_is(s, t, k - 1, "&") && !ends_operand(s, t, k - 1);
    const bool subscripted = token_is(s, t, k + 1, "[");
    if (is_member(s, t, k)) {
      if (token_is(s, t, k + 1, "(")) {
        if (token_is(s, t, k - 1, "::") && (is_pure_function(w) || is_metal_type(w))) continue;
        if (!token_is(s, t, k - 1, "::") && in(w, {"get_extent", "get_data_ptr", "get_rank"})) {
          continue;
        }
        lower(Uniformity::Varying);
        out.pure = false;
      }
      continue;
    }
    const Name& n = a.names[k];
    if (n.kind == Name::Kind::Variable) {
      const Variable& v = a.variables[static_cast<size_t>(n.index)];
      bool memory = subscripted && !v.array && !address;
      if (memory && v.threadgroup) {
        // `tile[r]` of a `tile[R][C]` is a row: an address, not a read.
        const Declarator& dc = v.declaration.declarators[v.declarator];
        size_t dims = 0, used = 0;
        for (size_t d = dc.dims_first; d < dc.dims_last; d = skip_group(s, t, d)) ++dims;
        for (size_t j = k + 1; token_is(s, t, j, "["); j = skip_group(s, t, j)) ++used;
        memory = used >= dims;
      }
      if (memory) {
        lower(Uniformity::Varying);
        out.pure = false;
      } else if (v.matrix) {
        lower(Uniformity::Simd);
      } else if (!v.threadgroup && !v.view) {
        lower(v.level);
      }
      continue;
    }
    if (n.kind == Name::Kind::Attribute) {
      lower(attribute_uniformity(a.kernel.params[static_cast<size_t>(n.index)].attribute));
      continue;
    }
    if (n.kind == Name::Kind::Buffer) {
      const KernelParameter& p = a.kernel.params[static_cast<size_t>(n.index)];
      if (subscripted && !address && p.type.find("constant") == std::string::npos) {
        lower(Uniformity::Varying);
        out.pure = false;
      }
      continue;
    }
    if (is_keyword(w)) continue;
    const size_t paren = call_paren(s, t, k, r.second);
    if (paren != std::string_view::npos) {
      if (sync_of_call(w) == Sync::SimdValue) {
        out.pure = false;
        lower(shares_result(w) ? Uniformity::Simd : Uniformity::Varying);
        k = close_of(s, t, paren);  // the arguments do not matter
        continue;
      }
      if (is_pure_function(w) || is_metal_type(w) ||
          std::find(helpers.begin(), helpers.end(), w) != helpers.end()) {
        continue;
      }
      lower(Uniformity::Varying);
      out.pure = false;
      continue;
    }
    const auto macro = macros.find(std::string(w));
    if (macro != macros.end() && !macro->second) {
      // Only constant macros (`#define TILE 16`) are followed.
      lower(Uniformity::Varying);
      out.pure = false;
    }
    // Otherwise a program-scope constant, an enumerator or a type: uniform.
  }
  return out;
}

}  // namespace

Uniformity Analysis::uniformity(TokenRange r) const {
  return scan_tokens(*this, r, pure_helpers_, macros_).level;
}

bool Analysis::pure(TokenRange r) const {
  return scan_tokens(*this, r, pure_helpers_, macros_).pure;
}

void Analysis::compute_levels() {
  for (Variable& v : variables) {
    if (v.matrix) v.level = Uniformity::Simd;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (Variable& v : variables) {
      if (v.view || v.threadgroup || v.matrix) continue;
      Uniformity u = v.escapes ? Uniformity::Varying : Uniformity::Group;
      for (const TokenRange& g : v.guards) u = meet(u, uniformity(g));
      const Declarator& dc = v.declaration.declarators[v.declarator];
      if (dc.init != Declarator::Init::None) u = meet(u, uniformity(dc.init_tokens));
      for (const Site& site : v.sites) {
        u = meet(u, uniformity(site.value));
        for (const TokenRange& g : site.guards) u = meet(u, uniformity(g));
      }
      if (u < v.level) {
        v.level = u;
        changed = true;
      }
    }
  }
}

// ---- where statements run ------------------------------------------------------

std::vector<Analysis::Item> Analysis::group_items(const Statement* list, size_t count) const {
  std::vector<Item> items;
  for (size_t i = 0; i < count; ++i) {
    if (has_barrier(list[i])) {
      items.push_back({i, i + 1, true, false});
      continue;
    }
    if (items.empty() || items.back().structural) items.push_back({i, i, false, false});
    items.back().end = i + 1;
    items.back().simd |= has_simd(list[i]);
  }
  return items;
}

Analysis::Placement Analysis::placement(const Statement& st) const {
  const auto it = placements_.find(&st);
  return it == placements_.end() ? Placement::Lane : it->second;
}

namespace {

// The statement lists directly inside a compound statement: a block's
// statements, or each branch or loop body as a list of one.
template <class F>
void for_each_child_list(const Statement& st, F f) {
  if (st.kind == StatementKind::Block) {
    f(st.body.data(), st.body.size());
    return;
  }
  for (const Statement& b : st.body) {
    if (b.kind == StatementKind::Block) {
      f(b.body.data(), b.body.size());
    } else {
      f(&b, 1);
    }
  }
}

bool is_compound(const Statement& st) {
  return st.kind == StatementKind::Block || st.kind == StatementKind::If ||
         st.kind == StatementKind::For || st.kind == StatementKind::While ||
         st.kind == StatementKind::Do;
}

}  // namespace

void Analysis::compute_placements() {
  struct Walk {
    Analysis& a;
    void lane(const Statement& st) {
      for (const Statement& b : st.body) {
        a.placements_[&b] = Placement::Lane;
        lane(b);
      }
    }
    void simd_list(const Statement* list, size_t count) {
      for (size_t i = 0; i < count; ++i) {
        const Statement& st = list[i];
        a.placements_[&st] = Placement::Simd;
        if (is_compound(st) && a.has_simd(st)) {
          for (const Statement& b : st.body) {
            if (b.kind == StatementKind::Block) a.placements_[&b] = Placement::Simd;
          }
          for_each_child_list(st, [&](const Statement* l, size_t n) { simd_list(l, n); });
        } else {
          lane(st);
        }
      }
    }
    void group_list(const Statement* list, size_t count) {
      for (const Item& item : a.group_items(list, count)) {
        for (size_t i = item.begin; i < item.end; ++i) {
          const Statement& st = list[i];
          if (item.structural) {
            a.placements_[&st] = Placement::Group;
            for (const Statement& b : st.body) {
              if (b.kind == StatementKind::Block) a.placements_[&b] = Placement::Group;
            }
            for_each_child_list(st, [&](const Statement* l, size_t n) { group_list(l, n); });
          } else if (item.simd) {
            simd_list(&st, 1);
          } else {
            a.placements_[&st] = Placement::Group;
            lane(st);
          }
        }
      }
    }
  };
  Walk{*this}.group_list(body.data(), body.size());
}

// ---- one copy for all threads ------------------------------------------------------

void Analysis::compute_single_copies() {
  single_.assign(variables.size(), Uniformity::Varying);
  std::vector<bool> candidate(variables.size(), false);
  // Variables named in tokens r.
  auto referenced = [&](TokenRange r, std::vector<int>& out) {
    for (size_t k = r.first; k < r.second && k < names.size(); ++k) {
      if (names[k].kind == Name::Kind::Variable) out.push_back(names[k].index);
    }
  };
  std::vector<std::vector<int>> depends(variables.size());
  for (size_t i = 0; i < variables.size(); ++i) {
    const Variable& v = variables[i];
    if (v.view) {
      single_[i] = Uniformity::Group;
      continue;
    }
    const Declarator& dc = v.declaration.declarators[v.declarator];
    if (v.threadgroup || v.matrix || v.escapes || v.declaration.is_static || dc.reference) continue;
    const Placement where = placement(*v.statement);
    if (where == Placement::Lane) continue;
    if (v.declaration.is_constexpr) {
      candidate[i] = true;
      single_[i] = Uniformity::Group;
      continue;
    }
    const Uniformity needed = where == Placement::Group ? Uniformity::Group : Uniformity::Simd;
    if (v.level < needed) continue;
    if (dc.init != Declarator::Init::None && !pure(dc.init_tokens)) continue;
    bool ok = true;
    for (const Site& site : v.sites) {
      ok &= (site.standalone || site.in_header) && pure(site.value) &&
            placement(*site.statement) == where;
      referenced(site.value, depends[i]);
    }
    if (!ok) continue;
    referenced(dc.init_tokens, depends[i]);
    referenced({dc.dims_first, dc.dims_last}, depends[i]);
    candidate[i] = true;
    single_[i] = v.level;
  }
  // A copy computed once can only read values that exist once.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < variables.size(); ++i) {
      if (!candidate[i] || variables[i].declaration.is_constexpr) continue;
      for (int d : depends[i]) {
        if (d != static_cast<int>(i) && single_[static_cast<size_t>(d)] == Uniformity::Varying &&
            !variables[static_cast<size_t>(d)].threadgroup) {
          candidate[i] = false;
          single_[i] = Uniformity::Varying;
          changed = true;
          break;
        }
      }
    }
  }
}

// ---- lockstep ----------------------------------------------------------------------

namespace {

// Fiber mode keeps the lanes of a SIMD-group in step at threadgroup memory
// (fiber_runtime.h): a lane that goes from reading it to writing it, or the
// reverse, or that makes an access of both kinds after another access, waits
// for its SIMD-group. The group-loop form runs each region thread after
// thread and cannot wait; it takes a kernel only where no lane could. The
// state is the set of kinds the last access since a synchronisation may have
// had, over every path.
constexpr uint8_t kRead = 1, kWrite = 2, kOther = 4;

struct Lockstep {
  const Analysis& a;
  std::string failure;
  size_t failure_token = 0;

  void access(uint8_t& state, uint8_t kind, size_t k) {
    if (state != 0 && (state != kind || kind == kOther) && failure.empty()) {
      failure = "threadgroup memory is read and written between two synchronisations, where "
                "fiber mode keeps the lanes of a SIMD-group in step";
      failure_token = k;
    }
    state = kind;
  }

  bool names_threadgroup(size_t first, size_t last) const {
    for (size_t k = first; k < last; ++k) {
      if (a.names[k].kind == Name::Kind::Variable &&
          a.variables[static_cast<size_t>(a.names[k].index)].threadgroup) {
        return true;
      }
      if (token_is(a.source, a.tokens, k, "threadgroup")) return true;
    }
    return false;
  }

  // `*(threadgroup T*)(p) = v` writes, `*(threadgroup T*)(p)` elsewhere reads;
  // any other use of such a cast may do both.
  uint8_t cast_access(size_t k) const {
    const std::string_view s = a.source;
    const std::vector<Token>& t = a.tokens;
    if (!token_is(s, t, k - 1, "(") || k < 2 || !token_is(s, t, k - 2, "*") ||
        ends_operand(s, t, k - 2)) {
      return kOther;
    }
    size_t j = skip_group(s, t, k - 1);  // past the cast's parentheses
    if (token_is(s, t, j, "(")) {
      j = skip_group(s, t, j);
    } else if (j < t.size() && t[j].kind == TokenKind::Identifier) {
      ++j;
    } else {
      return kOther;
    }
    if (token_is(s, t, j, "=")) return joined(t, j) && token_is(s, t, j + 1, "=") ? kRead : kWrite;
    const std::string_view w = j < t.size() ? text(s, t[j]) : "";
    const bool arithmetic = in(w, {"+", "-", "*", "/", "%", "&", "|", "^"});
    if (joined(t, j) && token_is(s, t, j + 1, "=") && arithmetic) {
      return kOther;
    }
    if ((w == "+" || w == "-") && joined(t, j) && token_is(s, t, j + 1, w)) return kOther;
    return kRead;
  }

  uint8_t tokens(size_t first, size_t last, uint8_t state) {
    const std::string_view s = a.source;
    const std::vector<Token>& t = a.tokens;
    for (size_t k = first; k < last; ++k) {
      const Sync sync = a.syncs[k];
      if (sync == Sync::Barrier || sync == Sync::SimdBarrier || sync == Sync::SimdValue ||
          sync == Sync::MatrixCall) {
        const size_t paren = call_paren(s, t, k, last);
        const size_t close = close_of(s, t, paren);
        state = tokens(paren + 1, close, state);  // the arguments come first
        const std::string_view w = text(s, t[k]);
        if (w == "simdgroup_load" || w == "simdgroup_store") {
          // A lane's own elements, no rendezvous (simdgroup_matrix.h).
          if (names_threadgroup(paren + 1, close)) {
            access(state, w == "simdgroup_load" ? kRead : kWrite, k);
          }
        } else if (w != "make_filled_simdgroup_matrix") {
          state = 0;  // a barrier or a rendezvous of the SIMD-group
        }
        k = close;
        continue;
      }
      const int8_t kind = a.threadgroup_access[k];
      if (kind > 0) {
        access(state, kind == 1 ? kRead : kind == 2 ? kWrite : kOther, k);
        continue;
      }
      // A cast to a threadgroup pointer: an access the source pass does not see.
      if (token_is(s, t, k, "threadgroup") && k > 0 &&
          (token_is(s, t, k - 1, "(") || token_is(s, t, k - 1, "<"))) {
        access(state, cast_access(k), k);
      }
    }
    return state;
  }

  uint8_t loop(const Statement& st, uint8_t state, TokenRange condition, TokenRange step,
               bool condition_first) {
    uint8_t entry = state;
    for (int pass = 0; pass < 3; ++pass) {
      uint8_t s = entry;
      if (condition_first) s = tokens(condition.first, condition.second, s);
      s = statement(st.body[0], s);
      s = tokens(step.first, step.second, s);
      if (!condition_first) s = tokens(condition.first, condition.second, s);
      if ((entry | s) == entry) break;
      entry |= s;
    }
    return tokens(condition.first, condition.second, entry);
  }

  uint8_t statement(const Statement& st, uint8_t state) {
    switch (st.kind) {
      case StatementKind::Block:
        for (const Statement& b : st.body) state = statement(b, state);
        return state;
      case StatementKind::If: {
        state = tokens(st.head[0].first, st.head[0].second, state);
        const uint8_t then = statement(st.body[0], state);
        return then | (st.has_else ? statement(st.body[1], state) : state);
      }
      case StatementKind::For:
        state = tokens(st.head[0].first, st.head[0].second, state);
        return loop(st, state, st.head[1], st.head[2], true);
      case StatementKind::While:
        return loop(st, state, st.head[0], {}, true);
      case StatementKind::Do:
        return loop(st, state, st.head[0], {}, false);
      case StatementKind::Switch:
        state = tokens(st.head[0].first, st.head[0].second, state);
        // Cases may be entered anywhere: every statement from every state.
        for (int pass = 0; pass < 2; ++pass) state |= statement(st.body[0], state);
        return state;
      default:
        return tokens(st.first, st.last, state);
    }
  }
};

}  // namespace

void Analysis::check_lockstep() {
  Lockstep lock{*this, {}, 0};
  uint8_t state = 0;
  for (const Statement& st : body) state = lock.statement(st, state);
  if (!lock.failure.empty()) fail(lock.failure_token, lock.failure);
}

}  // namespace coreai_torch::cpu::group_form
