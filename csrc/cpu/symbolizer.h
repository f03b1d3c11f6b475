// Source positions of code in a kernel library, for debug mode's reports: the
// debug library carries line tables (-gline-tables-only) in which the
// rendering's #line directives name the user's `src` and `helper_src`. They
// are read by llvm-symbolizer (next to the compiler, or on PATH), else by
// binutils' addr2line, run once per report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace coreai_torch::cpu {

struct CodeLocation {
  // The innermost frame in the user's text ("src:12:5"), else the innermost
  // frame there is, else a note that none is known.
  std::string user;
  // Every frame, innermost first: equal chains are the same call in the source.
  std::string chain;
};

// One location per offset (addresses relative to the library's load base).
std::vector<CodeLocation> symbolize(const std::string& library_path,
                                    const std::vector<uintptr_t>& offsets);

}  // namespace coreai_torch::cpu
