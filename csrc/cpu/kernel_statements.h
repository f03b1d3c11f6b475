// The statements of a kernel body, for the group-loop form of the CPU backend
// (group_form.h): where the [[kernel]] function of a buffer rendering is, its
// parameters, and its body as a tree of statements and declarations. It reads
// just enough C++ to see the structure that barriers and SIMD-group functions
// sit in; anything it does not recognise is marked Unsupported, and the
// analysis then keeps the kernel in fiber mode.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "source/metal_tokens.h"

namespace coreai_torch::cpu {
// The group-loop rewrite reads the rendering with the source passes' tokens.
using namespace ::coreai_torch::source;  // NOLINT(google-build-using-namespace)
}  // namespace coreai_torch::cpu

namespace coreai_torch::cpu {

// Token k spells `word`.
inline bool token_is(std::string_view s, const std::vector<Token>& t, size_t k,
                     std::string_view word) {
  return k < t.size() && text(s, t[k]) == word;
}

// A parameter of the kernel function: a buffer (`device float* coreai_buf_x
// [[buffer(0)]]`, `constant int& n [[buffer(1)]]`) or a thread attribute
// (`uint2 gid [[thread_position_in_grid]]`).
struct KernelParameter {
  size_t first = 0, last = 0;  // tokens [first, last), the attribute included
  std::string type;            // as written, without the attribute
  std::string name;
  std::string attribute;       // the thread attribute; empty for a buffer
};

// The [[kernel]] function of a buffer rendering (coreai_torch/contract.py):
// its signature, the views the rendering declares, then the user's body
// (after `#line 1 "src"`, at function scope).
struct KernelFunction {
  size_t start = 0;                        // token of the first `[` of [[kernel]]
  size_t name = 0;                         // the function's name
  size_t open_paren = 0, close_paren = 0;  // its parameter list
  size_t body_open = 0, body_close = 0;    // `{` and `}` of the function
  size_t user_first = 0, user_last = 0;    // the user's body: tokens [user_first, user_last)
  std::vector<KernelParameter> params;
};

// The kernel function of `source`, or nullopt if it is not laid out as the
// buffer rendering lays it out.
std::optional<KernelFunction> find_kernel_function(std::string_view source,
                                                   const std::vector<Token>& tokens);

enum class StatementKind {
  Block,     // { ... }: body holds its statements
  If,        // head[0]: the condition; body[0]: then, body[1]: else (has_else)
  For,       // head[0..2]: init, condition, step; body[0]; range_for for `for (x : r)`
  While,     // head[0]: the condition; body[0]
  Do,        // body[0]; head[0]: the condition
  Switch,    // head[0]: the expression; body[0]
  Return,
  Break,
  Continue,
  Simple,    // a declaration or an expression, up to its `;`
  Empty,     // `;`
  Unsupported,  // goto, labels, case labels outside a switch, unbalanced text
};

using TokenRange = std::pair<size_t, size_t>;  // [first, last)

struct Statement {
  StatementKind kind = StatementKind::Empty;
  size_t first = 0, last = 0;  // tokens [first, last) of the whole statement
  std::array<TokenRange, 3> head{};
  std::vector<Statement> body;
  bool has_else = false;
  bool range_for = false;
};

// The statements of tokens [first, last).
std::vector<Statement> parse_statements(std::string_view source, const std::vector<Token>& tokens,
                                        size_t first, size_t last);

// One declarator of a declaration: `name`, `*name`, `name[4][4]`, with what
// initialises it.
struct Declarator {
  enum class Init { None, Equals, Braces, Parens };
  size_t first = 0, last = 0;   // tokens of the declarator, initialiser included
  size_t name = 0;              // token of the declared name
  size_t dims_first = 0, dims_last = 0;  // its array dimensions `[..][..]`
  Init init = Init::None;
  TokenRange init_tokens{};     // after `=`, or the braces / parentheses
  bool pointer = false;         // `*` before the name
  bool reference = false;       // `&` before the name
};

// A simple statement that declares variables: decl-specifiers, then
// declarators separated by commas.
struct Declaration {
  TokenRange specifiers{};
  std::vector<Declarator> declarators;
  bool is_auto = false;         // the specifiers say `auto`
  bool is_const = false;        // `const` among the specifiers (the variable's, or a pointee's)
  bool is_constexpr = false;
  bool is_static = false;       // `static` (or thread_local): not per thread
  bool is_threadgroup = false;  // `threadgroup` storage
};

// The declaration a Simple statement makes, or nullopt if it is an expression
// (or a declaration this reader does not follow).
std::optional<Declaration> parse_declaration(std::string_view source,
                                             const std::vector<Token>& tokens,
                                             const Statement& statement);

// Whether a Simple statement declares a type (using, typedef, struct ...).
bool declares_type(std::string_view source, const std::vector<Token>& tokens,
                   const Statement& statement);

}  // namespace coreai_torch::cpu
