#include "source/metal_fidelity.h"

#include <c10/util/Exception.h>
#include <cxxabi.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>

#include "contract/contract.h"
#include "source/metal_tokens.h"

namespace coreai_torch::source {
namespace {

// The sections of the Metal Shading Language specification each rule rests on.
constexpr const char* kRestrictions = "MSL specification §1.5.4 \"Restrictions\"";
constexpr const char* kScalarTypes = "MSL specification §2.1 \"Scalar Data Types\"";
constexpr const char* kAddressSpaces = "MSL specification §4 \"Address Spaces\"";
constexpr const char* kProgramScope =
    "MSL specification §4.2 \"Constant Address Space\": program-scope variables are constant";

// A word Metal refuses wherever it stands, and why.
struct RefusedWord {
  std::string_view word;
  std::string reason;  // follows "'<word>': "
};

// The words the scan refuses wherever it finds them. The compile refuses them
// too where a macro makes them (with_refused_word_guards), which the scan cannot see.
const std::vector<RefusedWord>& refused_words() {
  static const std::vector<RefusedWord> words = [] {
    const std::string restrictions(kRestrictions);
    const std::string exceptions = "Metal has no exceptions (" + restrictions +
                                   ": exception handling)";
    const std::string assembly =
        "Metal has no inline assembly; GPU code is written in MSL only (MSL specification "
        "§1.5 \"Metal and C++14\")";
    const std::string rtti = "Metal has no run-time type information (" + restrictions +
                             ": dynamic_cast, type identification)";
    return std::vector<RefusedWord>{
        {"double", "Metal has no double-precision type; use float (" +
                       std::string(kScalarTypes) + ")"},
        {"virtual", "Metal has no virtual functions (" + restrictions + ")"},
        {"throw", exceptions},
        {"try", exceptions},
        {"catch", exceptions},
        {"goto", "Metal has no goto statement; use structured control flow (" + restrictions +
                     ")"},
        {"asm", assembly},
        {"__asm", assembly},
        {"__asm__", assembly},
        {"dynamic_cast", rtti},
        {"typeid", rtti},
    };
  }();
  return words;
}

const RefusedWord* refused_word(std::string_view w) {
  for (const RefusedWord& r : refused_words()) {
    if (r.word == w) return &r;
  }
  return nullptr;
}

// The rendering's own directive that starts the user's helper_src
// (contract.py, render_buffer_source); the prelude before it holds no user text.
constexpr std::string_view kHelperStart = "#line 1 \"helper_src\"\n";

bool is(std::string_view s, const std::vector<Token>& t, size_t k, std::string_view word) {
  return k < t.size() && text(s, t[k]) == word;
}

// Metal's address-space words, all of them (not only those the CPU passes rewrite).
bool is_address_space(std::string_view w) {
  return w == "device" || w == "constant" || w == "threadgroup" || w == "thread" ||
         w == "threadgroup_imageblock" || w == "ray_data" || w == "object_data";
}

// Metal's built-in scalar, vector and matrix type names (MSL §2.1-2.3):
// `float`, `uchar4`, `packed_half3`, `float4x4`, ...
bool is_builtin_type(std::string_view w) {
  static constexpr std::array<std::string_view, 27> scalars = {
      "bool",    "char",    "uchar",    "short",    "ushort",   "int",     "uint",
      "long",    "ulong",   "half",     "bfloat",   "float",    "void",    "unsigned",
      "signed",  "int8_t",  "uint8_t",  "int16_t",  "uint16_t", "int32_t", "uint32_t",
      "int64_t", "uint64_t", "size_t",  "ptrdiff_t", "atomic_int", "atomic_uint"};
  if (std::find(scalars.begin(), scalars.end(), w) != scalars.end()) return true;
  if (w.starts_with("packed_")) w.remove_prefix(7);
  size_t digits = w.size();
  while (digits > 0 && (std::isdigit(static_cast<unsigned char>(w[digits - 1])) ||
                        w[digits - 1] == 'x')) {
    --digits;
  }
  const std::string_view base = w.substr(0, digits), shape = w.substr(digits);
  const bool vector = shape.size() == 1 && shape[0] >= '2' && shape[0] <= '4';
  const bool matrix = shape.size() == 3 && shape[0] >= '2' && shape[0] <= '4' && shape[1] == 'x' &&
                      shape[2] >= '2' && shape[2] <= '4';
  if (!vector && !matrix) return false;
  static constexpr std::array<std::string_view, 11> element = {
      "bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half", "float"};
  if (base == "bfloat") return true;
  return std::find(element.begin(), element.end(), base) != element.end();
}

// Headers the Metal compiler provides; anything else is the C or C++ library.
bool is_metal_header(std::string_view name) {
  return name.starts_with("metal_") || name.starts_with("simd/") ||
         name.starts_with("MetalPerformancePrimitives/");
}

// Words that precede a call rather than a function declarator.
bool is_statement_word(std::string_view w) {
  static constexpr std::array<std::string_view, 10> words = {
      "return", "case", "else", "do", "sizeof", "co_return", "co_yield", "throw", "new", "delete"};
  return std::find(words.begin(), words.end(), w) != words.end();
}

// Names the user's text declares as functions: `T name(` with a type-like
// token before the name.
std::set<std::string_view> declared_functions(std::string_view s, const std::vector<Token>& t) {
  std::set<std::string_view> names;
  for (size_t k = 1; k + 1 < t.size(); ++k) {
    if (t[k].kind != TokenKind::Identifier || !is(s, t, k + 1, "(")) continue;
    const std::string_view before = text(s, t[k - 1]);
    const bool type_like = (t[k - 1].kind == TokenKind::Identifier && !is_statement_word(before)) ||
                           before == ">" || before == "*" || before == "&";
    if (type_like) names.insert(text(s, t[k]));
  }
  return names;
}

// Names the user's text declares as struct, class, union or enum types.
std::set<std::string_view> declared_types(std::string_view s, const std::vector<Token>& t) {
  std::set<std::string_view> names;
  for (size_t k = 0; k + 1 < t.size(); ++k) {
    const std::string_view w = text(s, t[k]);
    if (w != "struct" && w != "class" && w != "union" && w != "enum") continue;
    size_t name = k + 1;
    if (w == "enum" && (is(s, t, name, "class") || is(s, t, name, "struct"))) ++name;
    // `template <class T>`: a template parameter, whose type may carry an address space.
    if (k > 0 && (is(s, t, k - 1, "<") || is(s, t, k - 1, ","))) continue;
    if (name < t.size() && t[name].kind == TokenKind::Identifier) names.insert(text(s, t[name]));
  }
  return names;
}

// Whether the declaration containing the type at `type_token` names an
// address space: the specifiers before it back to the start of the
// declaration (or parameter), and the cv-qualifiers after it.
bool declaration_has_address_space(std::string_view s, const std::vector<Token>& t,
                                   size_t type_token) {
  for (size_t k = type_token; k-- > 0;) {
    const std::string_view w = text(s, t[k]);
    if (is_address_space(w)) return true;
    if (t[k].kind != TokenKind::Identifier && w != "::") break;
  }
  for (size_t k = type_token + 1; k < t.size(); ++k) {
    const std::string_view w = text(s, t[k]);
    if (is_address_space(w)) return true;
    if (w != "const" && w != "volatile") break;
  }
  return false;
}

// The source's conditional directives as the Metal compiler sees them:
// `__METAL__` is defined there, so `#ifndef __METAL__` / `#if !defined(__METAL__)`
// branches and the `#else` of `#ifdef __METAL__` are never compiled (ported
// headers keep their host-side code there). Other conditions count as taken.
// Returns, per line, whether it is in such a branch.
std::vector<bool> lines_metal_skips(std::string_view source) {
  enum Metal { Unknown, IfMetal, IfNotMetal };
  struct Frame {
    Metal condition;
    bool dead;  // the branch in progress is not compiled for Metal
  };
  auto condition_of = [](std::string_view rest) {
    std::string c;
    for (char ch : rest) {
      if (ch != ' ' && ch != '\t' && ch != '(' && ch != ')') c.push_back(ch);
    }
    if (c == "defined__METAL__" || c == "__METAL__") return IfMetal;
    if (c == "!defined__METAL__" || c == "!__METAL__") return IfNotMetal;
    return Unknown;
  };
  std::vector<bool> skipped;
  std::vector<Frame> frames;
  for (std::string_view line : split_lines(source)) {
    std::string_view t = line;
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    const size_t introducer = directive_introducer(t, 0);
    std::string_view word, rest;
    if (introducer > 0) {
      t.remove_prefix(introducer);
      while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
      size_t n = 0;
      while (n < t.size() && std::isalpha(static_cast<unsigned char>(t[n]))) ++n;
      word = t.substr(0, n);
      rest = t.substr(n);
      if (const size_t comment = rest.find("//"); comment != std::string_view::npos) {
        rest = rest.substr(0, comment);
      }
    }
    if (word == "ifdef" || word == "ifndef" || word == "if") {
      // `#ifdef X` / `#ifndef X` name X alone, which condition_of reads as `#if X`.
      const Metal named = condition_of(rest);
      Metal m = named;
      if (word != "if") m = named != IfMetal ? Unknown : word == "ifdef" ? IfMetal : IfNotMetal;
      if (word == "if" && rest.find_first_not_of(" \t0") == std::string_view::npos) {
        m = IfNotMetal;  // #if 0
      }
      frames.push_back({m, m == IfNotMetal});
    } else if ((word == "else" || word == "elif") && !frames.empty()) {
      Frame& f = frames.back();
      f.dead = f.condition == IfMetal;
      if (f.condition == IfNotMetal) f.condition = Unknown;  // the rest may be taken
    } else if (word == "endif" && !frames.empty()) {
      frames.pop_back();
    }
    bool dead = false;
    for (const Frame& f : frames) dead = dead || f.dead;
    skipped.push_back(dead);
  }
  return skipped;
}

class Finder {
 public:
  explicit Finder(std::string_view source)
      : s_(source), map_(source), skipped_lines_(lines_metal_skips(source)) {
    size_t begin = 0;
    for (std::string_view line : split_lines(source)) {
      line_begins_.push_back(begin);
      begin += line.size() + 1;
    }
  }

