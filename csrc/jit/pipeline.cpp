#include "jit/pipeline.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "contract/contract.h"
#include "jit/child_unlocked_mutex.h"
#include "jit/sha256.h"
#include "source/metal_fidelity.h"

namespace coreai_torch::jit {
namespace {

namespace fs = std::filesystem;

struct Counters {
  std::atomic<int64_t> compiles{0};
  std::atomic<int64_t> disk_hits{0};
};

Counters& counters(const std::string& backend) {
  static std::mutex& mutex = child_unlocked_mutex();
  static auto* by_backend = new std::map<std::string, Counters>();
  std::lock_guard<std::mutex> lock(mutex);
  return (*by_backend)[backend];
}

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The sealed entry `name` of `cache` if it is intact and sealed under `key`.
std::optional<CachedArtifact> open_sealed(const CacheDir& cache, const std::string& name,
                                          const std::string& key, bool read_payload) {
  std::optional<Fd> fd = cache.open_entry(name);
  if (!fd) return std::nullopt;
  const std::string file = CacheDir::read_all(fd->get());
  std::string why;  // not shown: a damaged or foreign entry is simply built again
  const std::optional<Unsealed> sealed = unseal(file, key, why);
  if (!sealed) return std::nullopt;
  CachedArtifact out;
  out.name = name;
  out.notes = sealed->notes;
  if (read_payload) out.payload = std::string(sealed->payload);
  out.fd = std::move(*fd);
  return out;
}

// Seals the temporary `tmp` under `key` and renames it to `name`; throws,
// naming the kernel, when the cache cannot be written.
void publish(const CacheDir& cache, const std::string& tmp, const std::string& name,
             const std::string& key, SealNotes notes, const std::string& kernel) {
  cache.make_private(tmp);
  std::optional<Fd> fd = cache.open_entry(tmp);
  std::string why = "it disappeared";
  const bool sealed =
      fd && cache.append(tmp, seal_line(CacheDir::read_all(fd->get()), key, notes), why);
  if (!sealed || !cache.rename(tmp, name)) {
    cache.remove(tmp);
    TORCH_CHECK(false, "kernel '", kernel, "': cannot store the compiled kernel in the cache ",
                "directory ", cache.path(), ": ", sealed ? std::strerror(errno) : why,
                ". Free space there, or set COREAI_TORCH_CACHE_DIR to a writable directory "
                "with room.");
  }
}

// ---- the precompiled prelude ----------------------------------------------------------

// clang's complaint about a precompiled header it cannot use (damaged, or
// made from other inputs).
bool mentions_unusable_pch(const std::string& output) {
  return output.find("precompiled header") != std::string::npos ||
         output.find("PCH file") != std::string::npos ||
         output.find("AST file") != std::string::npos;
}

std::vector<std::string> prelude_argv(const CompileRequest& r, const std::string& msl,
                                      const std::string& output) {
  std::vector<std::string> argv{r.compiler->program};
  argv.insert(argv.end(), r.language_flags.begin(), r.language_flags.end());
  argv.insert(argv.end(), r.prelude_flags.begin(), r.prelude_flags.end());
  argv.insert(argv.end(), {"-I", msl, "-o", output, msl + "/coreai_msl.h"});
  return argv;
}

// Builds of the prelude, one thread each, at most one per key and process.
// A build still running when the process exits is waited for, so that it
// publishes its file. A forked child starts with none: it has none of the
// parent's threads.
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

