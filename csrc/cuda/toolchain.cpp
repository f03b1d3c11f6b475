#include "cuda/toolchain.h"

#include "jit/cache_dir.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>

#include "jit/compiler.h"
#include "cpu/target.h"

namespace coreai_torch::cuda {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLibdevice = "libdevice.10.bc";

// The newest GPU architecture the backend compiles for. clang 15 to 19 all
// know it; the driver compiles its PTX for newer GPUs when it loads a kernel.
constexpr int kNewestArch = 90;

bool is_file(const std::string& path) {
  struct stat st;
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// The site-packages directory holding the shared library that defines `symbol`
// (.../site-packages/torch/lib/libc10.so -> .../site-packages).
std::optional<fs::path> site_packages_of(const void* symbol, int levels_up) {
  Dl_info info;
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return std::nullopt;
  fs::path p = fs::path(info.dli_fname).parent_path();
  for (int i = 0; i < levels_up; ++i) p = p.parent_path();
  return p;
}

std::string file_identity(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return path;
  return path + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtime);
}

}  // namespace

std::string find_libdevice(std::string* tried) {
  auto look = [&](const std::string& candidate) {
    if (tried) *tried += "\n  " + candidate;
    return is_file(candidate);
  };
  const std::string explicit_path = env("COREAI_TORCH_LIBDEVICE");
  if (!explicit_path.empty()) {
    const std::string file =
        fs::is_directory(explicit_path) ? explicit_path + "/" + kLibdevice : explicit_path;
    return look(file) ? file : std::string();
  }
  std::vector<std::string> candidates;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const std::string root = env(var);
    if (!root.empty()) candidates.push_back(root + "/nvvm/libdevice/" + kLibdevice);
  }
  candidates.push_back(std::string("/usr/local/cuda/nvvm/libdevice/") + kLibdevice);
  // Wheels installed beside torch (or beside this extension, if installed).
  std::vector<fs::path> sites;
  if (auto torch_site = site_packages_of(reinterpret_cast<const void*>(&c10::GetCPUAllocator), 2)) {
    sites.push_back(*torch_site);
  }
  if (auto own_site = site_packages_of(reinterpret_cast<const void*>(&find_libdevice), 1)) {
    sites.push_back(*own_site);
  }
  for (const fs::path& site : sites) {
    for (const char* relative : {"nvidia/cu13/nvvm/libdevice/", "nvidia/cuda_nvcc/nvvm/libdevice/",
                                 "triton/backends/nvidia/lib/"}) {
      candidates.push_back((site / relative / kLibdevice).string());
    }
  }
  for (const std::string& c : candidates) {
    if (look(c)) return c;
  }
  return {};
}

std::string gpu_arch(int major, int minor) {
  const int cc = std::min(major * 10 + minor, kNewestArch);
  return "sm_" + std::to_string(cc);
}

const Toolchain& toolchain(const std::string& kernel) {
  static std::mutex mutex;
  static std::optional<Toolchain> found;
  std::lock_guard<std::mutex> lock(mutex);
  if (found) return *found;
  const jit::Compiler& compiler =
      jit::find_compiler(kernel, "CUDA", jit::CacheDir::current("CUDA"));
  std::string tried;
  const std::string libdevice = find_libdevice(&tried);
  TORCH_CHECK(!libdevice.empty(), "kernel '", kernel,
              "': the CUDA backend compiles Metal kernels with clang and NVIDIA's libdevice "
              "(libdevice.10.bc), which was not found. Looked at:",
              tried,
              "\nInstall it with `pip install nvidia-nvvm` (or a CUDA toolkit), or set "
              "COREAI_TORCH_LIBDEVICE to the file.");
  found = Toolchain{compiler, libdevice, file_identity(libdevice)};
  return *found;
}

namespace {
// The PTX ISA version of every kernel: 7.8 (CUDA 11.8) has every instruction
// the headers use on every architecture up to sm_90 and loads on any CUDA 12
// driver.
constexpr const char* kPtxIsa = "+ptx78";

// Safe math rounds a * b + c twice, as on the CPU; fast math fuses it.
const char* contraction(bool fast_math) {
  return fast_math ? "-ffp-contract=fast" : "-ffp-contract=off";
}
}  // namespace

std::vector<std::string> device_compile_flags(const Toolchain& tc, const std::string& arch,
                                              bool fast_math) {
  std::vector<std::string> flags{
      "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=" + arch,
      // No CUDA installation is used: the prelude declares what it needs
      // (-nocudainc) and libdevice is linked explicitly (-nocudalib). A path
      // that is no installation keeps clang from picking one up, so the PTX
      // does not depend on what else is installed: its ISA version is fixed
      // here (kPtxIsa).
      "--cuda-path=/dev/null", "-nocudainc", "-nocudalib", "-Xclang", "-target-feature",
      "-Xclang", kPtxIsa, "-Xclang", "-mlink-builtin-bitcode", "-Xclang", tc.libdevice,
      "-std=c++23", "-O3", "-S",
      // Round every half and bfloat operation to its type, as on the CPU.
      "-Xclang", "-ffloat16-excess-precision=none", "-Xclang", "-fbfloat16-excess-precision=none",
      "-fno-math-errno", "-fno-exceptions", "-flax-vector-conversions=none",
      "-Wno-unknown-attributes", "-Wno-unknown-cuda-version"};
  // Fast math: approximate transcendental functions (nvptx_math.h) too.
  if (fast_math) flags.push_back("-DCOREAI_MSL_FAST_MATH=1");
  flags.push_back(contraction(fast_math));
  return flags;
}

std::vector<std::string> ir_compile_flags(const std::string& arch, bool fast_math) {
  return {"-fintegrated-cc1", "-x", "ir", "--target=nvptx64-nvidia-cuda", "-march=" + arch,
          "--cuda-path=/dev/null", "-Xclang", "-target-feature", "-Xclang", kPtxIsa, "-O3", "-S",
          contraction(fast_math),
          // Optimized already (and what the rewrite added must stay as written).
          "-Xclang", "-disable-llvm-optzns"};
}

}  // namespace coreai_torch::cuda