  std::vector<NonMetalConstruct> run() {
    const std::vector<Token> code = tokenize(s_, false);
    // The user's tokens only; whether each is in a function body is decided
    // on the whole rendering (src is the body of a function it declares).
    const std::vector<bool> in_body = in_function_bodies(s_, code);
    std::vector<Token> t;
    for (size_t k = 0; k < code.size(); ++k) {
      if (!map_.in_user_text(code[k].begin) || skipped(code[k].begin)) continue;
      t.push_back(code[k]);
      in_body_.push_back(in_body[k]);
    }
    check_keywords(t);
    check_pointers(t);
    check_global_calls(t);
    check_program_scope_threadgroup(t);
    check_includes();
    check_line_directives();
    std::sort(found_.begin(), found_.end(), [](const auto& a, const auto& b) {
      return std::tie(a.where.file, a.where.line, a.where.column) <
             std::tie(b.where.file, b.where.line, b.where.column);
    });
    return std::move(found_);
  }

 private:
  // Whether the text at `offset` is in a branch Metal never compiles.
  bool skipped(size_t offset) const {
    const auto it = std::upper_bound(line_begins_.begin(), line_begins_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_begins_.begin()) - 1;
    return line < skipped_lines_.size() && skipped_lines_[line];
  }

  void add(size_t offset, std::string message) {
    found_.push_back({map_.at(offset), std::move(message)});
  }

