#include "cpu/target.h"

#include <dlfcn.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

#include "cpu/group_form.h"
#include "cpu/stack_usage.h"
#include "jit/pipeline.h"
#include "source/metal_fidelity.h"
#include "source/source_scan.h"

namespace coreai_torch::cpu {
namespace {

constexpr const char* kBackend = "CPU";

std::atomic<int64_t> g_loaded{0};

// The flags every kernel is compiled with. Fixed on purpose: no -march=native
// (cached libraries may be shared between machines) and no fast-math
// (kernels must round like the GPU's safe math).
const std::vector<std::string>& kernel_flags() {
  static const std::vector<std::string> flags{
      "-std=c++23",
      "-O2",
      "-fPIC",
      // Round every half and bfloat operation to its type, as the GPU does.
      "-Xclang",
      "-ffloat16-excess-precision=none",
      "-Xclang",
      "-fbfloat16-excess-precision=none",
      // Metal has no errno: lets sqrt and friends become single instructions
      // (results are unchanged; this is not fast-math).
      "-fno-math-errno",
      // a * b + c rounds twice, as on every other backend and in torch: no
      // contraction into a fused multiply-add where the target has one
      // (aarch64, the AVX-512 group loop; coreai_msl/entry.h).
      "-ffp-contract=off",
      // Kernel code has no exceptions and must not unwind through fibers.
      "-fno-exceptions",
      // A frame larger than a page touches each page in turn, so that an
      // overflow hits the stack's guard page instead of jumping past it into
      // other memory (kernel_guard.h).
      "-fstack-clash-protection",
      "-fvisibility=hidden",
      // Metal converts between vector types only explicitly; without this
      // clang would silently reinterpret, e.g., a short4 as an int2.
      "-flax-vector-conversions=none",
      // [[kernel]], [[buffer(i)]], [[thread_position_in_grid]] ... mean
      // nothing to a C++ compiler; the JIT binds parameters by position.
      "-Wno-unknown-attributes",
  };
  return flags;
}

// The vector instructions kernels are compiled for: the widest of AVX-512 (F
// and VL) and AVX2 that this CPU has, on x86-64. Both bring masked stores,
// which let the loop vectorizer handle the bounds check most kernels put
// around their stores; AVX-512's (mask registers) are also fast where AVX2's
// vmaskmov stores are slow (AMD Zen 4: a bounds-checked add runs about twice
// as long with them). They are part of the cache key, so a cache shared with a
// machine of another kind holds a library for each. AVX-512 implies FMA; the
// kernel flags forbid contracting a * b + c into one rounding
// (-ffp-contract=off), so every machine computes the same bits.
const std::vector<std::string>& instruction_set_flags() {
  static const std::vector<std::string> flags = []() -> std::vector<std::string> {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) {
      return {"-mavx512f", "-mavx512vl"};
    }
    if (__builtin_cpu_supports("avx2")) return {"-mavx2"};
#endif
    return {};
  }();
  return flags;
}

// How a kernel library is linked: with gold where there is one, which takes
// a third of the time of the default linker for these small libraries.
const std::vector<std::string>& link_flags() {
  static const std::vector<std::string> flags = []() -> std::vector<std::string> {
    std::vector<std::string> out{"-shared"};
#if defined(__linux__)
    if (!jit::resolve_program("ld.gold").empty()) out.push_back("-fuse-ld=gold");
#endif
    return out;
  }();
  return flags;
}

// In addition, for a kernel whose threads run as fibers.
const std::vector<std::string>& fiber_mode_flags() {
  static const std::vector<std::string> flags{
      "-DCOREAI_CPU_FIBER_MODE=1",
      // A SIMD-group function operates over the lanes that call it together,
      // so no call may move across control flow, nor may two be merged: the
      // rule GPU compilers follow (coreai_msl/fiber_runtime.h).
      "-fconvergent-functions",
      // The rendezvous tells call sites apart by the chain of return
      // addresses, which frame pointers and real calls keep.
      "-fno-omit-frame-pointer",
      "-fno-optimize-sibling-calls",
  };
  return flags;
}

// In addition, for a kernel in the group-loop form. A loop over threads whose
// body stores in both branches of an if (MLX's `if (offset + 4 <= dim) {...}
// else {...}` around its stores) vectorizes only if the stores stay in their
// branches, where the vectorizer masks them; sunk into one store after the
// if, behind a phi, they keep the loop scalar.
const std::vector<std::string>& group_loop_flags() {
  static const std::vector<std::string> flags{"-mllvm", "-simplifycfg-sink-common=false"};
  return flags;
}

// In addition, for a kernel in debug mode (option bit 0).
const std::vector<std::string>& debug_flags() {
  static const std::vector<std::string> flags{
      "-DCOREAI_MSL_DEBUG=1",
      // Checks every scalar division and reports it (coreai_msl/debug_checks.h).
      "-fsanitize=integer-divide-by-zero,signed-integer-overflow",
      // Reports every access to shared memory (coreai_msl/debug_accesses.h),
      // with line tables to name the source lines; no function entry hooks.
      "-fsanitize=thread",
      "-mllvm",
      "-tsan-instrument-func-entry-exit=0",
      "-gline-tables-only",
      // Keep each barrier and SIMD-group function where the source calls it,
      // inlined there (the instruction address names the call) and not
      // merged with the identical call of another branch: the checks tell
      // threads that reach different calls apart (access_checker.h).
      "-mllvm",
      "-inline-threshold=10000",
      "-mllvm",
      "-simplifycfg-hoist-common=false",
      "-mllvm",
      "-simplifycfg-sink-common=false",
  };
  return flags;
}

// Metadata entries that hold a view's dimension-0 stride: the first stride of
// each tensor of rank >= 1, by the record's metadata layout. The group loop is
// specialised for these being 1, after checking at run time that they are.
std::vector<size_t> innermost_stride_entries(const KernelRecord& record) {
  std::vector<size_t> entries;
  for (size_t j = 0; j < record.layout.offsets.size(); ++j) {
    const int64_t offset = record.layout.offsets[j];
    if (offset >= 0) entries.push_back(static_cast<size_t>(offset + record.tensor_ranks[j]));
  }
  return entries;
}

// The C-linkage functions the launcher looks up (see cpu_abi.h). The kernel's
// buffer parameters come in as pointers (a tensor's data, a scalar's address),
// the metadata buffer last. Loop mode binds them once per group, outside the
// loop over threads (see held_arg in entry.h); fiber mode binds them per thread.
// The group-loop form is called like loop mode, once per group with the group
// (group_form.h). Debug mode runs every kernel in fiber mode: its checks follow
// each thread (access_checker.h).
FormChoice execution_form(const KernelRecord& record) {
  return choose_execution_form(record.source, (record.options & kOptionDebug) != 0);
}

std::string entry_shim(const KernelRecord& record, ExecutionForm form) {
  const size_t buffers = record.inputs.size() + record.results.size() + 1;  // + the metadata
  const size_t meta = buffers - 1;
  // "b0, b1, ..." with `name(i)` for each buffer i.
  auto each_buffer = [&](auto name) {
    std::string list;
    for (size_t i = 0; i < buffers; ++i) list += (i ? ", " : "") + name(i);
    return list;
  };
  const std::string held = each_buffer([&](size_t i) {
    return i == meta ? std::string("meta") : "held" + std::to_string(i) + ".get()";
  });
  // Loop mode exports the group loop (twice on x86-64), fiber mode the fiber
  // runtime's entry: each library has only the code its mode runs.
  const bool loop_mode = form != ExecutionForm::Fibers;
  const bool group_loops = form == ExecutionForm::GroupLoops;
  // View strides of 1 that the group loop is specialised for.
  const std::vector<size_t> unit =
      loop_mode ? innermost_stride_entries(record) : std::vector<size_t>{};
  // What runs a group: a loop calling the kernel per thread, or one call.
  const std::string run_threads =
      group_loops ? "coreai_call(" + held + ", g);"
                  : "coreai::for_each_thread(g, [&](const coreai_cpu_thread& t) { coreai_call(" +
                        held + ", g, t); });";
  std::ostringstream s;
  s << "namespace {\n"
    << "using coreai_entry_type = decltype(&metal::" << record.entry << ");\n"
    << "template <std::size_t I>\n"
    << "using coreai_param = coreai::param_t<coreai_entry_type, I>;\n"
    << "[[gnu::always_inline]] inline void coreai_call("
    << each_buffer([](size_t i) {
         return "coreai_param<" + std::to_string(i) + "> b" + std::to_string(i);
       })
    << (group_loops ? ", const coreai_cpu_group& g) {\n"
                    : ", const coreai_cpu_group& g, const coreai_cpu_thread& t) {\n"
                      "  (void)g; (void)t;\n")
    << (group_loops ? ""
                    : "#ifdef COREAI_MSL_DEBUG\n"
                      "  const coreai::attr_value p = coreai::attr_thread_position_in_grid(g, t);\n"
                      "  coreai::g_debug_thread_position[0] = p.x;\n"
                      "  coreai::g_debug_thread_position[1] = p.y;\n"
                      "  coreai::g_debug_thread_position[2] = p.z;\n"
                      "#endif\n")
    << "  metal::" << record.entry << "("
    << each_buffer([](size_t i) { return "b" + std::to_string(i); });
  if (group_loops) {
    s << ", g";  // the group-loop form runs the whole group
  } else {
    for (const std::string& attr : record.thread_attrs) {
      s << ", coreai::attr_" << attr << "(g, t)";
    }
  }
  s << ");\n}\n}  // namespace\n"
    << "extern \"C\" {\n"
    << "COREAI_CPU_EXPORT uint32_t coreai_cpu_kernel_abi(void) { return COREAI_CPU_ABI_VERSION; }\n"
    << "COREAI_CPU_EXPORT void coreai_cpu_kernel_init(const coreai_cpu_runtime* runtime) {\n"
    << "  coreai::g_runtime = runtime;\n}\n"
    << "COREAI_CPU_EXPORT uint32_t coreai_cpu_kernel_threadgroup_notes("
       "const coreai_cpu_threadgroup_note** notes) {\n"
    << "  *notes = coreai::threadgroup_note_list().notes;\n"
    << "  return coreai::threadgroup_note_list().count;\n}\n"
    << "}  // extern \"C\"\n"
    << "namespace {\n";
  if (loop_mode) {
    s << "[[gnu::always_inline]] inline void coreai_group_loop(void* const* a, "
         "const coreai_cpu_group* group) {\n"
      << "  const coreai_cpu_group g = *group;\n";
    for (size_t i = 0; i < meta; ++i) {
      s << "  const coreai::held_arg<coreai_param<" << i << ">> held" << i << "(a[" << i << "]);\n";
    }
    // The metadata's length is the kernel's (its tensors' ranks): which copy
    // of the loop runs is known here, and only that one is compiled.
    const auto entries = static_cast<size_t>(record.layout.length);
    s << "  using coreai_meta_type = std::remove_pointer_t<coreai_param<" << meta << ">>;\n"
      << "  if constexpr (" << entries << " <= coreai::kHeldMetaEntries) {\n"
      << "    std::remove_cv_t<coreai_meta_type> meta[" << std::max<size_t>(entries, 1) << "];\n"
      << "    std::memcpy(meta, a[" << meta << "], " << entries
      << " * sizeof(coreai_meta_type));\n";
    if (!unit.empty()) {
      // Storing the constant 1 over entries that hold 1 changes nothing but
      // what the compiler knows: contiguous views, hence vector loads/stores.
      s << "    if (";
      for (size_t k : unit) s << (k == unit.front() ? "" : " && ") << "meta[" << k << "] == 1";
      s << ") {\n     ";
      for (size_t k : unit) s << " meta[" << k << "] = 1;";
      s << "\n      " << run_threads << "\n"
        << "      return;\n"
        << "    }\n";
    }
    s << "    " << run_threads << "\n"
      << "  } else {\n"
      << "    coreai_meta_type* const meta = static_cast<coreai_meta_type*>(a[" << meta << "]);\n"
      << "    " << run_threads << "\n"
      << "  }\n}\n";
    s << "}  // namespace\n"
      << "extern \"C\" {\n"
      << "COREAI_CPU_EXPORT void coreai_cpu_kernel_run_group(void* const* a, "
         "const coreai_cpu_group* g) {\n"
      << "  coreai_group_loop(a, g);\n}\n"
      << "}  // extern \"C\"\n";
  } else {
    // Fiber mode: the library runs the whole group (coreai_msl/fiber_runtime.h).
    s << "void coreai_thread_body(void* const* a, const coreai_cpu_group* g, "
         "const coreai_cpu_thread* t) {\n"
      << "  coreai_call("
      << each_buffer([](size_t i) {
           return "coreai::bind_arg<coreai_param<" + std::to_string(i) + ">>(a[" +
                  std::to_string(i) + "])";
         })
      << ", *g, *t);\n}\n"
      << "}  // namespace\n"
      << "extern \"C\" {\n"
      << "COREAI_CPU_EXPORT void coreai_cpu_kernel_run_fibers(coreai_cpu_fibers* f) {\n"
      << "  coreai::fiber::run_fibers<&coreai_thread_body>(f);\n}\n"
      << "}  // extern \"C\"\n";
  }
  return s.str();
}

struct LoadResult {
  std::optional<KernelLibrary> library;
  std::string error;
};

LoadResult load_library(const std::string& path, ExecutionForm form, const StackNeeds& stack) {
  LoadResult out;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    out.error = why ? why : "dlopen failed";
    return out;
  }
  auto abi = reinterpret_cast<coreai_cpu_kernel_abi_fn>(dlsym(handle, "coreai_cpu_kernel_abi"));
  auto init = reinterpret_cast<coreai_cpu_kernel_init_fn>(dlsym(handle, "coreai_cpu_kernel_init"));
  auto notes = reinterpret_cast<coreai_cpu_kernel_threadgroup_notes_fn>(
      dlsym(handle, "coreai_cpu_kernel_threadgroup_notes"));
  KernelLibrary lib;
  lib.handle = handle;  // closed again if the library is rejected below
  ++g_loaded;
  lib.fibers = form == ExecutionForm::Fibers;
  lib.form = form;
  if (lib.fibers) {
    lib.run_fibers = reinterpret_cast<coreai_cpu_kernel_run_fibers_fn>(
        dlsym(handle, "coreai_cpu_kernel_run_fibers"));
  } else {
    lib.run_group = reinterpret_cast<coreai_cpu_kernel_run_group_fn>(
        dlsym(handle, "coreai_cpu_kernel_run_group"));
  }
  if (!abi || !init || !notes || (lib.fibers ? !lib.run_fibers : !lib.run_group)) {
    out.error = "it lacks the coreai_cpu_kernel_* entry points";
  } else if (abi() != COREAI_CPU_ABI_VERSION) {
    out.error = "it was built for kernel ABI " + std::to_string(abi()) + ", not " +
                std::to_string(COREAI_CPU_ABI_VERSION);
  }
  if (!out.error.empty()) return out;  // the library's destructor unloads it
  init(&runtime_table());
  const coreai_cpu_threadgroup_note* noted = nullptr;
  const uint32_t count = notes(&noted);
  for (uint32_t i = 0; i < count; ++i) {
    lib.threadgroup_variables.push_back(
        {noted[i].name, {noted[i].file, static_cast<int>(noted[i].line), 0}, noted[i].bytes});
  }
  lib.stack = stack;
  out.library.emplace(std::move(lib));
  return out;
}

