// Run-time compilation of the buffer rendering and the process-wide cache of
// compute pipelines. Compiling costs tens to hundreds of milliseconds, so it
// happens once per distinct (source, entry, math mode). The launch path looks a
// pipeline up by handle first, so a hit hashes one integer and compiles nothing.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <ATen/mps/MPSDevice.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <exception>
#include <memory>
#include <string>

#include "mps/compile_options.h"
#include "mps/launch_rules.h"
#include "mps/mps_backend.h"
#include "mps/weak_cache.h"

namespace coreai_torch::mps {
namespace {

std::atomic<int64_t> g_compile_count{0};

// Pipelines of live records by full key. The key holds the whole source
// rather than a digest of it, so two kernels can never be confused by a hash
// collision (a reused name with a new body compiles anew). A pipeline goes
// with the last record that uses it, and its entry soon after (weak_cache.h).
WeakCache<Pipeline>& cache() {
  // Never destroyed: pipelines may still be looked up while the process exits.
  static auto* instance = new WeakCache<Pipeline>();
  return *instance;
}

bool wants_fast_math(const KernelRecord& record) {
  return (record.options & kOptionFastMath) != 0;
}

// Only the options that change the compiled code belong in the key: the CPU
// debug bit must not make an MPS kernel compile twice.
std::string cache_key(const KernelRecord& record) {
  std::string key;
  key.reserve(record.entry.size() + record.source.size() + 4);
  key += wants_fast_math(record) ? "fast" : "safe";
  key += '\n';
  key += record.entry;
  key += '\n';
  key += record.source;
  return key;
}

std::string utf8(NSString* text) {
  const char* bytes = text != nil ? text.UTF8String : nullptr;
  return bytes != nullptr ? bytes : "(not representable as UTF-8)";
}

std::string describe(NSError* error) {
  return error != nil ? utf8(error.localizedDescription) : "(Metal gave no message)";
}

// Metal's verdict that the source does not compile (MTLLibrary.h), as opposed
// to a failure of the compiler itself.
bool is_compile_failure(NSError* error) {
  return error != nil && [error.domain isEqualToString:MTLLibraryErrorDomain] &&
      error.code == static_cast<NSInteger>(MTLLibraryErrorCompileFailure);
}

std::string math_mode_name(const KernelRecord& record) {
  return wants_fast_math(record) ? "fast math" : "safe math";
}

id<MTLComputePipelineState> compile(const KernelRecord& record) {
  id<MTLDevice> device = at::mps::MPSDevice::getInstance()->device();
  TORCH_CHECK(device != nil, "coreai_torch: kernel '", record.name,
              "' cannot be compiled: PyTorch's MPS device has no Metal device");

  NSString* source = [[NSString alloc] initWithBytes:record.source.data()
                                              length:record.source.size()
                                            encoding:NSUTF8StringEncoding];
  TORCH_CHECK(source != nil, kCompileErrorMarker, record.name,
              ": the kernel source is not valid UTF-8, so Metal cannot read it");
  NSString* entry = [NSString stringWithUTF8String:record.entry.c_str()];
  TORCH_CHECK(entry != nil, kCompileErrorMarker, record.name, ": the entry name '",
              record.entry, "' is not valid UTF-8");

  MTLCompileOptions* options = compile_options(wants_fast_math(record));
  TORCH_INTERNAL_ASSERT(options != nil, "kernel '", record.name, "': compiling below macOS 15");

  g_compile_count.fetch_add(1, std::memory_order_relaxed);
  NSError* error = nil;
  id<MTLLibrary> library = [device newLibraryWithSource:source options:options error:&error];
  // Metal also reports warnings through `error` while returning a library, so
  // only a missing library is a failure.
  TORCH_CHECK(library != nil,
              library_failure(record.name, is_compile_failure(error),
                              error != nil ? utf8(error.domain) : "(no error domain)",
                              error != nil ? error.code : 0, math_mode_name(record),
                              describe(error), reported_os_major()));

  id<MTLFunction> function = [library newFunctionWithName:entry];
  TORCH_CHECK(function != nil, kCompileErrorMarker, record.name,
              ": the compiled library has no kernel function named '", record.entry,
              "' (the registered entry does not match the rendered source)");

  error = nil;
  id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:function
                                                                               error:&error];
  // Pipeline creation fails, for example, when the kernel declares more
  // threadgroup memory than the GPU has. Its errors come from the GPU driver,
  // with codes Metal does not document, so none is taken for a verdict on the
  // kernel: the failure is not remembered.
  TORCH_CHECK(pipeline != nil, "coreai_torch: kernel '", record.name,
              "': Metal compiled the kernel but could not build a compute pipeline for it (a "
              "kernel that declares more threadgroup memory than this GPU has fails here):\n",
              describe(error), "\nThis is not remembered: the next launch tries again.");
  return pipeline;
}

std::shared_ptr<const Pipeline> shared_pipeline(const KernelRecord& record) {
  return cache().get(cache_key(record), [&] {
    // An exception must not leave the autorelease pool (it would never be
    // popped), so a failure is carried out of it and rethrown.
    std::exception_ptr failure;
    id<MTLComputePipelineState> state = nil;
    @autoreleasepool {
      try {
        state = compile(record);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    if (failure) {
      std::rethrow_exception(failure);
    }
    return std::make_shared<const Pipeline>(Pipeline{state});
  });
}

}  // namespace

const Pipeline& pipeline_for(const KernelRecord& record) {
  return record.artifacts.mps.get(
      [&] { return shared_pipeline(record); },
      is_compile_error);
}

int64_t compile_count() {
  return g_compile_count.load(std::memory_order_relaxed);
}

int64_t cached_pipelines() {
  return static_cast<int64_t>(cache().size());
}

}  // namespace coreai_torch::mps