  void check_keywords(const std::vector<Token>& t) {
    for (size_t k = 0; k < t.size(); ++k) {
      if (t[k].kind != TokenKind::Identifier) continue;
      const std::string_view w = text(s_, t[k]);
      const std::string name(w);
      if (const RefusedWord* refused = refused_word(w)) {
        add(t[k].begin, "'" + name + "': " + refused->reason);
      } else if (w == "new") {
        add(t[k].begin, "'new': Metal has no dynamic memory allocation; use a local array, "
                        "threadgroup memory or a result tensor (" +
                            std::string(kRestrictions) + ": new and delete)");
      } else if (w == "delete" && !is(s_, t, k - 1, "=")) {
        add(t[k].begin, "'delete': Metal has no dynamic memory allocation (" +
                            std::string(kRestrictions) + ": new and delete)");
      } else if (w == "thread_local") {
        add(t[k].begin,
            "'thread_local': Metal has no thread_local storage; a local variable is already "
            "private to its thread, threadgroup memory is shared by the threadgroup (" +
                std::string(kRestrictions) + ")");
      } else if ((w == "alloca" || w == "__builtin_alloca") && is(s_, t, k + 1, "(")) {
        add(t[k].begin, "'" + name + "': Metal has no dynamic stack allocation; use a local "
                                     "array of constant size (" +
                            std::string(kRestrictions) + ")");
      } else if (w == "std" && (is(s_, t, k + 1, "::") || is(s_, t, k - 1, "namespace"))) {
        add(t[k].begin, "'std': Metal has no C++ standard library; Metal's own is namespace "
                        "metal (metal::min, metal::array, metal::numeric_limits, ...) (" +
                            std::string(kRestrictions) + ")");
      }
    }
  }

