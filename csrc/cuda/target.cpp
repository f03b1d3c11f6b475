#include "cuda/target.h"

#include <c10/util/Exception.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string_view>

#include "cpu/group_form.h"
#include "jit/pipeline.h"
#include "jit/sha256.h"
#include "source/source_scan.h"
#include "specializations/launch_args.h"
#include "cuda/ptx_fixup.h"
#include "cuda/toolchain.h"
#include "cuda/chained_products.h"
#include "cuda/paired_products.h"
#include "cuda/vector_alignment.h"
#include "msl/coreai_msl/cuda_abi.h"

namespace coreai_torch::cuda {
namespace {

constexpr const char* kBackend = "CUDA";

std::atomic<int64_t> g_loaded{0};

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
// layout) as an array parameter, then the dispatch geometry. With
// `aligned_tensors` the launcher has checked what LaunchForm says, and the
// entry tells the optimizer: each tensor pointer is 16-byte aligned and each
// outer stride (metadata, elements) a multiple of 16 bytes' worth of
// elements, so that addresses built from them carry that alignment into the
// IR rewrites (vector_alignment.h), which then leave their accesses untested.
//
// In the steps form (LaunchForm::steps) the kernel takes the group instead of
// the attributes and places each step's thread itself.
std::string entry_shim(const KernelRecord& record, bool bounded, bool aligned_tensors,
                       bool steps) {
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
  std::ostringstream assumptions;
  std::ostringstream call;
  size_t tensor = 0;  // index into record.tensor_ranks and record.layout.offsets
  for (size_t i = 0; i < buffers; ++i) {
    const std::string b = "b" + std::to_string(i);
    const bool input = i < record.inputs.size();
    if (input && record.inputs[i].kind != ArgKind::Tensor) {
      s << "std::remove_cvref_t<coreai_param<" << i << ">> " << b << ", ";
      call << b << ", ";
      continue;
    }
    s << "void* " << b << ", ";
    const std::string pointer =
        aligned_tensors ? "__builtin_assume_aligned(" + b + ", 16)" : b;
    call << "coreai::bind_arg<coreai_param<" << i << ">>(" << pointer << "), ";
    const size_t t = tensor++;
    if (!aligned_tensors) continue;
    const at::ScalarType dtype =
        input ? record.inputs[i].dtype : record.results[i - record.inputs.size()].dtype;
    const int64_t per_16_bytes = 16 / static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t rank = record.tensor_ranks[t];
    for (int64_t d = 1; d < rank && per_16_bytes > 1; ++d) {
      assumptions << "  __builtin_assume((meta.values[" << record.layout.offsets[t] + rank + d
                  << "] & " << per_16_bytes - 1 << ") == 0);\n";
    }
  }
  s << "const coreai_meta_block meta, const coreai_cuda_dispatch dispatch) {\n"
    << assumptions.str() << "  coreai_cpu_group g;\n"
    << "  coreai_cpu_thread t;\n"
    << "  if (!coreai::target::locate(dispatch, g, t)) return;\n"
    << "  metal::" << record.entry << "(" << call.str() << "meta.values";
  if (steps) {
    s << ", g";
  } else {
    for (const std::string& attr : record.thread_attrs) s << ", coreai::attr_" << attr << "(g, t)";
  }
  s << ");\n}\n";
  return s.str();
}

// The version of what ptx_from_ir makes of a kernel's IR (its rewrites and
// repairs), part of the disk cache key: PTX that an earlier version wrote is
// compiled again, not reused. Bump it whenever their output changes.
// 1: vector accesses tested for alignment; 2: products sharing B paired, and
// accesses the IR proves aligned left untested; 3: products in a row on one
// accumulator fused; 4: copies to threadgroup memory asynchronous; 5: none
// in an entry block with allocas.
constexpr int kIrRewriteVersion = 5;

// Whether `arch` (sm_XY) has cp.async: sm_80 and later.
bool has_async_copies(const std::string& arch) {
  return arch.size() > 3 && std::isdigit(static_cast<unsigned char>(arch[3])) != 0 &&
         std::stoi(arch.substr(3)) >= 80;
}

// The artifact holds the kernel's optimized LLVM IR (-emit-llvm); this makes
// it the PTX: SIMD-group matrix products that share B paired on one
// instruction (paired_products.h), products in a row on one accumulator fused
// (chained_products.h), under-aligned vector accesses tested at run
// time and tile copies made asynchronous (vector_alignment.h,
// async_copies.h), the IR compiled, then the PTX's half and bfloat
// globals repaired from the IR (ptx_fixup.h). The code generator alone
// compiles the IR, so that nothing merges the two paths of a tested access
// again; an IR with nothing to rewrite gives the PTX of a direct compile.
void ptx_from_ir(const jit::CompileRequest& r, const jit::CacheDir& cache,
                 const std::string& artifact, const std::string& arch, bool fast_math) {
  std::optional<jit::Fd> fd = cache.open_entry(artifact);
  TORCH_CHECK(fd, "kernel '", r.kernel, "': the CUDA backend's LLVM IR of the kernel vanished ",
              "from the cache directory ", cache.path(), " while it was being compiled");
  const std::string ir = jit::CacheDir::read_all(fd->get());
  fd.reset();
  const VersionedVectors versioned = version_underaligned_vectors(
      fuse_chained_products(pair_products_sharing_b(ir).ir).ir, has_async_copies(arch));
  const std::string stem = jit::sha256_hex(artifact);
  const std::string ll = cache.temporary(stem, ".ll");
  const std::string ptx_file = cache.temporary(stem, ".ptx");
  cache.write_new(ll, versioned.ir, r.kernel);
  std::vector<std::string> argv{r.compiler->program};
  const std::vector<std::string> flags = ir_compile_flags(arch, fast_math);
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-o", cache.path_of(ptx_file), cache.path_of(ll)});
  const jit::ProcessResult result = jit::run_process(argv, jit::compiler_limits());
  cache.remove(ll);
  const bool ok = result.started && result.exit_code == 0;
  if (ok) cache.make_private(ptx_file);
  std::optional<jit::Fd> out = ok ? cache.open_entry(ptx_file) : std::nullopt;
  std::string ptx = out ? jit::CacheDir::read_all(out->get()) : std::string();
  out.reset();
  cache.remove(ptx_file);
  TORCH_CHECK(!ptx.empty(), "kernel '", r.kernel,
              "': the CUDA backend could not compile the kernel's LLVM IR to PTX (",
              versioned.count, " vector accesses tested for alignment):\n", result.output);
  if (!misprinted_16bit_globals(ptx).empty()) {
    const std::string missing = fix_16bit_globals(ptx, ir);
    TORCH_CHECK(missing.empty(), "kernel '", r.kernel,
                "': the CUDA backend cannot give the half/bfloat constants ", missing,
                " their values on the GPU (clang's NVPTX backend misprints them). Make them "
                "local variables of the kernel, or run the kernel on CPU tensors.");
  }
  cache.remove(artifact);
  cache.write_new(artifact, ptx, r.kernel);
}

// What compiling a record to PTX for `arch` takes.
jit::CompileRequest ptx_request(const KernelRecord& record, const std::string& arch,
                                bool bounded, LaunchForm form) {
  TORCH_CHECK((record.options & kOptionDebug) == 0, "kernel '", record.name,
              "': debug mode (bounds checks and the unwritten-result report) is a feature of the "
              "CPU backend; run the kernel on CPU tensors to debug it, or set debug = False to "
              "run it on CUDA");
  const Toolchain& tc = toolchain(record.name);
  const bool fast_math = (record.options & kOptionFastMath) != 0;
  jit::CompileRequest r = jit::kernel_request(
      record.name, record.entry, kBackend, ".ptx", ".cu", tc.compiler,
      device_compile_flags(tc, arch, fast_math), record.source);
  if (uses_simdgroup_matrices(record.source)) {
    // Unroll loops with known trip counts up to ~4000 instructions (LLVM's
    // default at -O3: 300). Such kernels index arrays of matrices by loop
    // counters (a GEMM's tile of accumulators, acc[i][j]); only a fully
    // unrolled loop keeps the array in registers instead of local memory, as
    // Metal's compiler does. AMDGPU raises its own threshold to 2000 for
    // loops over private arrays. Code generation only: the precompiled
    // prelude is the same.
    r.codegen_flags = {"-mllvm", "-unroll-threshold=4000"};
  }
  r.prelude_flags = {"-Xclang", "-emit-pch"};
  r.key_salt = "abi " + std::to_string(COREAI_CUDA_ABI_VERSION) + "\nir rewrites " +
                std::to_string(kIrRewriteVersion) + "\n" + tc.libdevice_identity;
  r.translation_unit = translation_unit(record, bounded, form);
  // Compiled to optimized LLVM IR, which the finishing step makes the PTX.
  r.output_flags = {"-emit-llvm"};
  r.finish = [arch, fast_math](const jit::CompileRequest& request, const jit::CacheDir& cache,
                               const std::string& artifact, const std::string&) {
    ptx_from_ir(request, cache, artifact, arch, fast_math);
    return jit::SealNotes{};
  };
  return r;
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
              jit::compile_error(record.name, record.entry, kBackend,
                                 "the driver's PTX compiler failed (" + describe(r) + "):\n" +
                                     std::string(error_log.data())));
  return image;
}

LoadedKernel load(const KernelRecord& record, int device, bool bounded, LaunchForm form) {
  const Driver& d = driver();
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  const int major = device_attribute(dev, kDeviceAttributeComputeCapabilityMajor);
  const int minor = device_attribute(dev, kDeviceAttributeComputeCapabilityMinor);
  const std::string arch = gpu_arch(major, minor);

  // Machine code is cached per PTX, GPU and driver (whose compiler made it):
  // a warm process reads it without compiling, or even reading, the PTX.
  const jit::CompileRequest request = ptx_request(record, arch, bounded, form);
  const std::string cubin_key =
      jit::cache_key("CUDA machine code", {jit::artifact_key(request),
                                           "sm_" + std::to_string(major) + std::to_string(minor),
                                           "driver " + std::to_string(d.version)});
  LoadedKernel k;
  if (std::optional<std::string> cubin = jit::cached_blob(kBackend, cubin_key, ".cubin")) {
    if (d.cuModuleLoadData(&k.module, cubin->data()) != kCudaSuccess) k.module = nullptr;
  }
  if (k.module == nullptr) {
    const std::string image = link_ptx(record, jit::compile(request, true).payload);
    jit::store_blob(kBackend, record.name, cubin_key, ".cubin", image);
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
  k.steps = form.steps;
  return k;
}

// COREAI_TORCH_CUDA_STEPS=0 keeps every kernel at one Metal thread per CUDA thread.
bool steps_enabled() {
  const char* v = std::getenv("COREAI_TORCH_CUDA_STEPS");
  return v == nullptr || *v == '\0' || std::string_view(v) != "0";
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
    : matrices_(uses_simdgroup_matrices(record.source)),
      steps_(steps_enabled() && no_steps_reason(record).empty()) {}

bool KernelModule::loaded_on(int device) const {
  if (device < 0 || device >= kMaxDevices) return false;
  const OnDevice* d = devices_[device].load(std::memory_order_acquire);
  if (d == nullptr) return false;
  for (const auto& form : d->free) {
    if (form.load(std::memory_order_acquire) != nullptr) return true;
  }
  return false;
}

std::vector<int> KernelModule::loaded_steps(int device) const {
  std::vector<int> steps;
  if (device < 0 || device >= kMaxDevices) return steps;
  const OnDevice* d = devices_[device].load(std::memory_order_acquire);
  if (d == nullptr) return steps;
  for (int f = 0; f < LaunchForm::kCount; ++f) {
    const int s = LaunchForm::steps_of_index(f);
    if (d->free[f].load(std::memory_order_acquire) != nullptr &&
        (steps.empty() || steps.back() != s)) {
      steps.push_back(s);
    }
  }
  return steps;
}

const LoadedKernel& KernelModule::kernel(const KernelRecord& record, int device,
                                         uint32_t group_threads, LaunchForm form) const {
  form.whole_simdgroups = form.whole_simdgroups && matrices_;  // else its code is the same
  if (!steps_) form.steps = 1;
  const int f = form.index();
  const uint32_t block_threads = group_threads / static_cast<uint32_t>(form.steps);
  if (device >= 0 && device < kMaxDevices) {
    const OnDevice* d = devices_[device].load(std::memory_order_acquire);
    const LoadedKernel* free = d != nullptr ? d->free[f].load(std::memory_order_acquire) : nullptr;
    if (free != nullptr && block_threads <= static_cast<uint32_t>(free->max_threads)) {
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
      into = load(record, device, bounded, form);
      modules_.emplace_back(device, into.module);
    } catch (const c10::Error& e) {
      if (is_compile_error(e.msg())) d.error = e.msg();
      throw;
    }
  };
  const LoadedKernel& unbounded = d.free_kernel[f];
  if (d.free[f].load(std::memory_order_relaxed) == nullptr) {
    load_form(false, d.free_kernel[f]);
    d.free[f].store(&unbounded, std::memory_order_release);
  }
  if (block_threads <= static_cast<uint32_t>(unbounded.max_threads)) return unbounded;
  if (d.bounded_kernel[f].function == nullptr) load_form(true, d.bounded_kernel[f]);
  const LoadedKernel& bounded = d.bounded_kernel[f];
  TORCH_CHECK(block_threads <= static_cast<uint32_t>(bounded.max_threads), "kernel '",
              record.name, "': threads_per_thread_group has ", group_threads,
              " threads, but compiled for this GPU the kernel runs at most ", bounded.max_threads,
              " threads per threadgroup (it uses ",
              function_attribute(bounded.function, kFuncAttributeNumRegs),
              " registers per thread and ",
              function_attribute(bounded.function, kFuncAttributeSharedSizeBytes),
              " bytes of threadgroup memory); use smaller threadgroups");
  return bounded;
}

const KernelModule& kernel_module(const KernelRecord& record, int device, uint32_t group_threads,
                                  LaunchForm form) {
  return record.artifacts.cuda.get(
      [&] {
        auto module = std::make_shared<KernelModule>(record);
        // Compiles and loads, on this GPU, the form the first launch needs.
        module->kernel(record, device, group_threads, form);
        return std::shared_ptr<const KernelModule>(std::move(module));
      },
      // Only a compile failure is final; a missing compiler may be installed
      // and a full disk emptied while the process runs.
      is_compile_error);
}

std::string no_steps_reason(const KernelRecord& record) {
  return cpu::cuda_steps_form(record.source).reason;
}

std::string translation_unit(const KernelRecord& record, bool bounded, LaunchForm form) {
  std::string rendering = record.source;
  if (form.steps > 1) {
    cpu::FormChoice steps = cpu::cuda_steps_form(record.source);
    TORCH_CHECK(!steps.rendering.empty(), "kernel '", record.name,
                "': the CUDA backend has no steps form of this kernel: ", steps.reason);
    rendering = std::move(steps.rendering);
  }
  std::string tu;
  tu += "// coreai_torch CUDA backend: kernel entry " + record.entry + "\n";
  tu += "#include <coreai_msl.h>\n";
  tu += "inline constexpr uint32_t coreai_steps = " + std::to_string(form.steps) + ";\n";
  tu += "template <class T>\nstruct coreai::simd::launch_form {\n";
  tu += "  static constexpr bool whole_simdgroups = ";
  tu += form.whole_simdgroups ? "true;\n};\n" : "false;\n};\n";
  tu += "#pragma clang force_cuda_host_device begin\n";
  tu += "namespace metal {\n";
  tu += "#line 1 \"kernel_rendering\"\n";
  tu += as_device_function(record, source::metal_to_cpp(rendering));
  tu += "\n}  // namespace metal\n";
  tu += "#pragma clang force_cuda_host_device end\n";
  tu += "#line 1 \"coreai_entry_shim\"\n";
  tu += entry_shim(record, bounded, form.aligned_tensors, form.steps > 1);
  return tu;
}

std::string ptx_for(const KernelRecord& record, const std::string& arch, bool bounded,
                    LaunchForm form) {
  return jit::compile(ptx_request(record, arch, bounded, form), true).payload;
}

bool uses_simdgroup_matrices(const std::string& source) {
  for (const char* name : {"simdgroup_matrix", "simdgroup_float8x8", "simdgroup_half8x8",
                           "simdgroup_bfloat8x8"}) {
    if (source.find(name) != std::string::npos) return true;
  }
  return false;
}

bool loaded_on(const KernelModule& module, int device) { return module.loaded_on(device); }

int64_t compile_count() { return jit::compile_count(kBackend); }
int64_t disk_cache_hits() { return jit::disk_cache_hits(kBackend); }
int64_t loaded_modules() { return g_loaded.load(); }

}  // namespace coreai_torch::cuda
