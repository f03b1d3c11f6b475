// The source position of a call, for the functions whose lanes a target groups
// by call site (sync.h, fiber_runtime.h): helper_src before src, then line and
// column. Taken as a defaulted argument, std::source_location names the
// user's call; consteval makes the position a constant of the call.
#ifndef COREAI_MSL_CALL_SITE_H
#define COREAI_MSL_CALL_SITE_H

#include <cstdint>
#include <source_location>

namespace coreai::simd {

struct site {
  std::uint64_t order;  // smaller: earlier in the kernel's source

  // The JIT's #line directives name the user's two texts; anything else is
  // library code, ordered after them.
  static consteval unsigned file_rank(const char* file) {
    auto same = [](const char* a, const char* b) {
      while (*a != 0 && *a == *b) ++a, ++b;
      return *a == *b;
    };
    return same(file, "helper_src") ? 1 : same(file, "src") ? 2 : 3;
  }
  static consteval site here(std::source_location at = std::source_location::current()) {
    return site{(std::uint64_t{file_rank(at.file_name())} << 48) |
                (std::uint64_t{at.line() & 0xFFFFFFFFu} << 16) | (at.column() & 0xFFFFu)};
  }
};

}  // namespace coreai::simd

// The defaulted last parameter of a function that takes its caller's position.
#define COREAI_CALL_SITE ::coreai::simd::site at = ::coreai::simd::site::here()

#endif  // COREAI_MSL_CALL_SITE_H