  // A `#line` directive of the user's that names a file other than src or
  // helper_src would take the lines after it out of the user's text, and out
  // of these checks. The rendering's own directives name one such file (the
  // generated signature, on the line before `[[kernel]]`); any other is the user's.
  void check_line_directives() {
    const std::vector<size_t>& foreign = map_.foreign_directives();
    if (foreign.size() < 2) return;
    size_t own = foreign.front();
    for (const size_t at : foreign) {
      const size_t eol = s_.find('\n', at);
      if (eol != std::string_view::npos && s_.substr(eol + 1).starts_with("[[kernel]]")) own = at;
    }
    for (const size_t at : foreign) {
      if (at == own) continue;
      const size_t eol = std::min(s_.find('\n', at), s_.size());
      add(at, std::string(s_.substr(at, eol - at)) +
                  ": a #line directive in src or helper_src may name only src or helper_src; "
                  "another file name would take the lines after it out of the kernel's own "
                  "text, which these checks and compile errors follow");
    }
  }

  // `float* p`, `(float*)q`, `S* next` without device/constant/threadgroup/thread:
  // only for built-in types and the user's own struct types, whose names
  // cannot carry an address space (a template parameter or typedef can).
  void check_pointers(const std::vector<Token>& t) {
    const std::set<std::string_view> structs = declared_types(s_, t);
    for (size_t k = 1; k + 1 < t.size(); ++k) {
      if (text(s_, t[k]) != "*") continue;
      size_t type = k - 1;
      while (type > 0 && (is(s_, t, type, "const") || is(s_, t, type, "volatile"))) --type;
      if (t[type].kind != TokenKind::Identifier) continue;
      const std::string_view name = text(s_, t[type]);
      if (!is_builtin_type(name) && !structs.contains(name)) continue;
      if (type > 0 && (is(s_, t, type - 1, "::") || is(s_, t, type - 1, "."))) continue;
      // A declarator follows: a name, or nothing (a cast, a template argument,
      // an unnamed parameter).
      size_t next = k + 1;
      while (next < t.size() && (is(s_, t, next, "const") || is(s_, t, next, "volatile") ||
                                 is(s_, t, next, "*"))) {
        ++next;
      }
      if (next >= t.size()) continue;
      const std::string_view after = text(s_, t[next]);
      const bool named = t[next].kind == TokenKind::Identifier && !is_address_space(after) &&
                         next + 1 < t.size() &&
                         (is(s_, t, next + 1, "=") || is(s_, t, next + 1, ";") ||
                          is(s_, t, next + 1, ",") || is(s_, t, next + 1, ")") ||
                          is(s_, t, next + 1, "["));
      const bool abstract = after == ")" || after == ">" || after == ",";
      if (!named && !abstract) continue;
      if (declaration_has_address_space(s_, t, type)) continue;
      add(t[k].begin,
          "'" + std::string(name) +
              "*': a pointer without an address space; Metal requires one on every pointer "
              "(device, constant, threadgroup or thread: `thread " +
              std::string(name) + "*` for one to a local) (" + std::string(kAddressSpaces) + ")");
    }
  }

