#include "cuda/jit.h"

#include <pthread.h>
#include <sys/stat.h>

#include <c10/util/Exception.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "cpu/compiler.h"
#include "cpu/disk_cache.h"
#include "cpu/jit.h"
#include "cpu/sha256.h"
#include "cpu/metal_fidelity.h"
#include "cpu/source_scan.h"
#include "cpu/subprocess.h"
#include "launch_args.h"
#include "cuda/ptx_fixup.h"
#include "cuda/toolchain.h"
#include "msl/coreai_msl/cuda_abi.h"

namespace coreai_torch::cuda {
namespace {

std::atomic<int64_t> g_compiles{0};
std::atomic<int64_t> g_disk_hits{0};
std::atomic<int64_t> g_loaded{0};

bool is_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Renames `from` to `to`; false (and `from` removed) if that fails.
bool publish(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) == 0) return true;
  std::remove(from.c_str());
  return false;
}

// Seals `path` (a private temporary) and publishes it as the cache file `to`;
// a failure only costs a later process a compile.
void store(const std::string& path, const std::string& to) {
  std::string error;
  if (!cpu::seal_cache_file(path, cpu::StackNeeds{}, error) || !publish(path, to)) {
    std::remove(path.c_str());
    return;
  }
  cpu::note_cache_file_in_use(to);
}

// The intact artifact at `path`, or nullopt when it must be built again
// (missing, truncated or damaged).
std::optional<std::string> cached(const std::string& path) {
  if (!is_file(path)) return std::nullopt;
  std::string why;  // not shown: a damaged file is simply built again
  std::optional<std::string> payload = cpu::read_sealed_file(path, why);
  if (!payload || payload->empty()) return std::nullopt;
  cpu::note_cache_file_in_use(path);
  ++g_disk_hits;
  return payload;
}

std::string compile_error(const KernelRecord& record, const std::string& what) {
  return std::string(kCompileErrorMarker) + "kernel '" + record.name + "' (entry " +
         record.entry + ") does not compile for the CUDA backend:\n" + what;
}

