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
#include <mutex>
#include <string>
#include <unordered_map>

#include "mps/mps_backend.h"

// mathMode and mathFloatingPointFunctions arrived with the macOS 15 SDK.
#if defined(__MAC_OS_X_VERSION_MAX_ALLOWED) && __MAC_OS_X_VERSION_MAX_ALLOWED < 150000
#error "the coreai_torch MPS backend needs the macOS 15 SDK or newer (Xcode 16 or newer) to build"
#endif

namespace coreai_torch::mps {
namespace {

// MTLLanguageVersion4_0 (MTLLibrary.h, macOS 26 SDK): (4 << 16) + 0. Spelled as
// its value so the backend also builds with the macOS 15 SDK, which lacks it.
constexpr NSUInteger kLanguageVersion4_0 = (4u << 16) + 0u;

std::atomic<int64_t> g_compile_count{0};

// Pipelines of live records by full key. The key holds the whole source
// rather than a digest of it, so two kernels can never be confused by a hash
// collision (a reused name with a new body compiles anew). Entries are weak:
// a pipeline goes with the last record that uses it.
struct PipelineCache {
  std::mutex mutex;
  std::unordered_map<std::string, std::weak_ptr<const Pipeline>> by_key;
};

PipelineCache& cache() {
  // Never destroyed: pipelines may still be looked up while the process exits.
  static PipelineCache* instance = new PipelineCache();
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

MTLCompileOptions* compile_options(const KernelRecord& record) {
  MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
  options.languageVersion = static_cast<MTLLanguageVersion>(kLanguageVersion4_0);
  // Always true here (launches are refused below macOS 26); the check tells
  // the compiler that these macOS 15 properties are safe to use.
  if (@available(macOS 15.0, *)) {
    if (wants_fast_math(record)) {
      options.mathMode = MTLMathModeFast;
      options.mathFloatingPointFunctions = MTLMathFloatingPointFunctionsFast;
    } else {
      // Safe math keeps IEEE semantics for inf and nan (fast math turns
      // exp(-inf) in masked softmax into garbage), and the precise functions
      // keep sin/exp/log close to the CPU backend and to PyTorch.
      options.mathMode = MTLMathModeSafe;
      options.mathFloatingPointFunctions = MTLMathFloatingPointFunctionsPrecise;
    }
  } else {
    TORCH_INTERNAL_ASSERT(false, "kernel '", record.name, "': compiling below macOS 15");
  }
  return options;
}

std::string describe(NSError* error) {
  if (error == nil) {
    return "(Metal gave no message)";
  }
  const char* text = error.localizedDescription.UTF8String;
  return text != nullptr ? text : "(Metal's message is not representable as UTF-8)";
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

  g_compile_count.fetch_add(1, std::memory_order_relaxed);
  NSError* error = nil;
  id<MTLLibrary> library = [device newLibraryWithSource:source
                                                options:compile_options(record)
                                                  error:&error];
  // Metal also reports warnings through `error` while returning a library, so
  // only a missing library is a failure.
  TORCH_CHECK(library != nil, kCompileErrorMarker, record.name,
              ": the MPS backend's Metal compiler rejected the kernel (Metal 4.0, ",
              math_mode_name(record), "):\n", describe(error));

  id<MTLFunction> function = [library newFunctionWithName:entry];
  TORCH_CHECK(function != nil, kCompileErrorMarker, record.name,
              ": the compiled library has no kernel function named '", record.entry,
              "' (the registered entry does not match the rendered source)");

  error = nil;
  id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:function
                                                                               error:&error];
  // Pipeline creation fails, for example, when the kernel declares more
  // threadgroup memory than the GPU has.
  TORCH_CHECK(pipeline != nil, kCompileErrorMarker, record.name,
              ": Metal compiled the kernel but could not build a compute pipeline for it:\n",
              describe(error));
  return pipeline;
}

std::shared_ptr<const Pipeline> shared_pipeline(const KernelRecord& record) {
  PipelineCache& pipelines = cache();
  // One lock for lookups and compiles: compiles are rare, and holding the lock
  // while compiling means two records never compile the same kernel twice.
  std::lock_guard<std::mutex> lock(pipelines.mutex);
  std::string key = cache_key(record);
  auto known = pipelines.by_key.find(key);
  if (known != pipelines.by_key.end()) {
    if (std::shared_ptr<const Pipeline> alive = known->second.lock()) {
      return alive;
    }
  }
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
  auto pipeline = std::make_shared<const Pipeline>(Pipeline{state});
  pipelines.by_key[std::move(key)] = pipeline;
  return pipeline;
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

}  // namespace coreai_torch::mps
