// Whether this Mac can run our kernels: they are compiled as Metal 4.0 (the
// first language version with `metal::tensor`), which needs macOS 26 at run
// time and a GPU in the Metal 4 family. The GPU family is the real gate; the
// OS version only gives the better message on an old macOS.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <ATen/mps/MPSDevice.h>

#include <string>

#include "mps/mps_backend.h"

namespace coreai_torch::mps {
namespace {

// MTLGPUFamilyMetal4 (MTLDevice.h, macOS 26 SDK). Spelled as its value so the
// backend also builds with the macOS 15 SDK, which lacks the name.
constexpr NSInteger kGPUFamilyMetal4 = 5002;

constexpr const char* kFallbacks =
    " Kernels still run on CPU tensors (the CPU backend), and the PyTorch reference "
    "(torch_defn) runs anywhere.";

std::string os_version() {
  NSOperatingSystemVersion v = [[NSProcessInfo processInfo] operatingSystemVersion];
  return std::to_string(v.majorVersion) + "." + std::to_string(v.minorVersion) + "." +
      std::to_string(v.patchVersion);
}

// The OS can run Metal 4.0 code: macOS 26 or newer. A program built against an
// SDK older than macOS 26 is told 16.x instead of 26.x (the OS's compatibility
// numbering), and @available(macOS 26.0, *) is then false on macOS 26, so the
// version is read and 16 counts as 26.
bool os_runs_metal4() {
  const NSInteger major = [[NSProcessInfo processInfo] operatingSystemVersion].majorVersion;
  return major >= 26 || major == 16;
}

std::string compute_reason() {
  if (!os_runs_metal4()) {
    return "the coreai_torch MPS backend compiles kernels as Metal 4.0, which needs macOS 26 "
           "or newer; this Mac runs macOS " +
        os_version() + "." + kFallbacks;
  }
  if (!at::mps::is_available()) {
    return std::string("PyTorch reports no usable MPS device on this Mac.") + kFallbacks;
  }
  id<MTLDevice> device = at::mps::MPSDevice::getInstance()->device();
  if (device == nil) {
    return std::string("PyTorch's MPS device has no Metal device behind it.") + kFallbacks;
  }
  if (![device supportsFamily:static_cast<MTLGPUFamily>(kGPUFamilyMetal4)]) {
    return std::string("the GPU '") + device.name.UTF8String +
        "' is not in the Metal 4 GPU family (MTLGPUFamilyMetal4), which the coreai_torch MPS "
        "backend needs for Metal tensors." +
        kFallbacks;
  }
  return {};
}

}  // namespace

const std::string& metal4_unavailable_reason() {
  // A function-local static: computed once, thread-safe, and only when first
  // asked (so importing the extension never touches the GPU).
  static const std::string reason = [] {
    @autoreleasepool {
      return compute_reason();
    }
  }();
  return reason;
}

}  // namespace coreai_torch::mps