  // Starts building the prelude `name` of `request` unless this process has.
  void start(const CompileRequest& r, const CacheDir& cache, const std::string& msl,
             const std::string& key, const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_.insert(cache.path() + "/" + name).second) return;
    const std::string tmp = cache.temporary(key, ".pch");
    std::vector<std::string> argv = prelude_argv(r, msl, cache.path_of(tmp));
    ProcessLimits limits;  // outlives the launch that started it: no interrupt
    limits.timeout_seconds = compile_timeout_seconds();
    const std::string kernel = r.kernel;
    threads_.emplace_back([&cache, argv = std::move(argv), limits, tmp, name, key, kernel] {
      const ProcessResult result = run_process(argv, limits);
      if (!result.started || result.exit_code != 0) {
        cache.remove(tmp);
        return;  // the kernels go on being compiled without it
      }
      try {
        publish(cache, tmp, name, key, SealNotes{}, kernel);
      } catch (const c10::Error&) {
      }
    });
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
  std::set<std::string> started_;
  std::vector<std::thread> threads_;
};

struct JoinPreludeBuildsAtExit {
  ~JoinPreludeBuildsAtExit() { PreludeBuilds::join_all_at_exit(); }
} join_prelude_builds_at_exit;

// The prelude precompiled for the request's language flags (a cache entry
// name), or empty while it is not built yet: the first kernel compiled with
// new flags starts its build and parses the prelude from source, which takes
// about as long as precompiling it.
std::string prelude(const CompileRequest& r, const CacheDir& cache, const std::string& msl) {
  // COREAI_TORCH_PRECOMPILED_PRELUDE=0: every kernel parses the prelude (for
  // measuring what precompiling it saves).
  if (const char* v = std::getenv("COREAI_TORCH_PRECOMPILED_PRELUDE"); v && std::string(v) == "0") {
    return {};
  }
  std::vector<std::string> parts{r.key_salt, r.compiler->identity};
  parts.insert(parts.end(), r.language_flags.begin(), r.language_flags.end());
  parts.insert(parts.end(), r.prelude_flags.begin(), r.prelude_flags.end());
  parts.push_back(headers_digest(msl));
  const std::string key = cache_key(r.backend + " prelude", parts);
  const std::string name = key + ".pch";
  // Checked once per process: precompiled preludes are megabytes.
  static std::mutex& mutex = child_unlocked_mutex();
  static auto* verified = new std::set<std::string>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (verified->count(cache.path() + "/" + name) != 0 && cache.open_entry(name)) {
      cache.note_in_use(name);
      return name;
    }
  }
  if (open_sealed(cache, name, key, false)) {
    std::lock_guard<std::mutex> lock(mutex);
    verified->insert(cache.path() + "/" + name);
    cache.note_in_use(name);
    return name;
  }
  PreludeBuilds::get().start(r, cache, msl, key, name);
  return {};
}

std::vector<std::string> compile_argv(const CompileRequest& r, const CacheDir& cache,
                                      const std::string& msl, const std::string& pch,
                                      const std::vector<std::string>& extra,
                                      const std::string& unit, const std::string& output) {
  std::vector<std::string> argv{r.compiler->program};
  argv.insert(argv.end(), r.language_flags.begin(), r.language_flags.end());
  argv.insert(argv.end(), r.codegen_flags.begin(), r.codegen_flags.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (!pch.empty()) argv.insert(argv.end(), {"-include-pch", cache.path_of(pch)});
  argv.insert(argv.end(), {"-I", msl, "-o", cache.path_of(output), cache.path_of(unit)});
  return argv;
}

// ---- the link step -------------------------------------------------------------------
//
// clang's driver runs the compiler proper in its own process only when that
// is its one job; asked to compile and link, it starts the compiler as a
// second process, which loads and relocates LLVM's libraries again (about as
// long as compiling a small kernel with the prelude precompiled). So a
// target that links has the driver compile to an object and runs the link
// command itself: the one the driver prints for the same flags (`-###`),
// learned once per machine and kept as a note in the cache directory.
//
// Kernels rarely need the C++ runtime (a few of the headers' helpers use
// operator new and thread-local destructors), and reading libstdc++ takes the
// linker several times as long as the rest of the link. The link runs first
// without it, refusing undefined symbols (-z defs); if the object needs it,
// the driver's full command runs.

constexpr const char* kOutputSlot = "{output}";
constexpr const char* kObjectSlot = "{object}";

// The lines of `text`, without their line ends.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The arguments of a command line as `clang -###` prints them: each in
// double quotes, with `\` escaping the next character.
std::optional<std::vector<std::string>> unquote_command(const std::string& line) {
  std::vector<std::string> args;
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    if (line[i] != '"') return std::nullopt;
    std::string arg;
    for (++i; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      arg += line[i];
    }
    if (i == line.size()) return std::nullopt;  // no closing quote
    args.push_back(std::move(arg));
    ++i;
  }
  if (args.empty()) return std::nullopt;
  return args;
}