  // `::printf(...)`: a function of the global namespace, which on the CPU is
  // the C library (the kernel's own functions live in namespace metal).
  void check_global_calls(const std::vector<Token>& t) {
    const std::set<std::string_view> own = declared_functions(s_, t);
    for (size_t k = 0; k + 2 < t.size(); ++k) {
      if (text(s_, t[k]) != "::" || t[k + 1].kind != TokenKind::Identifier ||
          !is(s_, t, k + 2, "(")) {
        continue;
      }
      if (k > 0 && (t[k - 1].kind == TokenKind::Identifier || is(s_, t, k - 1, ">") ||
                    is(s_, t, k - 1, ")")) &&
          !is_statement_word(text(s_, t[k - 1]))) {
        continue;  // A::f(...), T<U>::f(...), decltype(x)::f(...): a qualified name
      }
      const std::string_view name = text(s_, t[k + 1]);
      if (own.contains(name)) continue;
      add(t[k].begin, "'::" + std::string(name) +
                          "': a C library function; Metal has no C library, its functions are "
                          "those of namespace metal (" +
                          std::string(kRestrictions) + ")");
    }
  }

  // `threadgroup float x[4];` outside every function: program-scope variables
  // live in the constant address space in Metal.
  void check_program_scope_threadgroup(const std::vector<Token>& t) {
    for (size_t k = 0; k + 2 < t.size(); ++k) {
      if (text(s_, t[k]) != "threadgroup" || in_body_[k]) continue;
      // Storage: `threadgroup T name ...` (a pointer or reference type is no storage).
      size_t j = k + 1;
      while (j < t.size() && (t[j].kind == TokenKind::Identifier || is(s_, t, j, "::"))) ++j;
      if (j - k < 3 || (j < t.size() && (is(s_, t, j, "*") || is(s_, t, j, "&")))) continue;
      if (j < t.size() && (is(s_, t, j, "(") || is(s_, t, j, ">"))) continue;
      add(t[k].begin, "'threadgroup' storage at program scope; declare threadgroup memory "
                      "inside the kernel body (" +
                          std::string(kProgramScope) + ")");
    }
  }

