#include "cuda/jit.h"

#include <sys/stat.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "cpu/jit.h"
#include "cpu/sha256.h"
#include "cpu/source_scan.h"
#include "cpu/subprocess.h"
#include "cuda/toolchain.h"
#include "msl/coreai_msl/cuda_abi.h"

namespace coreai_torch::cuda {
namespace {

std::atomic<int64_t> g_compiles{0};
std::atomic<int64_t> g_disk_hits{0};

// Largest threadgroup Metal allows, and the register budget the second
// compiled form of a kernel is built for.
constexpr int kMaxThreadsPerGroup = 1024;

bool is_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!in && !in.eof()) return std::nullopt;
  return contents.str();
}

// Renames `from` to `to`; false (and `from` removed) if that fails.
bool publish(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) == 0) return true;
  std::remove(from.c_str());
  return false;
}

std::string compile_error(const KernelRecord& record, const std::string& what) {
  return std::string(cpu::kCompileErrorMarker) + "kernel '" + record.name + "' (entry " +
         record.entry + ") does not compile for the CUDA backend:\n" + what;
}

size_t count_tensor_inputs(const KernelRecord& r) {
  return static_cast<size_t>(std::count(r.arg_kinds.begin(), r.arg_kinds.end(), 't'));
}

// The rendering declares `[[kernel]] void <entry>(` (contract.py). On the GPU
// that function becomes a static device function, called by the generated
// __global__ entry below and inlined there.
std::string as_device_function(const KernelRecord& record) {
  static constexpr std::string_view kKernel = "[[kernel]]";
  const std::string declaration = std::string(kKernel) + " void " + record.entry + "(";
  std::string source = record.source;
  const size_t at = source.find(declaration);
  TORCH_CHECK(at != std::string::npos, "kernel '", record.name,
              "': the registered source does not declare `", declaration,
              "`; register sources rendered by TorchMetalKernel.registration()");
  source.replace(at, kKernel.size(), "static");
  return source;
}

// The __global__ function: binds the launcher's arguments to the kernel's
// parameters, places the thread (target_nvptx.h) and calls the kernel.
// Tensors arrive as pointers (0-d tensors too: their `constant T&` is bound to
// the element in GPU memory), scalars by value, the metadata as an array
// parameter of known size, then the dispatch geometry.
std::string entry_shim(const KernelRecord& record, bool bounded) {
  const size_t results = record.tensor_names.size() - count_tensor_inputs(record);
  const size_t buffers = record.arg_kinds.size() + results;
  const size_t meta = buffers;  // index of the metadata parameter
  std::ostringstream s;
  s << "using coreai_entry_type = decltype(&metal::" << record.entry << ");\n"
    << "template <std::size_t I>\n"
    << "using coreai_param = coreai::param_t<coreai_entry_type, I>;\n"
    << "struct coreai_meta_block {\n"
    << "  std::remove_cv_t<std::remove_pointer_t<coreai_param<" << meta << ">>> values["
    << metadata_entries(record.source) << "];\n"
    << "};\n"
    << "extern \"C\" __attribute__((global))"
    << (bounded ? " __attribute__((launch_bounds(" + std::to_string(kMaxThreadsPerGroup) + ")))"
                : std::string())
    << " void COREAI_CUDA_KERNEL(";
  std::ostringstream call;
  for (size_t i = 0; i < buffers; ++i) {
    const std::string b = "b" + std::to_string(i);
    const bool scalar = i < record.arg_kinds.size() && record.arg_kinds[i] != 't';
    if (scalar) {
      s << "std::remove_cvref_t<coreai_param<" << i << ">> " << b << ", ";
      call << b << ", ";
    } else {
      s << "void* " << b << ", ";
      call << "coreai::bind_arg<coreai_param<" << i << ">>(" << b << "), ";
    }
  }
  s << "const coreai_meta_block meta, const coreai_cuda_dispatch dispatch) {\n"
    << "  coreai_cpu_group g;\n"
    << "  coreai_cpu_thread t;\n"
    << "  if (!coreai::target::locate(dispatch, g, t)) return;\n"
    << "  metal::" << record.entry << "(" << call.str() << "meta.values";
  for (const std::string& attr : record.thread_attrs) s << ", coreai::attr_" << attr << "(g, t)";
  s << ");\n}\n";
  return s.str();
}

