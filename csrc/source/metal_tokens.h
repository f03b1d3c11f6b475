// A tokenizer for the text-level passes over Metal source (source_scan.h).
// It knows just enough C++ to never rewrite inside a comment, a string or a
// character literal, and to see identifiers, numbers and punctuation.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace coreai_torch::source {

enum class TokenKind { Identifier, Punct, Other };

struct Token {
  TokenKind kind;
  size_t begin;
  size_t end;
};

// Tokens of the code. Comments and literals are skipped (literals become
// Other tokens); preprocessor lines are skipped unless `with_directives`.
// Punctuation is one character per token, except `::` and the digraph `%:`
// (which is `#`).
std::vector<Token> tokenize(std::string_view source, bool with_directives);

// The length of the preprocessor directive introducer at `at`: 1 for `#`, 2
// for its digraph `%:`, 0 if there is none.
size_t directive_introducer(std::string_view source, size_t at);

// A preprocessor directive as the preprocessor reads it: its lines joined
// where they end in a backslash, comments replaced by a space.
struct Directive {
  size_t begin;       // offset of its `#` (or `%:`)
  std::string name;   // `include`, `line`, `define`, ...; empty for a null directive
  std::string rest;   // what follows the name, trimmed
};

// Every directive of `source`: a `#` or `%:` that begins a logical line, after
// whitespace and comments, outside comments and literals.
std::vector<Directive> directives(std::string_view source);

inline std::string_view text(std::string_view source, const Token& t) {
  return source.substr(t.begin, t.end - t.begin);
}

// The lines of `text`, without their '\n' (compiler output, a rendering).
std::vector<std::string_view> split_lines(std::string_view text);

// Per token: whether it lies inside a function body (a brace block opened
// after a parameter list or its qualifiers, and the blocks nested in it).
std::vector<bool> in_function_bodies(std::string_view source, const std::vector<Token>& tokens);

// Index just past the bracket, parenthesis or brace that closes tokens[open].
size_t skip_group(std::string_view source, const std::vector<Token>& tokens, size_t open);

bool is_ident_start(char c);
bool is_ident_char(char c);

// Text replacements on a source, applied in one go. Each keeps the number of
// newlines of the text it replaces (padding with newlines at its end), so the
// lines after it stay where they were and #line-mapped messages stay right.
class SourceEdits {
 public:
  void replace(size_t begin, size_t end, std::string replacement);
  bool empty() const { return edits_.empty(); }
  std::string apply(std::string_view source) const;

 private:
  struct Edit {
    size_t begin, end;
    std::string text;
  };
  std::vector<Edit> edits_;
};

}  // namespace coreai_torch::source