  // #include, #import and #include_next of a header that is not Metal's
  // (<...>), of a file ("..."), or of a macro; #embed of anything. A Metal
  // kernel compiled from source (the MPS backend, a Core AI asset) is compiled
  // without a file system: only Metal's own headers can be included.
  void check_includes() {
    for (const Directive& d : directives(s_)) {
      if (!map_.in_user_text(d.begin) || skipped(d.begin)) continue;
      const bool include = d.name == "include" || d.name == "import" || d.name == "include_next";
      if (!include && d.name != "embed") continue;
      const std::string what = "#" + d.name + " " + d.rest;
      if (d.name == "embed") {
        add(d.begin, what + ": Metal has no #embed; a kernel compiled from source reads no "
                            "files. Pass the data as a tensor input (" +
                         std::string(kRestrictions) + ")");
      } else if (d.rest.starts_with("<")) {
        const size_t close = d.rest.find('>');
        const std::string header = d.rest.substr(1, close == std::string::npos ? close : close - 1);
        if (d.name == "include_next" || !is_metal_header(header)) {
          add(d.begin, "#" + d.name + " <" + header +
                           ">: not a Metal header; Metal has neither the C nor the C++ "
                           "standard library, its own headers are <metal_stdlib>, "
                           "<metal_tensor>, ... (" +
                           std::string(kRestrictions) + ")");
        }
      } else if (d.rest.starts_with("\"")) {
        add(d.begin, what + ": a kernel compiled from source (on the GPU, or in a Core AI "
                            "asset) has no files to include; put the code in helper_src");
      } else {
        add(d.begin, what + ": an include named by a macro; name a Metal header "
                            "(#include <metal_stdlib>, ...) directly");
      }
    }
  }