std::string key_of(const KernelRecord& record, const std::vector<std::string>& flags,
                   const std::string& what, const std::string& text) {
  const Toolchain& tc = toolchain(record.name);
  cpu::Sha256 sha;
  sha.update("coreai_torch cuda " + what + "\n")
      .update("abi " + std::to_string(COREAI_CUDA_ABI_VERSION) + "\n")
      .update(tc.clang_identity)
      .update("\n")
      .update(tc.libdevice_identity)
      .update("\n");
  for (const std::string& flag : flags) sha.update(flag).update("\n");
  sha.update(cpu::headers_digest(cpu::msl_directory())).update("\n").update(text);
  return sha.hex_digest();
}

// The prelude (coreai_msl.h) precompiled for these flags: parsing it is most
// of a kernel's compile time. Built once per compiler, flags and headers, and
// kept in the cache directory. clang refuses a precompiled header whose
// inputs changed since (a system header updated, say): `rebuild` makes a new one.
std::string prelude_pch(const KernelRecord& record, const std::vector<std::string>& flags,
                        bool rebuild) {
  const std::string dir = cpu::cache_directory();
  const std::string path = dir + "/prelude-" + key_of(record, flags, "prelude", "") + ".pch";
  if (is_file(path) && !rebuild) return path;
  const std::string tmp = dir + "/.tmp-prelude-" + cpu::unique_suffix() + ".pch";
  const Toolchain& tc = toolchain(record.name);
  std::vector<std::string> argv{tc.clang};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(),
              {"-Xclang", "-emit-pch", "-o", tmp, cpu::msl_directory() + "/coreai_msl.h"});
  const cpu::ProcessResult result = cpu::run_process(argv);
  if (!result.started || result.exit_code != 0) {
    std::remove(tmp.c_str());
    TORCH_CHECK(false, "kernel '", record.name, "': ", tc.clang,
                " cannot compile the Metal headers for the GPU (clang 15 or newer with the "
                "NVPTX target is needed; Debian's and LLVM's clang packages have it):\n",
                result.started ? result.output : result.error);
  }
  chmod(tmp.c_str(), 0600);
  TORCH_CHECK(publish(tmp, path), "kernel '", record.name,
              "': cannot store the precompiled Metal headers in ", dir, ": ",
              std::strerror(errno));
  return path;
}

bool mentions_stale_pch(const std::string& output) {
  return output.find("precompiled header") != std::string::npos ||
         output.find("PCH file") != std::string::npos;
}

// Compiles `tu` to PTX with the prelude precompiled; returns clang's result.
cpu::ProcessResult run_clang(const KernelRecord& record, const std::vector<std::string>& flags,
                             const std::string& pch, const std::string& source,
                             const std::string& output) {
  std::vector<std::string> argv{toolchain(record.name).clang};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-include-pch", pch, "-o", output, source});
  ++g_compiles;
  return cpu::run_process(argv);
}

struct Compiled {
  std::string key;
  std::string ptx;
};

Compiled compile(const KernelRecord& record, const std::string& arch, bool bounded) {
  const Toolchain& tc = toolchain(record.name);
  const bool fast_math = (record.options & kOptionFastMath) != 0;
  const std::vector<std::string> flags =
      device_compile_flags(tc, arch, fast_math, cpu::msl_directory());
  const std::string tu = translation_unit(record, bounded);
  const std::string dir = cpu::cache_directory();
  Compiled out;
  out.key = key_of(record, flags, "kernel", tu);
  const std::string ptx_path = dir + "/" + out.key + ".ptx";
  if (std::optional<std::string> cached = read_file(ptx_path); cached && !cached->empty()) {
    ++g_disk_hits;
    out.ptx = std::move(*cached);
    return out;
  }
  // Compiled under private temporary names, then renamed: a concurrent
  // process compiling the same kernel renames an identical file over it.
  const std::string stem = dir + "/.tmp-" + out.key.substr(0, 16) + "-" + cpu::unique_suffix();
  const std::string tmp_cu = stem + ".cu";
  const std::string tmp_ptx = stem + ".ptx";
  cpu::write_private_file(tmp_cu, tu);
  cpu::ProcessResult result =
      run_clang(record, flags, prelude_pch(record, flags, false), tmp_cu, tmp_ptx);
  if (result.started && result.exit_code != 0 && mentions_stale_pch(result.output)) {
    result = run_clang(record, flags, prelude_pch(record, flags, true), tmp_cu, tmp_ptx);
  }
  if (!result.started || result.exit_code != 0) {
    std::remove(tmp_cu.c_str());
    std::remove(tmp_ptx.c_str());
    TORCH_CHECK(result.started, "kernel '", record.name, "': cannot run the compiler ", tc.clang,
                ": ", result.error);
    TORCH_CHECK(false, compile_error(record, result.output));
  }
  chmod(tmp_ptx.c_str(), 0600);
  std::optional<std::string> ptx = read_file(tmp_ptx);
  TORCH_CHECK(ptx && !ptx->empty(), "kernel '", record.name, "': clang wrote no PTX to ",
              tmp_ptx);
  // The translation unit is kept next to the PTX, to read what was compiled.
  if (!publish(tmp_ptx, ptx_path) || !publish(tmp_cu, dir + "/" + out.key + ".cu")) {
    std::remove(tmp_cu.c_str());
  }
  out.ptx = std::move(*ptx);
  return out;
}