// The rendering declares `[[kernel]] void <entry>(` (contract.py), which the
// source passes leave alone (and whose parameters they leave plain pointers).
// On the GPU that function becomes a static device function, called by the
// generated __global__ entry below and inlined there.
std::string as_device_function(const KernelRecord& record, std::string source) {
  static constexpr std::string_view kKernel = "[[kernel]]";
  const std::string declaration = std::string(kKernel) + " void " + record.entry + "(";
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
// the element in GPU memory), scalars by value, the metadata (the record's
// layout) as an array parameter, then the dispatch geometry.
std::string entry_shim(const KernelRecord& record, bool bounded) {
  const size_t buffers = record.inputs.size() + record.results.size();
  const size_t meta = buffers;  // index of the metadata parameter
  std::ostringstream s;
  s << "using coreai_entry_type = decltype(&metal::" << record.entry << ");\n"
    << "template <std::size_t I>\n"
    << "using coreai_param = coreai::param_t<coreai_entry_type, I>;\n"
    << "struct coreai_meta_block {\n"
    << "  std::remove_cv_t<std::remove_pointer_t<coreai_param<" << meta << ">>> values["
    << record.layout.length << "];\n"
    << "};\n"
    << "extern \"C\" __attribute__((global))"
    << (bounded ? " __attribute__((launch_bounds(" + std::to_string(kMaxThreadsPerThreadgroup) +
                      ")))"
                : std::string())
    << " void COREAI_CUDA_KERNEL(";
  std::ostringstream call;
  for (size_t i = 0; i < buffers; ++i) {
    const std::string b = "b" + std::to_string(i);
    const bool scalar = i < record.inputs.size() && record.inputs[i].kind != ArgKind::Tensor;
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

std::string key_of(const Toolchain& tc, const std::vector<std::string>& flags,
                   const std::string& what, const std::string& text) {
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

std::string prelude_pch_path(const Toolchain& tc, const std::vector<std::string>& flags) {
  return cpu::cache_directory() + "/" + key_of(tc, flags, "prelude", "") + ".pch";
}

// The precompiled prelude for these flags if it is there.
std::optional<std::string> existing_prelude_pch(const Toolchain& tc,
                                                const std::vector<std::string>& flags) {
  std::string path = prelude_pch_path(tc, flags);
  if (!is_file(path)) return std::nullopt;
  cpu::note_cache_file_in_use(path);
  return path;
}

// How to precompile the prelude (coreai_msl.h) into `path`, through `tmp`.
struct PreludeCommand {
  std::vector<std::string> argv;
  std::string tmp;
  std::string path;
};

PreludeCommand prelude_command(const Toolchain& tc, const std::vector<std::string>& flags) {
  PreludeCommand c;
  c.path = prelude_pch_path(tc, flags);
  c.tmp = cpu::cache_directory() + "/.tmp-prelude-" + cpu::unique_suffix() + ".pch";
  c.argv = {tc.clang};
  c.argv.insert(c.argv.end(), flags.begin(), flags.end());
  c.argv.insert(c.argv.end(),
                {"-Xclang", "-emit-pch", "-o", c.tmp, cpu::msl_directory() + "/coreai_msl.h"});
  return c;
}

// Runs `c` and publishes its file; true if it is in place. Touches nothing but
// its arguments and the file system, so that it can run on a thread of its own.
bool run_prelude_command(const PreludeCommand& c, const cpu::ProcessLimits& limits,
                         cpu::ProcessResult& result) {
  result = cpu::run_process(c.argv, limits);
  if (!result.started || result.exit_code != 0) {
    std::remove(c.tmp.c_str());
    return false;
  }
  chmod(c.tmp.c_str(), 0600);
  return publish(c.tmp, c.path);
}

// The headers are ours: an error in them is no fault of the kernel's.
[[noreturn]] void throw_prelude_failure(const std::string& kernel, const Toolchain& tc,
                                        const cpu::ProcessResult& result) {
  cpu::throw_compile_failure(result, kernel, tc.clang, [&] {
    return "kernel '" + kernel + "': " + tc.clang +
           " cannot compile the Metal headers for the GPU (clang 15 or newer with the "
           "NVPTX target is needed; Debian's and LLVM's clang packages have it):\n" +
           result.output;
  });
  TORCH_CHECK(false, "kernel '", kernel, "': precompiling the Metal headers failed");
}

// The prelude precompiled for these flags: parsing it is most of a kernel's
// compile time. Built once per compiler, flags and headers, and kept in the
// cache directory (not sealed: clang reads it itself and refuses one that is
// damaged or whose inputs changed since, a system header updated, say;
// `rebuild` then makes a new one).
std::string prelude_pch(const std::string& kernel, const Toolchain& tc,
                        const std::vector<std::string>& flags, bool rebuild) {
  if (!rebuild) {
    if (std::optional<std::string> existing = existing_prelude_pch(tc, flags)) return *existing;
  }
  const PreludeCommand c = prelude_command(tc, flags);
  cpu::ProcessResult result;
  if (!run_prelude_command(c, cpu::compiler_limits(), result)) {
    if (!result.started || result.exit_code != 0) throw_prelude_failure(kernel, tc, result);
    TORCH_CHECK(false, "kernel '", kernel, "': cannot store the precompiled Metal headers in ",
                cpu::cache_directory(), ": ", std::strerror(errno));
  }
  cpu::note_cache_file_in_use(c.path);
  return c.path;
}

// clang's complaint about a precompiled header it cannot use (missing,
// damaged, or made from other inputs).
bool mentions_unusable_pch(const std::string& output) {
  return output.find("precompiled header") != std::string::npos ||
         output.find("PCH file") != std::string::npos;
}

// Compiles `source` with the precompiled prelude `pch`, or, with `pch` empty,
// with the prelude parsed from source.
cpu::ProcessResult run_clang(const Toolchain& tc, const std::vector<std::string>& flags,
                             const std::string& pch, const std::string& source,
                             const std::string& output) {
  std::vector<std::string> argv{tc.clang};
  argv.insert(argv.end(), flags.begin(), flags.end());
  if (!pch.empty()) argv.insert(argv.end(), {"-include-pch", pch});
  argv.insert(argv.end(), {"-o", output, source});
  ++g_compiles;
  return cpu::run_process(argv, cpu::compiler_limits());
}

// What compiling a record to PTX takes, and the disk cache key of its PTX.
struct PtxJob {
  bool fidelity = true;
  const Toolchain* toolchain;
  std::vector<std::string> flags;  // the prelude's and the kernel's
  std::vector<std::string> kernel_flags;  // `flags` and the kernel's own code generation flags
  std::string tu;
  std::string key;
};

PtxJob ptx_job(const KernelRecord& record, const std::string& arch, bool bounded,
               bool whole_simdgroups) {
  TORCH_CHECK((record.options & kOptionDebug) == 0, "kernel '", record.name,
              "': debug mode (bounds checks and the unwritten-result report) is a feature of the "
              "CPU backend; run the kernel on CPU tensors to debug it, or set debug = False to "
              "run it on CUDA");
  PtxJob job;
  // What Metal refuses is refused before anything is compiled, as on the CPU
  // (cpu/metal_fidelity.h); the compiler's part (recursion, variable-length
  // arrays) comes with the flags and the compile below.
  job.fidelity = cpu::metal_fidelity_enabled();
  if (job.fidelity) cpu::refuse_non_metal(record.name, cpu::find_non_metal_constructs(record.source));
  job.toolchain = &toolchain(record.name);
  const bool fast_math = (record.options & kOptionFastMath) != 0;
  job.flags = device_compile_flags(*job.toolchain, arch, fast_math, cpu::msl_directory());
  if (job.fidelity) {
    const std::vector<std::string>& extra = cpu::fidelity_compile_flags();
    job.flags.insert(job.flags.end(), extra.begin(), extra.end());
  }
  job.kernel_flags = job.flags;
  if (uses_simdgroup_matrices(record.source)) {
    // Unroll loops with known trip counts up to ~4000 instructions (LLVM's
    // default at -O3: 300). Such kernels index arrays of matrices by loop
    // counters (a GEMM's tile of accumulators, acc[i][j]); only a fully
    // unrolled loop keeps the array in registers instead of local memory, as
    // Metal's compiler does. AMDGPU raises its own threshold to 2000 for
    // loops over private arrays. Code generation only: the precompiled
    // prelude is the same.
    job.kernel_flags.insert(job.kernel_flags.end(), {"-mllvm", "-unroll-threshold=4000"});
  }
  job.tu = translation_unit(record, bounded, whole_simdgroups);
  job.key = key_of(*job.toolchain, job.kernel_flags, "kernel", job.tu);
  return job;
}

// Precompiles of the prelude that run beside kernel compiles, at most one per
// precompiled-header path and process (compile_with_prelude). A build still
// running when the process exits is waited for, so that it publishes its
// file; the threads touch only their own copies and this object, which is
// never destroyed. A child forked meanwhile starts afresh: it does not have
// the parent's threads.
class PreludeBuilds {
 public:
  static PreludeBuilds& get() {
    static std::once_flag once;
    std::call_once(once, [] {
      current_ = new PreludeBuilds;
      pthread_atfork(nullptr, nullptr, [] { current_ = new PreludeBuilds; });
    });
    return *current_;
  }

  // Starts `c` on a thread of its own unless this process has started it before.
  void start(PreludeCommand c, cpu::ProcessLimits limits) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string path = c.path;
    if (!started_.insert(path).second) return;
    threads_.emplace_back([this, c = std::move(c), limits = std::move(limits)] {
      cpu::ProcessResult result;
      const bool built = run_prelude_command(c, limits, result);
      std::lock_guard<std::mutex> lock(mutex_);
      finished_[c.path] = built ? std::nullopt : std::optional(std::move(result));
      done_.notify_all();
    });
  }

  // Waits for this process's build of `path`; how it failed, if it did.
  std::optional<cpu::ProcessResult> failure(const std::string& path) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (started_.count(path) == 0) return std::nullopt;
    done_.wait(lock, [&] { return finished_.count(path) != 0; });
    return finished_[path];
  }

  ~PreludeBuilds() = delete;

  static void join_all_at_exit() {
    if (current_ == nullptr) return;
    for (std::thread& t : current_->threads_) t.join();
  }

 private:
  PreludeBuilds() = default;
  static inline PreludeBuilds* current_ = nullptr;
  std::mutex mutex_;
  std::condition_variable done_;
  std::set<std::string> started_;
  std::map<std::string, std::optional<cpu::ProcessResult>> finished_;
  std::vector<std::thread> threads_;
};

struct JoinPreludeBuildsAtExit {
  ~JoinPreludeBuildsAtExit() { PreludeBuilds::join_all_at_exit(); }
} join_prelude_builds_at_exit;

// Runs clang on the translation unit `cu`, reading the prelude precompiled for
// these flags. Without it (the first kernel compiled with this compiler, these
// flags and these headers), the kernel is compiled with the prelude parsed
// from source, which takes about as long as precompiling the prelude, while a
// background thread precompiles it for the kernels after this one.
cpu::ProcessResult compile_with_prelude(const KernelRecord& record, const PtxJob& job,
                                        const std::string& cu, const std::string& ptx) {
  const Toolchain& tc = *job.toolchain;
  if (std::optional<std::string> pch = existing_prelude_pch(tc, job.flags)) {
    cpu::ProcessResult result = run_clang(tc, job.kernel_flags, *pch, cu, ptx);
    if (!result.started || result.exit_code == 0 || !mentions_unusable_pch(result.output)) {
      return result;
    }
    return run_clang(tc, job.kernel_flags, prelude_pch(record.name, tc, job.flags, true), cu,
                     ptx);
  }
  // No should_stop: the build outlives this launch, whose interruption it ignores.
  cpu::ProcessLimits limits;
  limits.timeout_seconds = cpu::compiler_limits().timeout_seconds;
  PreludeCommand command = prelude_command(tc, job.flags);
  const std::string path = command.path;
  PreludeBuilds::get().start(std::move(command), std::move(limits));
  cpu::ProcessResult result = run_clang(tc, job.kernel_flags, "", cu, ptx);
  if (result.started && result.exit_code != 0) {
    // Headers that do not compile are no fault of the kernel's: that error,
    // which names the compiler needed, goes first.
    if (std::optional<cpu::ProcessResult> failed = PreludeBuilds::get().failure(path)) {
      if (!failed->started || failed->exit_code != 0) {
        throw_prelude_failure(record.name, tc, *failed);
      }
    }
  }
  return result;
}

// Fixes `ptx`'s half and bfloat globals (ptx_fixup.h) from the LLVM IR of the
// same translation unit `cu`; an error if one cannot be fixed.
void repair_16bit_globals(const KernelRecord& record, const PtxJob& job, std::string& ptx,
                          const std::string& cu, const std::string& ll) {
  std::vector<std::string> flags = job.kernel_flags;
  flags.push_back("-emit-llvm");
  const std::string pch = prelude_pch(record.name, *job.toolchain, job.flags, false);
  const cpu::ProcessResult result = run_clang(*job.toolchain, flags, pch, cu, ll);
  std::ifstream in(ll, std::ios::binary);
  std::ostringstream ir;
  ir << in.rdbuf();
  std::remove(ll.c_str());
  const std::string missing =
      result.started && result.exit_code == 0 ? fix_16bit_globals(ptx, ir.str()) : "every one";
  TORCH_CHECK(missing.empty(), "kernel '", record.name,
              "': the CUDA backend cannot give the half/bfloat constants ", missing,
              " their values on the GPU (clang's NVPTX backend misprints them). Make them "
              "local variables of the kernel, or run the kernel on CPU tensors.");
}

// The PTX of `job`, from the disk cache or compiled by clang.
std::string compile(const KernelRecord& record, const PtxJob& job) {
  const Toolchain& tc = *job.toolchain;
  const std::string dir = cpu::cache_directory();
  cpu::cache_limit_bytes();  // a bad COREAI_TORCH_CACHE_MAX_BYTES is refused before compiling
  const std::string ptx_path = dir + "/" + job.key + ".ptx";
  if (std::optional<std::string> ptx = cached(ptx_path)) return std::move(*ptx);
  // Compiled under private temporary names, then sealed and renamed: a
  // concurrent process compiling the same kernel renames an identical file
  // over it, and nobody reads a half-written one.
  const std::string stem = dir + "/.tmp-" + job.key.substr(0, 16) + "-" + cpu::unique_suffix();
  const std::string tmp_cu = stem + ".cu";
  const std::string tmp_ptx = stem + ".ptx";
  cpu::write_private_file(tmp_cu, job.tu);
  cpu::ProcessResult result = compile_with_prelude(record, job, tmp_cu, tmp_ptx);
  if (!result.started || result.exit_code != 0) {
    std::remove(tmp_cu.c_str());
    std::remove(tmp_ptx.c_str());
    cpu::ProcessResult shown = result;
    shown.output = cpu::without_remarks(result.output);
    cpu::throw_compile_failure(shown, record.name, tc.clang,
                               [&] { return compile_error(record, shown.output); });
  }
  if (job.fidelity) {
    try {
      cpu::refuse_non_metal(record.name, cpu::recursion_in_remarks(result.output));
    } catch (...) {
      std::remove(tmp_cu.c_str());
      std::remove(tmp_ptx.c_str());
      throw;
    }
  }
  chmod(tmp_ptx.c_str(), 0600);
  std::ifstream in(tmp_ptx, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::string ptx = text.str();
  TORCH_CHECK(!ptx.empty(), "kernel '", record.name, "': clang wrote no PTX to ", tmp_ptx);
  if (!misprinted_16bit_globals(ptx).empty()) {
    try {
      repair_16bit_globals(record, job, ptx, tmp_cu, stem + ".ll");
    } catch (...) {
      std::remove(tmp_cu.c_str());
      std::remove(tmp_ptx.c_str());
      throw;
    }
    std::ofstream(tmp_ptx, std::ios::binary | std::ios::trunc) << ptx;
  }
  store(tmp_ptx, ptx_path);
  // The translation unit is kept beside the PTX, to read what was compiled.
  if (!publish(tmp_cu, dir + "/" + job.key + ".cu")) std::remove(tmp_cu.c_str());
  cpu::evict_least_recently_used(dir);
  return ptx;
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
  TORCH_CHECK(r == kCudaSuccess,
              compile_error(record, "the driver's PTX compiler failed (" + describe(r) + "):\n" +
                                        std::string(error_log.data())));
  return image;
}

LoadedKernel load(const KernelRecord& record, int device, bool bounded, bool whole_simdgroups) {
  const Driver& d = driver();
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  const int major = device_attribute(dev, kDeviceAttributeComputeCapabilityMajor);
  const int minor = device_attribute(dev, kDeviceAttributeComputeCapabilityMinor);
  const std::string arch = gpu_arch(major, minor);

  // Machine code is cached per PTX, GPU and driver (whose compiler made it):
  // a warm process reads it without compiling, or even reading, the PTX.
  const PtxJob job = ptx_job(record, arch, bounded, whole_simdgroups);
  const std::string dir = cpu::cache_directory();
  const std::string cubin_path =
      dir + "/" +
      cpu::sha256_hex("coreai_torch cuda machine code\n" + job.key + "\nsm_" +
                      std::to_string(major) + std::to_string(minor) + "\ndriver " +
                      std::to_string(d.version)) +
      ".cubin";
  LoadedKernel k;
  if (std::optional<std::string> cubin = cached(cubin_path)) {
    if (d.cuModuleLoadData(&k.module, cubin->data()) != kCudaSuccess) k.module = nullptr;
  }
  if (k.module == nullptr) {
    const std::string image = link_ptx(record, compile(record, job));
    const std::string tmp = dir + "/.tmp-" + cpu::unique_suffix() + ".cubin";
    cpu::write_private_file(tmp, image);
    store(tmp, cubin_path);
    check(d.cuModuleLoadData(&k.module, image.data()), "cuModuleLoadData");
  }
  ++g_loaded;
  const CUresult found = d.cuModuleGetFunction(&k.function, k.module, COREAI_CUDA_KERNEL_NAME);
  if (found != kCudaSuccess) {
    d.cuModuleUnload(k.module);
    --g_loaded;
    check(found, "cuModuleGetFunction");
  }
  k.max_threads = function_attribute(k.function, kFuncAttributeMaxThreadsPerBlock);
  return k;
}

}  // namespace

KernelModule::~KernelModule() {
  // The record is gone and no launch uses it (each holds the record). Its
  // modules are unloaded in their contexts; a driver already shut down (the
  // process exiting) has unloaded them itself.
  if (modules_.empty()) return;
  const Driver& d = driver();
  CUcontext previous = nullptr;
  d.cuCtxGetCurrent(&previous);
  for (const auto& [device, module] : modules_) {
    try {
      make_primary_context_current(device);
      d.cuModuleUnload(module);
    } catch (const c10::Error&) {
    }
    --g_loaded;
  }
  d.cuCtxSetCurrent(previous);
}

KernelModule::OnDevice& KernelModule::on(int device) const {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "coreai_torch CUDA backend: no device ",
              device);
  OnDevice* found = devices_[device].load(std::memory_order_acquire);
  if (found != nullptr) return *found;
  owned_.push_back(std::make_unique<OnDevice>());  // under mutex_ (callers hold it)
  devices_[device].store(owned_.back().get(), std::memory_order_release);
  return *owned_.back();
}

KernelModule::KernelModule(const KernelRecord& record)
    : matrices_(uses_simdgroup_matrices(record.source)) {}

bool KernelModule::loaded_on(int device) const {
  if (device < 0 || device >= kMaxDevices) return false;
  const OnDevice* d = devices_[device].load(std::memory_order_acquire);
  if (d == nullptr) return false;
  for (const auto& form : d->free) {
    if (form.load(std::memory_order_acquire) != nullptr) return true;
  }
  return false;
}

const LoadedKernel& KernelModule::kernel(const KernelRecord& record, int device,
                                         uint32_t group_threads, bool whole_simdgroups) const {
  const bool whole = matrices_ && whole_simdgroups;  // else both forms are one
  if (device >= 0 && device < kMaxDevices) {
    const OnDevice* d = devices_[device].load(std::memory_order_acquire);
    const LoadedKernel* free =
        d != nullptr ? d->free[whole].load(std::memory_order_acquire) : nullptr;
    if (free != nullptr && group_threads <= static_cast<uint32_t>(free->max_threads)) {
      return *free;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  OnDevice& d = on(device);
  TORCH_CHECK(d.error.empty(), d.error);
  // A compile failure for this GPU is remembered; a missing driver or a full
  // disk is raised as it is, and the next launch tries again.
  auto load_form = [&](bool bounded, LoadedKernel& into) {
    try {
      into = load(record, device, bounded, whole);
      modules_.emplace_back(device, into.module);
    } catch (const c10::Error& e) {
      if (is_compile_error(e.msg())) d.error = e.msg();
      throw;
    }
  };
  const LoadedKernel& unbounded = d.free_kernel[whole];
  if (d.free[whole].load(std::memory_order_relaxed) == nullptr) {
    load_form(false, d.free_kernel[whole]);
    d.free[whole].store(&unbounded, std::memory_order_release);
  }
  if (group_threads <= static_cast<uint32_t>(unbounded.max_threads)) return unbounded;
  if (d.bounded_kernel[whole].function == nullptr) load_form(true, d.bounded_kernel[whole]);
  const LoadedKernel& bounded = d.bounded_kernel[whole];
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

const KernelModule& kernel_module(const KernelRecord& record, int device,
                                  bool whole_simdgroups) {
  return record.artifacts.cuda.get(
      [&] {
        auto module = std::make_shared<KernelModule>(record);
        // Compiles and loads, on this GPU, the form the first launch needs.
        module->kernel(record, device, 1, whole_simdgroups);
        return std::shared_ptr<const KernelModule>(std::move(module));
      },
      // Only a compile failure is final; a missing compiler may be installed
      // and a full disk emptied while the process runs.
      is_compile_error);
}

std::string translation_unit(const KernelRecord& record, bool bounded, bool whole_simdgroups) {
  std::string tu;
  tu += "// coreai_torch CUDA backend: kernel entry " + record.entry + "\n";
  tu += "#include <coreai_msl.h>\n";
  tu += "template <class T>\nstruct coreai::simd::launch_form {\n";
  tu += "  static constexpr bool whole_simdgroups = ";
  tu += whole_simdgroups ? "true;\n};\n" : "false;\n};\n";
  tu += "#pragma clang force_cuda_host_device begin\n";
  tu += "namespace metal {\n";
  tu += "#line 1 \"kernel_rendering\"\n";
  tu += as_device_function(record, cpu::metal_to_cpp(record.source));
  tu += "\n}  // namespace metal\n";
  tu += "#pragma clang force_cuda_host_device end\n";
  tu += "#line 1 \"coreai_entry_shim\"\n";
  tu += entry_shim(record, bounded);
  return tu;
}

std::string ptx_for(const KernelRecord& record, const std::string& arch, bool bounded,
                    bool whole_simdgroups) {
  return compile(record, ptx_job(record, arch, bounded, whole_simdgroups));
}

bool uses_simdgroup_matrices(const std::string& source) {
  for (const char* name : {"simdgroup_matrix", "simdgroup_float8x8", "simdgroup_half8x8",
                           "simdgroup_bfloat8x8"}) {
    if (source.find(name) != std::string::npos) return true;
  }
  return false;
}

bool loaded_on(const KernelModule& module, int device) { return module.loaded_on(device); }

int64_t compile_count() { return g_compiles.load(); }
int64_t disk_cache_hits() { return g_disk_hits.load(); }
int64_t loaded_modules() { return g_loaded.load(); }

}  // namespace coreai_torch::cuda
