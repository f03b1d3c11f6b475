// Stand-in for <os/availability.h> (macOS SDK): API_AVAILABLE, which marks a
// declaration with the OS versions that introduced it. It expands as the
// SDK's does, to clang availability attributes, so that compiling for a macOS
// deployment target older than a declaration's version makes every use of it
// outside an `if (@available(macOS N, *))` check an error
// (-Werror=unguarded-availability, tests/mps/test_mps_compile_check.py).
#pragma once

// os/availability.h: API_AVAILABLE(macos(15.0), ios(18.0)) ->
//   __attribute__((availability(macos,introduced=15.0))) __attribute__((availability(ios,introduced=18.0)))
#define __API_AVAILABLE_PLATFORM_macos(v) availability(macos, introduced = v)
#define __API_AVAILABLE_PLATFORM_ios(v) availability(ios, introduced = v)
#define __API_AVAILABLE_ONE(platform) __attribute__((__API_AVAILABLE_PLATFORM_##platform))
#define __API_AVAILABLE_1(a) __API_AVAILABLE_ONE(a)
#define __API_AVAILABLE_2(a, b) __API_AVAILABLE_ONE(a) __API_AVAILABLE_ONE(b)
#define __API_AVAILABLE_PICK(_1, _2, name, ...) name
#define API_AVAILABLE(...) \
  __API_AVAILABLE_PICK(__VA_ARGS__, __API_AVAILABLE_2, __API_AVAILABLE_1, unused)(__VA_ARGS__)
