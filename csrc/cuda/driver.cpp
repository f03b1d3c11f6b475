#include "cuda/driver.h"

#include <dlfcn.h>

#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <type_traits>

namespace coreai_torch::cuda {
namespace {

// The ABI version every entry point is requested in (cuGetProcAddress hands
// out the variant of a function that this CUDA version defined).
constexpr int kRequestedAbi = 12000;

// cuGetProcAddress as CUDA 12.5+ exports it (cuGetProcAddress_v2) and as
// CUDA 11.3 to 12.x exported it (one argument fewer).
using GetProcAddressV2 = CUresult (*)(const char*, void**, int, std::uint64_t, int*);
using GetProcAddressV1 = CUresult (*)(const char*, void**, int, std::uint64_t);

struct Loaded {
  Driver driver;
  std::string error;  // why the driver is unusable; empty when it loaded
};

Loaded load() {
  Loaded out;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    out.error = std::string("cannot load the CUDA driver library libcuda.so.1 (") +
                (why ? why : "dlopen failed") +
                "); install the NVIDIA driver, or run the kernel on CPU tensors";
    return out;
  }
  auto v2 = reinterpret_cast<GetProcAddressV2>(dlsym(library, "cuGetProcAddress_v2"));
  auto v1 = reinterpret_cast<GetProcAddressV1>(dlsym(library, "cuGetProcAddress"));
  if (v2 == nullptr && v1 == nullptr) {
    out.error =
        "the CUDA driver is older than CUDA 11.3 (libcuda.so.1 has no cuGetProcAddress); "
        "update the NVIDIA driver";
    return out;
  }
  std::string missing;
  auto get = [&](const char* name, auto& slot) {
    void* fn = nullptr;
    int status = 0;
    const CUresult r = v2 != nullptr ? v2(name, &fn, kRequestedAbi, 0, &status)
                                     : v1(name, &fn, kRequestedAbi, 0);
    if (r != kCudaSuccess || fn == nullptr) {
      missing += std::string(missing.empty() ? "" : ", ") + name;
      return;
    }
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(fn);
  };
  CUresult (*cu_init)(unsigned) = nullptr;
  CUresult (*cu_driver_get_version)(int*) = nullptr;
  Driver& d = out.driver;
  get("cuInit", cu_init);
  get("cuDriverGetVersion", cu_driver_get_version);
  get("cuGetErrorName", d.cuGetErrorName);
  get("cuGetErrorString", d.cuGetErrorString);
  get("cuDeviceGet", d.cuDeviceGet);
  get("cuDeviceGetAttribute", d.cuDeviceGetAttribute);
  get("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain);
  get("cuCtxGetCurrent", d.cuCtxGetCurrent);
  get("cuCtxSetCurrent", d.cuCtxSetCurrent);
  get("cuModuleLoadData", d.cuModuleLoadData);
  get("cuModuleUnload", d.cuModuleUnload);
  get("cuModuleGetFunction", d.cuModuleGetFunction);
  get("cuFuncGetAttribute", d.cuFuncGetAttribute);
  get("cuLaunchKernel", d.cuLaunchKernel);
  get("cuLinkCreate", d.cuLinkCreate);
  get("cuLinkAddData", d.cuLinkAddData);
  get("cuLinkComplete", d.cuLinkComplete);
  get("cuLinkDestroy", d.cuLinkDestroy);
  if (!missing.empty()) {
    out.error = "the CUDA driver lacks " + missing +
                " in its CUDA 12.0 interface; update the NVIDIA driver (CUDA 12 or newer)";
    return out;
  }
  const CUresult init = cu_init(0);
  if (init != kCudaSuccess) {
    out.error = "cuInit failed: " + std::to_string(init);
    return out;
  }
  cu_driver_get_version(&d.version);
  return out;
}

}  // namespace

const Driver& driver() {
  // Never destroyed: kernel modules are unloaded when their records go, which
  // may be late in the process's exit.
  static const Loaded* loaded = new Loaded(load());
  TORCH_CHECK(loaded->error.empty(), "coreai_torch CUDA backend: ", loaded->error);
  return loaded->driver;
}

void make_primary_context_current(int device) {
  // c10 numbers devices with an int8_t.
  static std::mutex mutex;
  static std::array<CUcontext, 128> primary{};
  TORCH_CHECK(device >= 0 && device < static_cast<int>(primary.size()),
              "coreai_torch CUDA backend: no CUDA device ", device);
  const Driver& d = driver();
  CUcontext ctx;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (primary[device] == nullptr) {
      CUdevice dev = 0;
      check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
      check(d.cuDevicePrimaryCtxRetain(&primary[device], dev), "cuDevicePrimaryCtxRetain");
    }
    ctx = primary[device];
  }
  CUcontext current = nullptr;
  check(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != ctx) check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

std::string describe(CUresult result) {
  const Driver& d = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  d.cuGetErrorName(result, &name);
  d.cuGetErrorString(result, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(result)) + " (" +
         (text ? text : "no description") + ")";
}

void check(CUresult result, const std::string& what) {
  if (result == kCudaSuccess) return;
  TORCH_CHECK(false, what, " failed: ", describe(result));
}

}  // namespace coreai_torch::cuda
