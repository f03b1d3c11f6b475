// What a process sees of Metal 4, and which Metal sources Apple's compiler
// takes, for the probes of scripts/test_mps.sh (scripts/mps_probes.py):
//
//   mps_compile_probe FILE.metal...
//
// prints the OS version macOS reports to this process, the GPU and whether it
// is in the Metal 4 family, then one line per file: "NAME: compiled" or
// "NAME: failed (DOMAIN CODE): MESSAGE" (Metal's message on one line). Files
// are compiled with the MPS backend's own options (csrc/mps/compile_options.h).
// test_mps.sh builds it twice: against the installed SDK, and recorded as
// built against the macOS 15 SDK, to see what macOS shows such a process.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <cstdio>
#include <string>

#include "mps/compile_options.h"

namespace {

// MTLGPUFamilyMetal4 (MTLDevice.h, macOS 26 SDK), as the backend spells it.
constexpr NSInteger kGPUFamilyMetal4 = 5002;

std::string one_line(NSString* text) {
  std::string out = text != nil && text.UTF8String != nullptr ? text.UTF8String : "(no text)";
  for (char& c : out) {
    if (c == '\n') c = '|';
  }
  return out;
}

}  // namespace

int main(int argc, const char* argv[]) {
  @autoreleasepool {
    const NSOperatingSystemVersion os = [[NSProcessInfo processInfo] operatingSystemVersion];
    std::printf("reported_os=%ld.%ld.%ld\n", static_cast<long>(os.majorVersion),
                static_cast<long>(os.minorVersion), static_cast<long>(os.patchVersion));
    id<MTLDevice> device = MTLCreateSystemDefaultDevice();
    if (device == nil) {
      std::printf("device=none\n");
      return 2;
    }
    std::printf("device=%s\n", one_line(device.name).c_str());
    std::printf("family_metal4=%d\n",
                [device supportsFamily:static_cast<MTLGPUFamily>(kGPUFamilyMetal4)] ? 1 : 0);
    MTLCompileOptions* options = coreai_torch::mps::compile_options(false);
    if (options == nil) {
      std::printf("options=none (macOS older than 15)\n");
      return 2;
    }
    for (int i = 1; i < argc; ++i) {
      NSString* path = [NSString stringWithUTF8String:argv[i]];
      NSError* error = nil;
      NSString* source = [NSString stringWithContentsOfFile:path
                                                   encoding:NSUTF8StringEncoding
                                                      error:&error];
      const std::string name = one_line(path.lastPathComponent);
      if (source == nil) {
        std::printf("%s: unreadable: %s\n", name.c_str(), one_line(error.localizedDescription).c_str());
        continue;
      }
      error = nil;
      id<MTLLibrary> library = [device newLibraryWithSource:source options:options error:&error];
      if (library != nil) {
        std::printf("%s: compiled\n", name.c_str());
      } else {
        std::printf("%s: failed (%s %ld): %s\n", name.c_str(),
                    error != nil ? one_line(error.domain).c_str() : "-",
                    error != nil ? static_cast<long>(error.code) : 0L,
                    error != nil ? one_line(error.localizedDescription).c_str() : "-");
      }
    }
  }
  return 0;
}