// The link command the driver runs for `r.link_flags`, with the output and
// the object as slots; learned by linking `object` into `output` (existing
// paths, which the driver checks) with `-###`. Nothing if the driver's
// output cannot be read.
std::optional<std::vector<std::string>> learn_link_command(const CompileRequest& r,
                                                           const std::string& output,
                                                           const std::string& object) {
  std::vector<std::string> argv{r.compiler->program, "-###"};
  argv.insert(argv.end(), r.link_flags.begin(), r.link_flags.end());
  argv.insert(argv.end(), {"-o", output, object});
  const ProcessResult shown = run_process(argv, compiler_limits());
  if (!shown.started || shown.exit_code != 0) return std::nullopt;
  std::optional<std::vector<std::string>> command;  // the last quoted line: the link
  for (const std::string& line : lines_of(shown.output)) {
    if (line.rfind(" \"", 0) == 0) command = unquote_command(line);
  }
  if (!command) return std::nullopt;
  int slots = 0;
  for (std::string& arg : *command) {
    if (arg.find('\n') != std::string::npos) return std::nullopt;  // not a note's line
    if (arg == output || arg == object) {
      arg = arg == output ? kOutputSlot : kObjectSlot;
      ++slots;
    }
  }
  if (slots != 2) return std::nullopt;
  return command;
}

// `command` with its slots filled; `lean`: without libstdc++ and refusing
// undefined symbols, or nothing if the command does not link libstdc++.
std::optional<std::vector<std::string>> link_argv(const std::vector<std::string>& command,
                                                  const std::string& output,
                                                  const std::string& object, bool lean) {
  if (lean && std::find(command.begin(), command.end(), "-lstdc++") == command.end()) {
    return std::nullopt;
  }
  std::vector<std::string> argv{command[0]};
  if (lean) argv.insert(argv.end(), {"-z", "defs"});
  for (size_t i = 1; i < command.size(); ++i) {
    if (lean && command[i] == "-lstdc++") continue;
    argv.push_back(command[i] == kOutputSlot   ? output
                   : command[i] == kObjectSlot ? object
                                               : command[i]);
  }
  return argv;
}

ProcessResult run_link(const std::vector<std::string>& command, const std::string& output,
                       const std::string& object) {
  if (std::optional<std::vector<std::string>> lean = link_argv(command, output, object, true)) {
    ProcessResult result = run_process(*lean, compiler_limits());
    if (!result.started || result.exit_code == 0 || result.timed_out || result.stopped) {
      return result;
    }
  }
  return run_process(*link_argv(command, output, object, false), compiler_limits());
}

