// Whether this process can run our kernels: they are compiled as Metal 4.0
// (the first language version with `metal::tensor`), which needs macOS 26 at
// run time and a GPU in the Metal 4 family. The facts come from Metal and
// PyTorch here; what they mean for the user is decided in launch_rules.h.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <ATen/mps/MPSDevice.h>

#include <string>

#include "mps/launch_rules.h"
#include "mps/mps_backend.h"

namespace coreai_torch::mps {
namespace {

// MTLGPUFamilyMetal4 (MTLDevice.h, macOS 26 SDK). Spelled as its value so the
// backend also builds with the macOS 15 SDK, which lacks the name; asking an
// older Metal about an unknown family answers NO.
constexpr NSInteger kGPUFamilyMetal4 = 5002;

// The OS version as macOS reports it to this process (16.x on macOS 26 for a
// program built against an older SDK), read rather than tested with
// @available, which that numbering would make false on macOS 26.
NSOperatingSystemVersion reported_os_version() {
  return [[NSProcessInfo processInfo] operatingSystemVersion];
}

MachineFacts gather_facts() {
  MachineFacts facts;
  const NSOperatingSystemVersion os = reported_os_version();
  facts.os_major = os.majorVersion;
  facts.os_minor = os.minorVersion;
  facts.os_patch = os.patchVersion;
  // The later facts are asked only when the earlier ones allow (the device is
  // not touched on an OS that cannot run the kernels anyway).
  if (!os_runs_metal4(facts.os_major)) return facts;
  facts.mps_available = at::mps::is_available();
  if (!facts.mps_available) return facts;
  id<MTLDevice> device = at::mps::MPSDevice::getInstance()->device();
  facts.has_device = device != nil;
  if (!facts.has_device) return facts;
  const char* name = device.name.UTF8String;
  facts.gpu_name = name != nullptr ? name : "?";
  facts.metal4_family = [device supportsFamily:static_cast<MTLGPUFamily>(kGPUFamilyMetal4)];
  return facts;
}

}  // namespace

const std::string& metal4_unavailable_reason() {
  // A function-local static: computed once, thread-safe, and only when first
  // asked (so importing the extension never touches the GPU).
  static const std::string reason = [] {
    @autoreleasepool {
      return unavailable_reason(gather_facts());
    }
  }();
  return reason;
}

int64_t reported_os_major() {
  static const int64_t major = reported_os_version().majorVersion;
  return major;
}

}  // namespace coreai_torch::mps