int device_attribute(CUdevice device, int attribute) {
  int value = 0;
  check(driver().cuDeviceGetAttribute(&value, attribute, device), "cuDeviceGetAttribute");
  return value;
}

int function_attribute(CUfunction f, int attribute) {
  int value = 0;
  check(driver().cuFuncGetAttribute(&value, attribute, f), "cuFuncGetAttribute");
  return value;
}

// Machine code for the current context's GPU, by the driver's PTX compiler.
// A failure here is the kernel's (too much threadgroup memory, say).
std::string link_ptx(const KernelRecord& record, const std::string& ptx) {
  const Driver& d = driver();
  std::vector<char> error_log(16384, '\0');
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size())};
  CUlinkState state = nullptr;
  check(d.cuLinkCreate(2, options, values, &state), "cuLinkCreate");
  std::string image;
  CUresult r = d.cuLinkAddData(state, kJitInputPtx, const_cast<char*>(ptx.c_str()),
                               ptx.size() + 1, record.entry.c_str(), 0, nullptr, nullptr);
  if (r == kCudaSuccess) {
    void* cubin = nullptr;
    size_t size = 0;
    r = d.cuLinkComplete(state, &cubin, &size);
    if (r == kCudaSuccess) image.assign(static_cast<const char*>(cubin), size);
  }
  d.cuLinkDestroy(state);
  if (r != kCudaSuccess) {
    TORCH_CHECK(false, compile_error(record, "the driver's PTX compiler failed (" + describe(r) +
                                                 "):\n" + std::string(error_log.data())));
  }
  return image;
}

LoadedKernel load(const KernelRecord& record, int device, bool bounded) {
  const Driver& d = driver();
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  const int major = device_attribute(dev, kDeviceAttributeComputeCapabilityMajor);
  const int minor = device_attribute(dev, kDeviceAttributeComputeCapabilityMinor);
  const std::string arch = gpu_arch(major, minor);

  // Machine code is cached per PTX, GPU and driver (whose compiler made it).
  const Toolchain& tc = toolchain(record.name);
  const bool fast_math = (record.options & kOptionFastMath) != 0;
  const std::string ptx_key =
      key_of(record, device_compile_flags(tc, arch, fast_math, cpu::msl_directory()), "kernel",
             translation_unit(record, bounded));
  const std::string dir = cpu::cache_directory();
  const std::string cubin_path = dir + "/" +
                                 cpu::sha256_hex(ptx_key + "\nsm_" + std::to_string(major) +
                                                 std::to_string(minor) + "\ndriver " +
                                                 std::to_string(d.version)) +
                                 ".cubin";
  CUmodule module = nullptr;
  if (std::optional<std::string> cubin = read_file(cubin_path); cubin && !cubin->empty()) {
    if (d.cuModuleLoadData(&module, cubin->data()) == kCudaSuccess) {
      ++g_disk_hits;
    } else {
      module = nullptr;  // unreadable (truncated, say): built again below
    }
  }
  if (module == nullptr) {
    const std::string image = link_ptx(record, compile(record, arch, bounded).ptx);
    const std::string tmp = dir + "/.tmp-" + cpu::unique_suffix() + ".cubin";
    cpu::write_private_file(tmp, image);
    publish(tmp, cubin_path);  // only a cache: a failure costs the next process a compile
    check(d.cuModuleLoadData(&module, image.data()), "cuModuleLoadData");
  }
  LoadedKernel k;
  check(d.cuModuleGetFunction(&k.function, module, COREAI_CUDA_KERNEL_NAME),
        "cuModuleGetFunction");
  k.max_threads = function_attribute(k.function, kFuncAttributeMaxThreadsPerBlock);
  k.meta_entries = metadata_entries(record.source);
  return k;
}

struct CacheEntry {
  std::mutex mutex;  // held while compiling, so concurrent launches compile once
  std::atomic<const LoadedKernel*> free{nullptr};     // compiled with no register limit
  std::atomic<const LoadedKernel*> bounded{nullptr};  // compiled for 1024 threads
  LoadedKernel free_kernel;
  LoadedKernel bounded_kernel;
  std::atomic<bool> failed{false};
  std::string error;  // a compile failure, raised again on every launch
};