// Links `object` into `output` (paths) for `r`; what the last linker run did.
ProcessResult link(const CompileRequest& r, const CacheDir& cache, const std::string& output,
                   const std::string& object) {
  std::vector<std::string> parts{r.compiler->program, r.compiler->identity};
  parts.insert(parts.end(), r.link_flags.begin(), r.link_flags.end());
  const std::string note = "link-" + cache_key("link command", parts).substr(0, 32) + ".txt";
  static std::mutex& mutex = child_unlocked_mutex();
  static auto* known = new std::map<std::string, std::vector<std::string>>();
  std::optional<std::vector<std::string>> command;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto found = known->find(note); found != known->end()) command = found->second;
  }
  bool from_note = false;
  bool learned = false;
  if (!command) {
    if (std::optional<std::string> text = cache.read_note(note)) {
      std::vector<std::string> lines = lines_of(*text);
      if (std::count(lines.begin(), lines.end(), kOutputSlot) == 1 &&
          std::count(lines.begin(), lines.end(), kObjectSlot) == 1) {
        command = std::move(lines);
        from_note = true;
      }
    }
  }
  auto learn = [&] {
    command = learn_link_command(r, output, object);
    if (!command) return;
    learned = true;
    std::string text;
    for (const std::string& arg : *command) text += arg + "\n";
    cache.write_note(note, text);
  };
  if (!command) learn();
  if (!command) {  // a driver whose link command cannot be read links by itself
    std::vector<std::string> argv{r.compiler->program};
    argv.insert(argv.end(), r.link_flags.begin(), r.link_flags.end());
    argv.insert(argv.end(), {"-o", output, object});
    return run_process(argv, compiler_limits());
  }
  ProcessResult result = run_link(*command, output, object);
  if (result.started && result.exit_code != 0 && !result.timed_out && !result.stopped &&
      from_note) {
    learn();  // a note from before the system's libraries moved: learned again
    if (command) result = run_link(*command, output, object);
  }
  // Kept for this process once it linked, or once the driver gave it: a kernel
  // that does not link (an undefined function) fails with a command it learned
  // just now, and its retries need not ask the driver again.
  if (command && (result.exit_code == 0 || learned)) {
    std::lock_guard<std::mutex> lock(mutex);
    known->emplace(note, *command);
  }
  return result;
}

}  // namespace

std::string compile_error(const std::string& kernel, const std::string& entry,
                          const std::string& backend, const std::string& what) {
  return std::string(kCompileErrorMarker) + "kernel '" + kernel + "' (entry " + entry +
         ") does not compile for the " + backend + " backend:\n" + what;
}

std::string cache_key(const std::string& what, const std::vector<std::string>& parts) {
  Sha256 sha;
  sha.update("coreai_torch " + what + "\n");
  for (const std::string& part : parts) sha.update(std::to_string(part.size())).update(":").update(part);
  return sha.hex_digest();
}

CompileRequest kernel_request(std::string kernel, std::string entry, std::string backend,
                              std::string suffix, std::string source_suffix,
                              const Compiler& compiler, std::vector<std::string> language_flags,
                              std::string rendering) {
  CompileRequest r;
  r.kernel = std::move(kernel);
  r.entry = std::move(entry);
  r.backend = std::move(backend);
  r.suffix = std::move(suffix);
  r.source_suffix = std::move(source_suffix);
  r.compiler = &compiler;
  // The compiler proper runs inside the driver's process rather than in a
  // second one (some distributions' clang spawns it): each start of clang
  // loads and relocates LLVM's shared libraries, tens of milliseconds that
  // would be a good part of a small kernel's compile with the prelude
  // precompiled.
  language_flags.insert(language_flags.begin(), "-fintegrated-cc1");
  if (source::metal_fidelity_enabled()) {
    const std::vector<std::string> fidelity = source::fidelity_compile_flags(rendering, r.entry);
    language_flags.insert(language_flags.end(), fidelity.begin(), fidelity.end());
  }
  r.language_flags = std::move(language_flags);
  r.rendering = std::move(rendering);
  return r;
}

std::string artifact_key(const CompileRequest& r) {
  std::vector<std::string> parts{r.key_salt, r.compiler->identity};
  for (const auto* flags : {&r.language_flags, &r.codegen_flags, &r.output_flags, &r.link_flags}) {
    parts.insert(parts.end(), flags->begin(), flags->end());
  }
  parts.push_back(headers_digest(msl_directory(r.backend)));
  parts.push_back(r.translation_unit);
  return cache_key(r.backend + " kernel", parts);
}