// The stack needs clang measured (-fstack-usage writes `<output stem>.su`
// beside the output); unknown without it.
StackNeeds stack_needs(const jit::CacheDir& cache, const std::string& artifact,
                       const std::string& entry) {
  const std::string su = artifact.substr(0, artifact.rfind('.')) + ".su";
  cache.make_private(su);
  std::optional<jit::Fd> fd = cache.open_entry(su);
  const std::string text = fd ? jit::CacheDir::read_all(fd->get()) : std::string();
  cache.remove(su);
  return text.empty() ? StackNeeds{} : measure_stack_needs(text, entry);
}

std::shared_ptr<const KernelLibrary> build_as(const KernelRecord& record, const FormChoice& form) {
  const jit::CacheDir& cache = jit::CacheDir::current(kBackend);
  TORCH_CHECK(cache.allows_executables(), "kernel '", record.name,
              "': the kernel cache directory ", cache.path(),
              " is on a file system mounted noexec, from which compiled kernels cannot be loaded. "
              "Set COREAI_TORCH_CACHE_DIR to a directory on a file system that allows "
              "executables (for example under your home directory).");
  std::vector<std::string> flags = kernel_compile_flags();
  jit::CompileRequest r = jit::kernel_request(
      record.name, record.entry, kBackend, ".so", ".cpp",
      jit::find_compiler(record.name, kBackend, cache), std::move(flags), record.source);
  if (form.form == ExecutionForm::Fibers) {
    r.language_flags.insert(r.language_flags.end(), fiber_mode_flags().begin(),
                            fiber_mode_flags().end());
  } else {
    r.language_flags.push_back("-DCOREAI_CPU_FIBER_MODE=0");
  }
  if (form.form == ExecutionForm::GroupLoops) {
    r.language_flags.insert(r.language_flags.end(), group_loop_flags().begin(),
                            group_loop_flags().end());
  }
  if ((record.options & kOptionDebug) != 0) {
    r.language_flags.insert(r.language_flags.end(), debug_flags().begin(), debug_flags().end());
  }
  r.prelude_flags = {"-x", "c++-header"};
  r.output_flags = {"-c", "-fstack-usage"};
  r.link_flags = link_flags();
  r.key_salt = "abi " + std::to_string(COREAI_CPU_ABI_VERSION);
  r.translation_unit = translation_unit(record, form);
  r.finish = [](const jit::CompileRequest& request, const jit::CacheDir& c,
                const std::string& artifact, const std::string&) {
    const StackNeeds stack = stack_needs(c, artifact, request.entry);
    return jit::SealNotes{stack.thread_bytes, stack.group_bytes};
  };
  jit::CachedArtifact artifact = jit::compile(r, false);
  // Loaded by a path through the cache directory's descriptor. The loader
  // takes an object it has loaded under the same name for the one asked for,
  // which is right here: the name is the key of the contents.
  auto load = [&] {
    return load_library(cache.path_of(artifact.name), form.form,
                        StackNeeds{artifact.notes.a, artifact.notes.b});
  };
  LoadResult first = load();
  const bool rebuild = !first.library && artifact.cached;
  if (rebuild) {
    // A cached library this build cannot use (made for another kernel ABI):
    // compiled again over it.
    artifact = jit::compile(r, false, /*fresh=*/true);
  }
  LoadResult loaded = rebuild ? load() : std::move(first);
  TORCH_CHECK(loaded.library, "kernel '", record.name, "': cannot load the compiled kernel ",
              cache.path(), "/", artifact.name, ": ", loaded.error,
              loaded.error.find("failed to map segment") != std::string::npos
                  ? ". Its directory does not allow executables (a noexec mount?): set "
                    "COREAI_TORCH_CACHE_DIR to a directory that does."
                  : "");
  loaded.library->path = cache.path() + "/" + artifact.name;
  // Metal would refuse a kernel for its threadgroup memory, which only the
  // compiled library tells (its threadgroup notes). The library stays cached:
  // with fidelity off it is used as it is.
  if (source::metal_fidelity_enabled()) {
    source::refuse_non_metal(record.name,
                             source::threadgroup_memory_overuse(loaded.library->threadgroup_variables));
  }
  return std::make_shared<KernelLibrary>(std::move(*loaded.library));
}