CacheEntry& cache_entry(int64_t handle, int device) {
  static std::mutex table_mutex;
  static std::unordered_map<int64_t, std::unique_ptr<CacheEntry>> table;
  const int64_t key = handle * 256 + device;  // devices are numbered below 256 (c10)
  std::lock_guard<std::mutex> lock(table_mutex);
  auto& slot = table[key];
  if (!slot) slot = std::make_unique<CacheEntry>();
  return *slot;
}

// Runs `build` for `slot`; a compile failure is remembered in `entry` (only
// that is final: a missing compiler or a full disk may be fixed meanwhile).
void fill(CacheEntry& entry, std::atomic<const LoadedKernel*>& slot, LoadedKernel& storage,
          const KernelRecord& record, int device, bool bounded) {
  try {
    storage = load(record, device, bounded);
    slot.store(&storage, std::memory_order_release);
  } catch (const c10::Error& e) {
    const std::string message = e.msg();
    if (message.rfind(cpu::kCompileErrorMarker, 0) != 0) throw;
    entry.error = message;
    entry.failed.store(true, std::memory_order_release);
  }
}

}  // namespace

size_t metadata_entries(const std::string& source) {
  static constexpr std::string_view kMeta = "coreai_meta[";
  size_t entries = 1;
  for (size_t at = source.find(kMeta); at != std::string::npos; at = source.find(kMeta, at + 1)) {
    size_t k = 0;
    size_t digit = at + kMeta.size();
    const size_t first = digit;
    while (digit < source.size() && std::isdigit(static_cast<unsigned char>(source[digit]))) {
      k = k * 10 + static_cast<size_t>(source[digit] - '0');
      ++digit;
    }
    if (digit > first && digit < source.size() && source[digit] == ']') {
      entries = std::max(entries, k + 1);
    }
  }
  return entries;
}

std::string translation_unit(const KernelRecord& record, bool bounded) {
  std::string tu;
  tu += "// coreai_torch CUDA backend: kernel entry " + record.entry + "\n";
  tu += "#include <coreai_msl.h>\n";
  tu += "#pragma clang force_cuda_host_device begin\n";
  tu += "namespace metal {\n";
  tu += "#line 1 \"kernel_rendering\"\n";
  tu += cpu::metal_source_as_cpp(as_device_function(record));
  tu += "\n}  // namespace metal\n";
  tu += "#pragma clang force_cuda_host_device end\n";
  tu += "#line 1 \"coreai_entry_shim\"\n";
  tu += entry_shim(record, bounded);
  return tu;
}

std::string ptx_for(const KernelRecord& record, const std::string& arch, bool bounded) {
  return compile(record, arch, bounded).ptx;
}

const LoadedKernel& loaded_kernel(int64_t handle, const KernelRecord& record, int device,
                                  uint32_t group_threads) {
  CacheEntry& entry = cache_entry(handle, device);
  const LoadedKernel* free = entry.free.load(std::memory_order_acquire);
  if (free != nullptr && group_threads <= static_cast<uint32_t>(free->max_threads)) return *free;
  if (entry.failed.load(std::memory_order_acquire)) TORCH_CHECK(false, entry.error);

  std::lock_guard<std::mutex> lock(entry.mutex);
  if (entry.free.load() == nullptr && !entry.failed.load()) {
    fill(entry, entry.free, entry.free_kernel, record, device, false);
  }
  TORCH_CHECK(!entry.failed.load(), entry.error);
  if (group_threads <= static_cast<uint32_t>(entry.free_kernel.max_threads)) {
    return entry.free_kernel;
  }
  if (entry.bounded.load() == nullptr) {
    fill(entry, entry.bounded, entry.bounded_kernel, record, device, true);
    TORCH_CHECK(!entry.failed.load(), entry.error);
  }
  const LoadedKernel& bounded = entry.bounded_kernel;
  TORCH_CHECK(group_threads <= static_cast<uint32_t>(bounded.max_threads), "kernel '",
              record.name, "': threads_per_thread_group has ", group_threads,
              " threads, but compiled for this GPU the kernel runs at most ", bounded.max_threads,
              " threads per threadgroup (it uses ",
              function_attribute(bounded.function, kFuncAttributeNumRegs),
              " registers per thread and ",
              function_attribute(bounded.function, kFuncAttributeSharedSizeBytes),
              " bytes of threadgroup memory); use smaller threadgroups");
  return bounded;
}

int64_t compile_count() { return g_compiles.load(); }
int64_t disk_cache_hits() { return g_disk_hits.load(); }

}  // namespace coreai_torch::cuda
