#include "cuda/ptx_fixup.h"

#include <regex>

namespace coreai_torch::cuda {
namespace {

// `.b16 name = 0d...;` or `.b16 name[N] = {0d..., ...};` in a global declaration.
const std::regex& misprinted_declaration() {
  static const std::regex pattern(R"(\.b16\s+([A-Za-z_$][\w$]*)(\[\d*\])?\s*=\s*\{?\s*0d)");
  return pattern;
}

}  // namespace

std::vector<std::string> misprinted_16bit_globals(const std::string& ptx) {
  std::vector<std::string> names;
  for (std::sregex_iterator it(ptx.begin(), ptx.end(), misprinted_declaration()), end; it != end;
       ++it) {
    names.push_back((*it)[1].str());
  }
  return names;
}

std::string fix_16bit_globals(std::string& ptx, const std::string& ir) {
  std::string missing;
  for (const std::string& name : misprinted_16bit_globals(ptx)) {
    // The IR's definition line: `@name = ... half 0xH7E00` (or an array of them).
    const std::string head = "@" + name + " = ";
    const size_t def = ir.find("\n" + head);
    if (def == std::string::npos) {
      missing += (missing.empty() ? "" : ", ") + name;
      continue;
    }
    const std::string line = ir.substr(def + 1, ir.find('\n', def + 1) - def - 1);
    static const std::regex bits(R"(0x[HR]([0-9A-Fa-f]{4}))");
    std::vector<std::string> values;
    for (std::sregex_iterator it(line.begin(), line.end(), bits), end; it != end; ++it) {
      values.push_back("0x" + (*it)[1].str());
    }
    // Replace the declaration's 0d literals, in order, up to its semicolon.
    size_t at = ptx.find(" " + name);
    while (at != std::string::npos && std::string("[ =").find(ptx[at + 1 + name.size()]) ==
                                          std::string::npos) {
      at = ptx.find(" " + name, at + 1);
    }
    if (at == std::string::npos) continue;
    size_t pos = at + 1 + name.size();
    size_t next = 0;
    for (; next < values.size(); ++next) {
      const size_t literal = ptx.find("0d", pos);
      if (literal == std::string::npos || literal > ptx.find(';', pos)) break;
      ptx.replace(literal, 18, values[next]);  // "0d" and 16 hex digits
      pos = literal + values[next].size();
    }
    if (next == 0) missing += (missing.empty() ? "" : ", ") + name;
  }
  return missing;
}

}  // namespace coreai_torch::cuda
