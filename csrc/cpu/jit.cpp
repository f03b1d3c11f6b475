#include "cpu/jit.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "cpu/compiler.h"
#include "cpu/disk_cache.h"
#include "cpu/group_form.h"
#include "cpu/kernel_guard.h"
#include "cpu/metal_fidelity.h"
#include "cpu/sha256.h"
#include "cpu/source_scan.h"
#include "cpu/stack_usage.h"
#include "cpu/subprocess.h"

namespace coreai_torch::cpu {
namespace {

namespace fs = std::filesystem;

std::atomic<int64_t> g_compiles{0};
std::atomic<int64_t> g_disk_hits{0};

std::atomic<int64_t> g_loaded{0};

std::string getenv_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool is_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// mkdir -p with private permissions for the directories it creates.
void make_private_directories(const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  const fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty() && parent != fs::path(dir)) make_private_directories(parent.string());
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    TORCH_CHECK(false, "coreai_torch CPU backend: cannot create the kernel cache directory ", dir,
                ": ", std::strerror(errno),
                ". Set COREAI_TORCH_CACHE_DIR to a writable directory.");
  }
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
    s << "  using coreai_meta_type = std::remove_pointer_t<coreai_param<" << meta << ">>;\n"
      << "  if (g.meta_count <= coreai::kHeldMetaEntries) {\n"
      << "    std::remove_cv_t<coreai_meta_type> meta[coreai::kHeldMetaEntries];\n"
      << "    std::memcpy(meta, a[" << meta << "], g.meta_count * sizeof(coreai_meta_type));\n";
    if (!unit.empty()) {
      // Storing the constant 1 over entries that hold 1 changes nothing but
      // what the compiler knows: contiguous views, hence vector loads/stores.
      // Only entries inside the held copy: a longer buffer is read where it is.
      const size_t last = *std::max_element(unit.begin(), unit.end());
      s << "    if constexpr (" << last << " < coreai::kHeldMetaEntries) {\n"
        << "      if (g.meta_count > " << last;
      for (size_t k : unit) s << " && meta[" << k << "] == 1";
      s << ") {\n       ";
      for (size_t k : unit) s << " meta[" << k << "] = 1;";
      s << "\n        " << run_threads << "\n"
        << "        return;\n"
        << "      }\n"
        << "    }\n";
    }
    s << "    " << run_threads << "\n"
      << "  } else {\n"
      << "    coreai_meta_type* const meta = static_cast<coreai_meta_type*>(a[" << meta << "]);\n"
      << "    " << run_threads << "\n"
      << "  }\n}\n";
    s << "#if COREAI_CPU_X86_GROUP_LOOP_COPIES\n"
      << "[[gnu::target(\"avx2\")]] void coreai_group_loop_avx2(void* const* a, "
         "const coreai_cpu_group* g) {\n"
      << "  coreai_group_loop(a, g);\n}\n"
      << "[[gnu::target(\"avx512f,avx512vl\")]] void coreai_group_loop_avx512(void* const* a, "
         "const coreai_cpu_group* g) {\n"
      << "  coreai_group_loop(a, g);\n}\n"
      << "#endif\n";
    s << "}  // namespace\n"
      << "extern \"C\" {\n"
      << "COREAI_CPU_EXPORT void coreai_cpu_kernel_run_group(void* const* a, "
         "const coreai_cpu_group* g) {\n"
      << "#if COREAI_CPU_X86_GROUP_LOOP_COPIES\n"
      << "  if (__builtin_cpu_supports(\"avx512f\") && __builtin_cpu_supports(\"avx512vl\")) {\n"
      << "    coreai_group_loop_avx512(a, g);\n"
      << "    return;\n"
      << "  }\n"
      << "  if (__builtin_cpu_supports(\"avx2\")) {\n"
      << "    coreai_group_loop_avx2(a, g);\n"
      << "    return;\n"
      << "  }\n"
      << "#endif\n"
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

std::string compile_error(const KernelRecord& record, const std::string& what) {
  return std::string(kCompileErrorMarker) + "kernel '" + record.name + "' (entry " + record.entry +
         ") does not compile for the CPU backend:\n" + what;
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
    out.error = path + " lacks the coreai_cpu_kernel_* entry points";
  } else if (abi() != COREAI_CPU_ABI_VERSION) {
    out.error = path + " was built for kernel ABI " + std::to_string(abi()) + ", not " +
                std::to_string(COREAI_CPU_ABI_VERSION);
  }
  if (!out.error.empty()) {
    // Unloaded, so that the library built in its place is not mistaken for it.
    dlclose(handle);
    return out;
  }
  init(&runtime_table());
  const coreai_cpu_threadgroup_note* noted = nullptr;
  const uint32_t count = notes(&noted);
  for (uint32_t i = 0; i < count; ++i) {
    lib.threadgroup_variables.push_back(
        {noted[i].name, {noted[i].file, static_cast<int>(noted[i].line), 0}, noted[i].bytes});
  }
  lib.stack = stack;
  lib.path = path;
  out.library.emplace(std::move(lib));
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// A cached library that is intact and loads; nullopt when it must be built
// (missing, damaged, or rejected once loaded).
std::optional<KernelLibrary> load_cached(const std::string& so_path, ExecutionForm form) {
  if (!is_file(so_path)) return std::nullopt;
  std::string why;  // not shown: a damaged file is simply built again
  const std::optional<StackNeeds> stack = check_sealed_file(so_path, why);
  if (!stack) return std::nullopt;  // truncated or damaged: never loaded
  LoadResult cached = load_library(so_path, form, *stack);
  if (!cached.library) return std::nullopt;
  note_cache_file_in_use(so_path);
  return std::move(cached.library);
}

// A loaded library, unless Metal would refuse the kernel for its threadgroup
// memory, which only the compiled library tells (its threadgroup notes). The
// library stays cached: with fidelity off it is used as it is.
std::shared_ptr<const KernelLibrary> accepted(const KernelRecord& record, bool fidelity,
                                              KernelLibrary library) {
  if (fidelity) refuse_non_metal(record.name, threadgroup_memory_overuse(library.threadgroup_variables));
  return std::make_shared<KernelLibrary>(std::move(library));
}

std::shared_ptr<const KernelLibrary> build_as(const KernelRecord& record, const FormChoice& form) {
  const std::string dir = cache_directory();
  const std::string msl = msl_directory();
  cache_limit_bytes();  // a bad COREAI_TORCH_CACHE_MAX_BYTES is refused before compiling
  const Compiler& compiler = find_compiler(record.name, dir);
  const bool debug = (record.options & kOptionDebug) != 0;
  // What Metal refuses is refused before anything is compiled (metal_fidelity.h).
  const bool fidelity = metal_fidelity_enabled();
  if (fidelity) refuse_non_metal(record.name, find_non_metal_constructs(record.source));

  std::vector<std::string> flags = kernel_compile_flags();
  if (fidelity) {
    flags.insert(flags.end(), fidelity_compile_flags().begin(), fidelity_compile_flags().end());
  }
  const std::vector<std::string>& mode =
      form.form == ExecutionForm::Fibers ? fiber_mode_flags() : loop_mode_flags();
  flags.insert(flags.end(), mode.begin(), mode.end());
  if (debug) {
    flags.insert(flags.end(), debug_compile_flags().begin(), debug_compile_flags().end());
  }
  const std::string tu = translation_unit(record, form);

  Sha256 key_hash;
  key_hash.update("coreai_torch cpu kernel\n")
      .update("abi " + std::to_string(COREAI_CPU_ABI_VERSION) + "\n")
      .update(compiler.identity)
      .update("\n");
  for (const std::string& flag : flags) key_hash.update(flag).update("\n");
  key_hash.update(headers_digest(msl)).update("\n").update(tu);
  const std::string key = key_hash.hex_digest();
  const std::string so_path = dir + "/" + key + ".so";

  if (std::optional<KernelLibrary> cached = load_cached(so_path, form.form)) {
    ++g_disk_hits;
    return accepted(record, fidelity, std::move(*cached));
  }

  // Compile under private temporary names, then rename: a concurrent process
  // compiling the same kernel renames an equivalent file over it, and nobody
  // ever opens a half-written library. The new library is loaded from its
  // temporary name, before the rename: a path this process never loaded, so
  // the loader cannot hand back a library it loaded earlier from `so_path`.
  const std::string stem = dir + "/.tmp-" + key.substr(0, 16) + "-" + unique_suffix();
  const std::string tmp_cpp = stem + ".cpp";
  const std::string tmp_so = stem + ".so";
  const std::string tmp_su = stem + ".su";  // -fstack-usage writes it beside the output
  auto remove_temporaries = [&] {
    std::remove(tmp_cpp.c_str());
    std::remove(tmp_so.c_str());
    std::remove(tmp_su.c_str());
  };
  write_private_file(tmp_cpp, tu);
  std::vector<std::string> argv{compiler.program};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-fstack-usage", "-I", msl, "-o", tmp_so, "-x", "c++", tmp_cpp});
  ++g_compiles;
  const ProcessResult result = run_process(argv, compiler_limits());
  if (!result.started || result.exit_code != 0) {
    remove_temporaries();
    // The inliner's remarks (the recursion check's source) are not errors.
    ProcessResult shown = result;
    shown.output = without_remarks(result.output);
    throw_compile_failure(shown, record.name, compiler.program,
                          [&] { return compile_error(record, shown.output); });
  }
  if (fidelity) {
    try {
      refuse_non_metal(record.name, recursion_in_remarks(result.output));
    } catch (...) {
      remove_temporaries();
      throw;
    }
  }
  // No .su file (a compiler without -fstack-usage): the needs stay unknown.
  const std::string su_text = read_file(tmp_su);
  const StackNeeds stack =
      su_text.empty() ? StackNeeds{} : measure_stack_needs(su_text, record.entry);
  std::remove(tmp_su.c_str());
  chmod(tmp_so.c_str(), 0600);
  std::string seal_error;
  if (!seal_cache_file(tmp_so, stack, seal_error)) {
    remove_temporaries();
    TORCH_CHECK(false, "kernel '", record.name, "': cannot store the compiled kernel in ", dir,
                ": ", seal_error);
  }
  LoadResult loaded = load_library(tmp_so, form.form, stack);
  if (!loaded.library) {
    remove_temporaries();
    TORCH_CHECK(false, "kernel '", record.name, "': cannot load the compiled kernel: ",
                loaded.error);
  }
  const std::string cpp_path = dir + "/" + key + ".cpp";  // kept to read what was compiled
  if (std::rename(tmp_so.c_str(), so_path.c_str()) != 0 ||
      std::rename(tmp_cpp.c_str(), cpp_path.c_str()) != 0) {
    // Loaded already: only the disk cache misses out.
    remove_temporaries();
  } else {
    loaded.library->path = so_path;
    note_cache_file_in_use(so_path);
    evict_least_recently_used(dir);
  }
  return accepted(record, fidelity, std::move(*loaded.library));
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

const std::string& headers_digest(const std::string& msl_dir) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::string> digests;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = digests.find(msl_dir);
  if (it != digests.end()) return it->second;
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(msl_dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  Sha256 sha;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    sha.update(fs::relative(file, msl_dir).generic_string()).update(std::string_view("\0", 1));
    sha.update(contents.str()).update(std::string_view("\0", 1));
  }
  return digests.emplace(msl_dir, sha.hex_digest()).first->second;
}

std::string translation_unit(const KernelRecord& record, const FormChoice& form) {
  // register_kernel has checked that record.entry is an identifier.
  std::string tu;
  tu += "// coreai_torch CPU backend: kernel entry " + record.entry + "\n";
  tu += "#include <coreai_msl.h>\n";
  tu += "namespace metal {\n";
  tu += "#line 1 \"kernel_rendering\"\n";
  tu += metal_to_cpp(form.form == ExecutionForm::GroupLoops ? form.rendering : record.source);
  tu += "\n}  // namespace metal\n";
  tu += "#line 1 \"coreai_entry_shim\"\n";
  tu += entry_shim(record, form.form);
  return tu;
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

std::string cache_directory() {
  std::string dir = getenv_string("COREAI_TORCH_CACHE_DIR");
  if (dir.empty()) {
    const std::string xdg = getenv_string("XDG_CACHE_HOME");
    if (!xdg.empty() && xdg[0] == '/') {
      dir = xdg + "/coreai_torch";
    } else {
      const std::string home = getenv_string("HOME");
      TORCH_CHECK(!home.empty(),
                  "coreai_torch CPU backend: neither COREAI_TORCH_CACHE_DIR, XDG_CACHE_HOME nor "
                  "HOME is set; set COREAI_TORCH_CACHE_DIR to a directory for compiled kernels");
      dir = home + "/.cache/coreai_torch";
    }
  }
  make_private_directories(dir);
  // Libraries in this directory are loaded into the process: one that another
  // user can write to could hand us arbitrary code.
  struct stat st;
  TORCH_CHECK(stat(dir.c_str(), &st) == 0, "coreai_torch CPU backend: cannot stat ", dir, ": ",
              std::strerror(errno));
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  TORCH_CHECK(st.st_uid == geteuid() && (st.st_mode & 0022) == 0,
              "coreai_torch CPU backend: the kernel cache directory ", dir,
              " is owned by another user or writable by others (mode ", mode,
              "), so compiled kernels loaded from it could have been replaced. Run `chmod 700 ",
              dir, "` or set COREAI_TORCH_CACHE_DIR to a private directory.");
  return dir;
}

std::string msl_directory() {
  const std::string from_env = getenv_string("COREAI_TORCH_MSL_DIR");
  if (!from_env.empty()) {
    TORCH_CHECK(is_file(from_env + "/coreai_msl.h"), "COREAI_TORCH_MSL_DIR=", from_env,
                " does not contain coreai_msl.h");
    return from_env;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&msl_directory), &info) != 0 && info.dli_fname) {
    const std::string beside = (fs::path(info.dli_fname).parent_path() / "msl").string();
    if (is_file(beside + "/coreai_msl.h")) return beside;
  }
#ifdef COREAI_TORCH_SOURCE_MSL_DIR
  if (is_file(std::string(COREAI_TORCH_SOURCE_MSL_DIR) + "/coreai_msl.h")) {
    return COREAI_TORCH_SOURCE_MSL_DIR;
  }
#endif
  TORCH_CHECK(false,
              "coreai_torch CPU backend: cannot find the Metal standard library headers "
              "(coreai_msl.h) next to the _C library nor in the source tree; reinstall "
              "coreai_torch or set COREAI_TORCH_MSL_DIR");
}

int64_t compile_count() { return g_compiles.load(); }
int64_t disk_cache_hits() { return g_disk_hits.load(); }
int64_t loaded_libraries() { return g_loaded.load(); }

}  // namespace coreai_torch::cpu