CachedArtifact compile(const CompileRequest& r, bool read_payload, bool fresh) {
  const CacheDir& cache = CacheDir::current(r.backend);
  cache_limit_bytes();  // a bad COREAI_TORCH_CACHE_MAX_BYTES is refused before compiling
  // What Metal refuses is refused before anything is compiled (metal_fidelity.h).
  const bool fidelity = source::metal_fidelity_enabled();
  if (fidelity) {
    source::refuse_non_metal(r.kernel, source::find_non_metal_constructs(r.rendering));
  }
  const std::string msl = msl_directory(r.backend);
  const std::string key = artifact_key(r);
  const std::string name = key + r.suffix;
  std::optional<CachedArtifact> hit =
      fresh ? std::nullopt : open_sealed(cache, name, key, read_payload);
  if (hit) {
    counters(r.backend).disk_hits++;
    cache.note_in_use(name);
    hit->cached = true;
    return std::move(*hit);
  }

  // Compiled under private temporary names, then sealed and renamed: a
  // concurrent process compiling the same kernel renames an equivalent file
  // over it, and nobody ever reads a half-written one.
  const std::string unit = cache.temporary(key, r.source_suffix);
  const std::string out = cache.temporary(key, r.suffix);
  // The object a linking target's compiler writes, beside the artifact with
  // the same stem (the compiler names its side files, like -fstack-usage's
  // `.su`, after it).
  const std::string object = r.link_flags.empty() ? out : out.substr(0, out.rfind('.')) + ".o";
  auto remove_temporaries = [&] {
    cache.remove(unit);
    cache.remove(out);
    cache.remove(object);
  };
  cache.write_new(unit, r.translation_unit, r.kernel);
  const std::string pch = prelude(r, cache, msl);
  std::vector<std::string> argv = compile_argv(r, cache, msl, pch, r.output_flags, unit, object);
  counters(r.backend).compiles++;
  ProcessResult result = run_process(argv, compiler_limits());
  if (!pch.empty() && result.started && result.exit_code != 0 &&
      mentions_unusable_pch(result.output)) {
    cache.remove(pch);  // ours, and of no use: built again for the next kernel
    cache.remove(object);
    argv = compile_argv(r, cache, msl, "", r.output_flags, unit, object);
    result = run_process(argv, compiler_limits());
  }
  if (!r.link_flags.empty() && result.started && result.exit_code == 0) {
    // The compiler's remarks (the recursion check's source) stay in the output.
    const std::string compiled = std::move(result.output);
    result = link(r, cache, cache.path_of(out), cache.path_of(object));
    result.output = compiled + result.output;
    cache.remove(object);
  }
  if (!result.started || result.exit_code != 0) {
    remove_temporaries();
    // The inliner's remarks (the recursion check's source) are not errors.
    ProcessResult shown = result;
    shown.output = source::without_remarks(result.output);
    throw_compile_failure(shown, r.kernel, r.compiler->program,
                          [&] { return compile_error(r.kernel, r.entry, r.backend, shown.output); });
  }
  cache.make_private(out);
  SealNotes notes;
  try {
    if (fidelity) source::refuse_non_metal(r.kernel, source::recursion_in_remarks(result.output));
    if (r.finish) notes = r.finish(r, cache, out, unit);
  } catch (...) {
    remove_temporaries();
    throw;
  }
  // Opened before the rename: the caller gets this very file whatever
  // happens to the name afterwards.
  std::optional<Fd> fd = cache.open_entry(out);
  publish(cache, out, name, key, notes, r.kernel);
  try {
    publish(cache, unit, key + r.source_suffix, key, SealNotes{}, r.kernel);
  } catch (const c10::Error&) {
    cache.remove(unit);  // the kept source is only for reading what was compiled
  }
  cache.note_in_use(name);
  cache.evict();
  CachedArtifact compiled;
  compiled.name = name;
  compiled.notes = notes;
  if (fd) {
    const std::string file = CacheDir::read_all(fd->get());
    if (read_payload) compiled.payload = file.substr(0, file.size() - seal_line_bytes());
    compiled.fd = std::move(*fd);
  }
  TORCH_CHECK(compiled.fd, "kernel '", r.kernel, "': the compiled kernel vanished from the cache ",
              "directory ", cache.path(), " while it was being stored");
  return compiled;
}