// The library of the form the kernel's source chooses (group_form.h). Should
// the group-loop form of a kernel not compile where its fiber form does (a
// construct the transformation misreads), the kernel runs in fiber mode, with
// a warning; a kernel with an error of its own fails in fiber mode, with
// that mode's diagnostics.
std::shared_ptr<const KernelLibrary> build(const KernelRecord& record) {
  const FormChoice form = execution_form(record);
  log_execution_form(record.name, form);
  if (form.form != ExecutionForm::GroupLoops) return build_as(record, form);
  try {
    return build_as(record, form);
  } catch (const c10::Error& e) {
    if (!is_compile_error(e.msg())) throw;
  }
  FormChoice fibers;
  fibers.form = ExecutionForm::Fibers;
  fibers.reason = "its group-loop form does not compile";
  std::shared_ptr<const KernelLibrary> library = build_as(record, fibers);
  log_execution_form(record.name, fibers);
  TORCH_WARN("kernel '", record.name,
             "': the CPU backend could not compile its group-loop form (please report the "
             "kernel); it runs in fiber mode, with the same results, more slowly.");
  return library;
}

}  // namespace

std::string translation_unit(const KernelRecord& record, const FormChoice& form) {
  // register_kernel has checked that record.entry is an identifier.
  std::string tu;
  tu += "// coreai_torch CPU backend: kernel entry " + record.entry + "\n";
  tu += "#include <coreai_msl.h>\n";
  tu += "namespace metal {\n";
  tu += "#line 1 \"kernel_rendering\"\n";
  tu += source::metal_to_cpp(form.form == ExecutionForm::GroupLoops ? form.rendering : record.source);
  tu += "\n}  // namespace metal\n";
  tu += "#line 1 \"coreai_entry_shim\"\n";
  tu += entry_shim(record, form.form);
  return tu;
}