  std::string_view s_;
  LineMap map_;
  std::vector<bool> skipped_lines_;  // per line: in a branch Metal does not compile
  std::vector<size_t> line_begins_;
  std::vector<bool> in_body_;  // per user token
  std::vector<NonMetalConstruct> found_;
};

// A function's name as the source spells it, without the namespace metal
// that every kernel is compiled in.
std::string demangled(const std::string& mangled) {
  int status = 0;
  char* out = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && out != nullptr ? out : mangled;
  std::free(out);
  if (name.starts_with("metal::")) name.erase(0, 7);
  return name;
}

// The compile's inline-cost remark for a recursive function:
// `src:3:43: remark: _ZN5metal4factEi has uninlinable pattern (recursive) ...`.
constexpr std::string_view kRecursiveRemark = " has uninlinable pattern (recursive)";

// "src:3:43" at the start of a diagnostic line.
bool parse_position(std::string_view line, SourcePosition& out, std::string_view& rest) {
  const size_t c1 = line.find(':');
  if (c1 == std::string_view::npos) return false;
  const size_t c2 = line.find(':', c1 + 1);
  const size_t c3 = c2 == std::string_view::npos ? c2 : line.find(':', c2 + 1);
  if (c3 == std::string_view::npos) return false;
  out.file = std::string(line.substr(0, c1));
  out.line = std::atoi(std::string(line.substr(c1 + 1, c2 - c1 - 1)).c_str());
  out.column = std::atoi(std::string(line.substr(c2 + 1, c3 - c2 - 1)).c_str());
  rest = line.substr(c3 + 1);
  return out.line > 0;
}

}  // namespace

LineMap::LineMap(std::string_view source) {
  files_.emplace_back("kernel_rendering");
  int file = 0, number = 1;
  size_t begin = 0;
  while (begin <= source.size()) {
    size_t end = source.find('\n', begin);
    if (end == std::string_view::npos) end = source.size();
    lines_.push_back({begin, file, number});
    std::string_view line = source.substr(begin, end - begin);
    const size_t indent = std::min(line.find_first_not_of(" \t"), line.size());
    const size_t directive = begin + indent;  // where a directive on this line starts
    line.remove_prefix(indent);
    ++number;
    const size_t introducer = directive_introducer(line, 0);
    line.remove_prefix(introducer);
    line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
    if (introducer > 0 && line.starts_with("line") && line.size() > 4 &&
        (line[4] == ' ' || line[4] == '\t')) {
      // `#line N "file"`: the next line is line N of file.
      line.remove_prefix(5);
      number = std::atoi(std::string(line).c_str());
      const size_t q1 = line.find('"');
      const size_t q2 = q1 == std::string_view::npos ? q1 : line.find('"', q1 + 1);
      if (q2 != std::string_view::npos) {
        const std::string name(line.substr(q1 + 1, q2 - q1 - 1));
        auto it = std::find(files_.begin(), files_.end(), name);
        file = static_cast<int>(it - files_.begin());
        if (it == files_.end()) files_.push_back(name);
        if (!is_user_file(name)) foreign_.push_back(directive);
      }
    }
    if (end == source.size()) break;
    begin = end + 1;
  }
}

const LineMap::Line& LineMap::line_of(size_t offset) const {
  auto it = std::upper_bound(lines_.begin(), lines_.end(), offset,
                             [](size_t o, const Line& l) { return o < l.begin; });
  return *(it == lines_.begin() ? it : it - 1);
}

SourcePosition LineMap::at(size_t offset) const {
  const Line& l = line_of(offset);
  return {files_[l.file], l.number, static_cast<int>(offset - l.begin) + 1};
}

bool LineMap::in_user_text(size_t offset) const {
  return is_user_file(files_[line_of(offset).file]);
}

bool is_user_file(std::string_view file) { return file == "src" || file == "helper_src"; }

std::vector<NonMetalConstruct> find_non_metal_constructs(std::string_view rendering) {
  return Finder(rendering).run();
}

std::vector<NonMetalConstruct> recursion_in_remarks(const std::string& compiler_output) {
  std::vector<NonMetalConstruct> found;
  std::set<std::string> seen;
  for (const std::string_view line : split_lines(compiler_output)) {
    const size_t at = line.find(kRecursiveRemark);
    SourcePosition where;
    std::string_view rest;
    if (at == std::string_view::npos || !parse_position(line, where, rest)) continue;
    if (!is_user_file(where.file)) continue;
    // "remark: <mangled name> has uninlinable pattern (recursive)"
    const size_t colon = rest.find("remark: ");
    if (colon == std::string_view::npos) continue;
    const size_t name_begin = (rest.data() - line.data()) + colon + 8;
    const std::string mangled(line.substr(name_begin, at - name_begin));
    if (!seen.insert(mangled).second) continue;
    found.push_back({where, "a recursive function (" + demangled(mangled) +
                                "): Metal does not support recursive function calls (" +
                                std::string(kRestrictions) +
                                "; the compute pipelines TorchMetalKernel and Core AI build "
                                "reserve no call stack for them)"});
  }
  return found;
}

std::vector<NonMetalConstruct> threadgroup_memory_overuse(
    const std::vector<ThreadgroupVariable>& variables) {
  uint64_t total = 0;
  for (const ThreadgroupVariable& v : variables) total += v.bytes;
  if (variables.empty() || total <= static_cast<uint64_t>(kMaxThreadgroupMemoryBytes)) return {};
  std::string each;
  for (const ThreadgroupVariable& v : variables) {
    each += (each.empty() ? "" : ", ") + std::string("'") + v.name + "' " +
            std::to_string(v.bytes) + " bytes (" + v.where.file + ":" +
            std::to_string(v.where.line) + ")";
  }
  return {{variables.front().where,
           "threadgroup memory of " + std::to_string(total) + " bytes, more than the " +
               std::to_string(kMaxThreadgroupMemoryBytes) +
               " bytes a Metal kernel may declare (MSL specification §4.4 \"Threadgroup Address "
               "Space\"; Metal feature set tables, maximum total threadgroup memory "
               "allocation): " +
               each + ". Use smaller tiles, or keep the data in device memory"}};
}

std::string without_remarks(const std::string& compiler_output) {
  std::string kept;
  bool keep = true;  // whether the diagnostic in progress is kept
  for (const std::string_view line : split_lines(compiler_output)) {
    SourcePosition where;
    std::string_view rest;
    // A diagnostic starts a block (its source excerpt follows); a note
    // belongs to the block before it.
    if (parse_position(line, where, rest)) {
      if (rest.starts_with(" remark:")) {
        keep = false;
      } else if (!rest.starts_with(" note:")) {
        keep = true;
      }
    } else if (!line.starts_with(" ")) {
      keep = true;  // "1 error generated." and other plain lines
    }
    if (keep) kept.append(line).push_back('\n');
  }
  return kept;
}

bool may_recurse(std::string_view rendering, std::string_view entry) {
  const LineMap map(rendering);
  std::vector<Token> t;
  for (const Token& token : tokenize(rendering, /*with_directives=*/true)) {
    if (map.in_user_text(token.begin)) t.push_back(token);
  }
  if (!declared_functions(rendering, t).empty()) return true;
  for (size_t k = 0; k < t.size(); ++k) {
    const std::string_view w = text(rendering, t[k]);
    if (w == "struct" || w == "class" || w == "union" || w == "operator" || w == "template" ||
        w == "this" || w == entry) {
      return true;
    }
    // `[captures](`, `[captures]<T>(`: a lambda with parameters (`]{` too,
    // to stay on the safe side of a lambda's forms).
    if (w == "]" && (is(rendering, t, k + 1, "(") || is(rendering, t, k + 1, "<") ||
                     is(rendering, t, k + 1, "{"))) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> fidelity_compile_flags(std::string_view rendering,
                                                std::string_view entry) {
  // The inliner's cost analysis remarks on functions that call themselves,
  // directly or through others inlined into them, with their source position.
  // Variable-length arrays are a clang extension to C++ that Metal lacks.
  // (The cost remarks come only with the inliner's own remarks enabled.)
  // The macro switches on the guards of refused_word_guards.
  std::vector<std::string> flags{"-Werror=vla", "-D" + std::string(kFidelityMacro)};
  if (may_recurse(rendering, entry)) flags.insert(flags.begin(), "-Rpass-missed=inline");
  return flags;
}

std::string with_refused_word_guards(std::string_view rendering) {
  const size_t at = rendering.find(kHelperStart);
  if (at == std::string_view::npos || (at > 0 && rendering[at - 1] != '\n')) {
    return std::string(rendering);
  }
  std::string define = "#ifdef " + std::string(kFidelityMacro) + "\n#line 1 \"fidelity_guards\"\n";
  std::string undefine = "#ifdef " + std::string(kFidelityMacro) + "\n";
  for (const RefusedWord& r : refused_words()) {
    std::string reason = r.reason;
    std::replace(reason.begin(), reason.end(), '"', '\'');  // the pragma's text is a string
    const std::string word(r.word);
    define += "#define " + word + " _Pragma(\"GCC error \\\"'" + word + "' (made by a macro): " +
              reason + "; set COREAI_TORCH_METAL_FIDELITY=0 to run it anyway\\\"\") " + word +
              "\n";
    undefine += "#undef " + word + "\n";
  }
  define += "#endif\n";
  undefine += "#endif\n";
  std::string out;
  out.reserve(rendering.size() + define.size() + undefine.size() + 1);
  out.append(rendering.substr(0, at)).append(define).append(rendering.substr(at));
  if (!out.empty() && out.back() != '\n') out.push_back('\n');
  return out.append(undefine);
}

bool metal_fidelity_enabled() {
  const char* v = std::getenv("COREAI_TORCH_METAL_FIDELITY");
  if (v == nullptr) return true;
  std::string value(v);
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return !(value == "0" || value == "false" || value == "no" || value == "off");
}

void refuse_non_metal(const std::string& kernel, const std::vector<NonMetalConstruct>& found,
                      std::string_view consequence) {
  if (found.empty()) return;
  std::string message = std::string(kCompileErrorMarker) + "kernel '" + kernel +
                        "' uses what the Metal compiler refuses, so it would not compile on an "
                        "Apple GPU; " +
                        std::string(consequence) + ":";
  for (const NonMetalConstruct& c : found) {
    message += "\n" + c.where.file + ":" + std::to_string(c.where.line) + ":" +
               (c.where.column > 0 ? std::to_string(c.where.column) + ":" : std::string()) +
               " error: " + c.message;
  }
  TORCH_CHECK(false, message);
}

}  // namespace coreai_torch::source
