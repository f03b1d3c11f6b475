// The options every kernel source is compiled with, shared by the MPS backend
// (pipeline_cache.mm) and the compile probe of a Mac run
// (scripts/mps_compile_probe.mm), so that a probe compiles exactly as a launch
// does. Objective-C++ only.
#pragma once

#ifndef __OBJC__
#error "csrc/mps/compile_options.h declares Objective-C types; include it from .mm files only"
#endif

#import <Metal/Metal.h>

// mathMode and mathFloatingPointFunctions arrived with the macOS 15 SDK.
#if defined(__MAC_OS_X_VERSION_MAX_ALLOWED) && __MAC_OS_X_VERSION_MAX_ALLOWED < 150000
#error "the coreai_torch MPS backend needs the macOS 15 SDK or newer (Xcode 16 or newer) to build"
#endif

namespace coreai_torch::mps {

// MTLLanguageVersion4_0 (MTLLibrary.h, macOS 26 SDK): (4 << 16) + 0, the first
// language version with `metal::tensor`. Spelled as its value so the backend
// also builds with the macOS 15 SDK, which lacks the name.
inline constexpr NSUInteger kLanguageVersion4_0 = (4u << 16) + 0u;

// Metal 4.0 with safe math and precise functions, or with fast math and the
// fast functions. nil below macOS 15, which has no math options (launches are
// refused below macOS 26 anyway).
inline MTLCompileOptions* compile_options(bool fast_math) {
  if (@available(macOS 15.0, *)) {
    MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
    options.languageVersion = static_cast<MTLLanguageVersion>(kLanguageVersion4_0);
    if (fast_math) {
      options.mathMode = MTLMathModeFast;
      options.mathFloatingPointFunctions = MTLMathFloatingPointFunctionsFast;
    } else {
      // Safe math keeps IEEE semantics for inf and nan (fast math turns
      // exp(-inf) in masked softmax into garbage), and the precise functions
      // keep sin/exp/log close to the CPU backend and to PyTorch.
      options.mathMode = MTLMathModeSafe;
      options.mathFloatingPointFunctions = MTLMathFloatingPointFunctionsPrecise;
    }
    return options;
  }
  return nil;
}

}  // namespace coreai_torch::mps