std::vector<std::string> kernel_compile_flags() {
  std::vector<std::string> flags = kernel_flags();
  flags.insert(flags.end(), instruction_set_flags().begin(), instruction_set_flags().end());
  return flags;
}

std::string translation_unit(const KernelRecord& record) {
  return translation_unit(record, execution_form(record));
}

KernelLibrary::KernelLibrary(KernelLibrary&& other) noexcept
    : run_group(other.run_group),
      run_fibers(other.run_fibers),
      fibers(other.fibers),
      form(other.form),
      stack(other.stack),
      threadgroup_variables(std::move(other.threadgroup_variables)),
      path(std::move(other.path)),
      handle(std::exchange(other.handle, nullptr)) {}

KernelLibrary::~KernelLibrary() {
  // The record that owned this library is gone and no launch uses it (each
  // holds the record), so its code can be unmapped. dlopen counts references:
  // another record's load of the same file keeps it mapped.
  if (handle == nullptr) return;
  --g_loaded;
  dlclose(handle);
}

const KernelLibrary& kernel_library(const KernelRecord& record) {
  return record.artifacts.cpu.get(
      [&] { return build(record); },
      // Only a compile failure is final; a missing compiler may be installed
      // and a full disk emptied while the process runs.
      is_compile_error);
}

std::string loaded_execution_form(const KernelRecord& record) {
  const KernelLibrary* library = record.artifacts.cpu.built();
  return library != nullptr ? execution_form_name(library->form) : std::string();
}

std::string loaded_library_path(const KernelRecord& record) {
  const KernelLibrary* library = record.artifacts.cpu.built();
  return library != nullptr ? library->path : std::string();
}

int64_t compile_count() { return jit::compile_count(kBackend); }
int64_t disk_cache_hits() { return jit::disk_cache_hits(kBackend); }
int64_t loaded_libraries() { return g_loaded.load(); }

}  // namespace coreai_torch::cpu