std::optional<std::string> cached_blob(const std::string& backend, const std::string& key,
                                       const std::string& suffix) {
  const CacheDir& cache = CacheDir::current(backend);
  std::optional<CachedArtifact> hit = open_sealed(cache, key + suffix, key, true);
  if (!hit) return std::nullopt;
  counters(backend).disk_hits++;
  cache.note_in_use(key + suffix);
  return std::move(hit->payload);
}

void store_blob(const std::string& backend, const std::string& kernel, const std::string& key,
                const std::string& suffix, const std::string& bytes) {
  const CacheDir& cache = CacheDir::current(backend);
  const std::string tmp = cache.temporary(key, suffix);
  try {
    cache.write_new(tmp, bytes, kernel);
    publish(cache, tmp, key + suffix, key, SealNotes{}, kernel);
  } catch (const c10::Error&) {
    return;  // only a later process's compile is lost
  }
  cache.note_in_use(key + suffix);
  cache.evict();
}

std::string msl_directory(const std::string& backend) {
  if (const char* env = std::getenv("COREAI_TORCH_MSL_DIR"); env != nullptr && *env != '\0') {
    TORCH_CHECK(is_file(std::string(env) + "/coreai_msl.h"), "coreai_torch ", backend,
                " backend: COREAI_TORCH_MSL_DIR=", env, " does not contain coreai_msl.h");
    return env;
  }
  std::vector<std::string> tried;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&msl_directory), &info) != 0 && info.dli_fname) {
    const fs::path library = fs::absolute(fs::path(info.dli_fname)).parent_path();
    // An installed package keeps msl/ beside _C; an extension built in place
    // sits in the package directory of a source tree, whose csrc/msl it uses.
    for (const fs::path& candidate : {library / "msl", library.parent_path() / "csrc" / "msl"}) {
      if (is_file((candidate / "coreai_msl.h").string())) return candidate.string();
      tried.push_back(candidate.string());
    }
  }
#ifdef COREAI_TORCH_SOURCE_MSL_DIR
  if (is_file(std::string(COREAI_TORCH_SOURCE_MSL_DIR) + "/coreai_msl.h")) {
    return COREAI_TORCH_SOURCE_MSL_DIR;
  }
  tried.push_back(COREAI_TORCH_SOURCE_MSL_DIR);
#endif
  std::string looked;
  for (const std::string& t : tried) looked += "\n  " + t;
  TORCH_CHECK(false, "coreai_torch ", backend,
              " backend: cannot find the Metal standard library headers (coreai_msl.h). Looked "
              "in:",
              looked, "\nReinstall coreai_torch, or set COREAI_TORCH_MSL_DIR to its csrc/msl.");
}

const std::string& headers_digest(const std::string& msl_dir) {
  static std::mutex& mutex = child_unlocked_mutex();
  static auto* digests = new std::unordered_map<std::string, std::string>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = digests->find(msl_dir);
  if (it != digests->end()) return it->second;
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(msl_dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  Sha256 sha;
  for (const fs::path& file : files) {
    const Fd fd(open(file.c_str(), O_RDONLY | O_CLOEXEC));
    sha.update(fs::relative(file, msl_dir).generic_string()).update(std::string_view("\0", 1));
    sha.update(fd ? CacheDir::read_all(fd.get()) : std::string()).update(std::string_view("\0", 1));
  }
  return digests->emplace(msl_dir, sha.hex_digest()).first->second;
}

int64_t compile_count(const std::string& backend) { return counters(backend).compiles.load(); }
int64_t disk_cache_hits(const std::string& backend) { return counters(backend).disk_hits.load(); }

}  // namespace coreai_torch::jit
