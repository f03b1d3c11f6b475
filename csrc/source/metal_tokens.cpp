#include "source/metal_tokens.h"

#include <algorithm>
#include <cctype>

namespace coreai_torch::source {

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

size_t skip_group(std::string_view s, const std::vector<Token>& t, size_t open) {
  int depth = 0;
  for (size_t k = open; k < t.size(); ++k) {
    const std::string_view w = text(s, t[k]);
    if (w == "(" || w == "[" || w == "{") ++depth;
    if ((w == ")" || w == "]" || w == "}") && --depth == 0) return k + 1;
  }
  return t.size();
}

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
    const size_t introducer = line_start ? directive_introducer(s, i) : 0;
    if (introducer > 0 && !with_directives) {
      // A directive runs to the end of the line, continued by backslashes.
      while (i < s.size() && s[i] != '\n') i += (s[i] == '\\' && i + 1 < s.size()) ? 2 : 1;
      continue;
    }
    line_start = false;
    if (introducer == 2) {
      tokens.push_back({TokenKind::Punct, i, i + 2});
      i += 2;
      continue;
    }
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

size_t directive_introducer(std::string_view s, size_t at) {
  if (at < s.size() && s[at] == '#') return 1;
  return s.substr(at, 2) == "%:" ? 2 : 0;
}

namespace {

// Reads a directive's logical line from `i` (just past its introducer) to the
// end of the line that does not end in a backslash: splices removed, comments
// replaced by a space. Returns the offset just past it.
size_t read_directive_line(std::string_view s, size_t i, std::string& out) {
  while (i < s.size() && s[i] != '\n') {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
      i += 2;
    } else if (s.substr(i, 2) == "//") {
      while (i < s.size() && s[i] != '\n') {
        i += (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
      }
    } else if (s.substr(i, 2) == "/*") {
      const size_t close = s.find("*/", i + 2);
      i = close == std::string_view::npos ? s.size() : close + 2;
      out.push_back(' ');
    } else {
      out.push_back(s[i++]);
    }
  }
  return i;
}

std::string trimmed(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\f\v");
  if (first == std::string_view::npos) return {};
  const size_t last = text.find_last_not_of(" \t\r\f\v");
  return std::string(text.substr(first, last - first + 1));
}

}  // namespace

std::vector<Directive> directives(std::string_view s) {
  std::vector<Directive> found;
  bool line_start = true;  // only whitespace and comments since the logical line began
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      line_start = true;
      ++i;
    } else if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
      i += 2;  // a splice: the logical line goes on
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (s.substr(i, 2) == "//") {
      while (i < s.size() && s[i] != '\n') i += (s[i] == '\\' && i + 1 < s.size()) ? 2 : 1;
    } else if (s.substr(i, 2) == "/*") {
      const size_t close = s.find("*/", i + 2);
      i = close == std::string_view::npos ? s.size() : close + 2;
    } else if (const size_t n = line_start ? directive_introducer(s, i) : 0; n > 0) {
      std::string line;
      const size_t begin = i;
      i = read_directive_line(s, i + n, line);
      const std::string text = trimmed(line);
      size_t name_end = 0;
      while (name_end < text.size() && is_ident_char(text[name_end])) ++name_end;
      found.push_back(
          {begin, text.substr(0, name_end), trimmed(std::string_view(text).substr(name_end))});
    } else {
      line_start = false;
      if (c == '"' || c == '\'') {
        size_t j = i + 1;
        while (j < s.size() && s[j] != c && s[j] != '\n') j += (s[j] == '\\') ? 2 : 1;
        i = std::min(j + 1, s.size());
      } else {
        ++i;
      }
    }
  }
  return found;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::vector<bool> in_function_bodies(std::string_view s, const std::vector<Token>& t) {
  auto is = [&](size_t k, std::string_view word) { return k < t.size() && text(s, t[k]) == word; };
  std::vector<bool> inside(t.size(), false);
  std::vector<bool> open;  // per open brace: a function body (or within one)?
  for (size_t k = 0; k < t.size(); ++k) {
    const std::string_view w = text(s, t[k]);
    const bool in_body = !open.empty() && open.back();
    inside[k] = in_body;
    if (w == "{") {
      bool body = in_body;
      if (!body && k > 0) {
        size_t p = k - 1;
        while (p > 0 && (is(p, "const") || is(p, "noexcept") || is(p, "override") ||
                         is(p, "final") || is(p, "mutable") || is(p, "thread") ||
                         is(p, "device") || is(p, "constant"))) {
          --p;
        }
        body = is(p, ")");
      }
      open.push_back(body);
    } else if (w == "}" && !open.empty()) {
      open.pop_back();
    }
  }
  return inside;
}

void SourceEdits::replace(size_t begin, size_t end, std::string replacement) {
  edits_.push_back({begin, end, std::move(replacement)});
}

std::string SourceEdits::apply(std::string_view source) const {
  std::vector<Edit> sorted = edits_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Edit& a, const Edit& b) { return a.begin < b.begin; });
  std::string out;
  out.reserve(source.size() + 64 * sorted.size());
  size_t copied = 0;
  for (const Edit& e : sorted) {
    if (e.begin < copied) continue;  // overlaps an edit already made: the passes never ask for it
    out.append(source.substr(copied, e.begin - copied));
    out.append(e.text);
    const auto replaced = source.substr(e.begin, e.end - e.begin);
    const auto lines = std::count(replaced.begin(), replaced.end(), '\n');
    for (auto n = std::count(e.text.begin(), e.text.end(), '\n'); n < lines; ++n) out += '\n';
    copied = e.end;
  }
  out.append(source.substr(copied));
  return out;
}

}  // namespace coreai_torch::source
