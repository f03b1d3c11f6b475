#include "jit/compiler.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "cpu/kernel_guard.h"
#include "source/metal_tokens.h"
#include "jit/cache_dir.h"
#include "jit/child_unlocked_mutex.h"
#include "jit/sha256.h"
#include "jit/subprocess.h"

namespace coreai_torch::jit {
namespace {

// Exercises what the msl headers need from the compiler.
constexpr const char* kProbeSource = R"(#if !defined(__clang__) || __clang_major__ < 15
#error "clang 15 or newer is required"
#endif
struct Grid { int operator[](int a, int b) const { return a * 10 + b; } };
typedef float probe_float4 __attribute__((ext_vector_type(4)));
int probe() {
  Grid g;
  _Float16 h = 1.5f16;
  h = h * h;
  __bf16 b = 1.0f;
  b = b + b;
  probe_float4 v = 2.0f;
  return g[1, 2] + static_cast<int>(h) + static_cast<int>(static_cast<float>(b)) +
         static_cast<int>(v.w);
}
)";

struct Candidate {
  std::string program;
  std::string origin;  // "$COREAI_TORCH_CXX", "$CXX" or "PATH"
};

std::vector<Candidate> candidates() {
  std::vector<Candidate> out;
  if (const char* cxx = std::getenv("COREAI_TORCH_CXX"); cxx && *cxx) {
    out.push_back({cxx, "$COREAI_TORCH_CXX"});
    return out;  // an explicit choice is not second-guessed
  }
  if (const char* cxx = std::getenv("CXX"); cxx && *cxx) out.push_back({cxx, "$CXX"});
  for (int major = 19; major >= 15; --major) {
    out.push_back({"clang++-" + std::to_string(major), "PATH"});
  }
  out.push_back({"clang++", "PATH"});
  return out;
}

std::string first_line(const std::string& text) {
  const auto end = text.find('\n');
  return text.substr(0, end == std::string::npos ? text.size() : end);
}

// The flags of the probe: the language the kernel headers are written in.
// Never destroyed: the early search (start_compiler_check) may still read it
// while the process exits.
const std::vector<std::string>& probe_flags() {
  static const auto* flags =
      new std::vector<std::string>{"-std=c++23", "-fsyntax-only", "-x", "c++"};
  return *flags;
}

// Empty if `program` is usable, else why not.
std::string check(const std::string& program, const CacheDir& cache, const std::string& kernel,
                  std::string& identity) {
  // `--version` and the probe run side by side: a process whose cache holds
  // no note of the check waits for both before its first compile, and each
  // costs a compiler start-up (about 25 ms for Debian's clang 19, which loads
  // libLLVM).
  const std::string probe = cache.temporary(sha256_hex(program), ".cpp");
  cache.write_new(probe, kProbeSource, kernel);
  std::vector<std::string> argv{program};
  argv.insert(argv.end(), probe_flags().begin(), probe_flags().end());
  argv.push_back(cache.path_of(probe));
  const ProcessLimits limits = compiler_limits();
  std::future<ProcessResult> probing =
      std::async(std::launch::async, [&argv, &limits] { return run_process(argv, limits); });
  const ProcessResult version = run_process({program, "--version"}, limits);
  const ProcessResult syntax = probing.get();
  cache.remove(probe);
  if (version.stopped) return "interrupted";
  if (version.timed_out) return "`--version` did not finish within the compile timeout";
  if (!version.started) return "not found";
  if (version.exit_code != 0) return "`--version` failed";
  if (version.output.find("clang version") == std::string::npos) {
    return "not clang (" + first_line(version.output) + ")";
  }
  identity = version.output;
  if (syntax.exit_code != 0) {
    return first_line(version.output) + " cannot compile the kernel headers' C++23: " +
           first_line(syntax.output);
  }
  return {};
}

// A check costs two compiler start-ups (--version and the probe), which would
// dominate a new process whose kernels are all in the disk cache. A passed
// check is therefore remembered in the cache directory, keyed by the compiler
// binary's path and file identity (device, inode, size, modification time),
// the probe and the flags: replacing or upgrading the compiler changes the key.
std::string memo_name(const std::string& program) {
  const std::string resolved = resolve_program(program);
  struct stat info {};
  if (resolved.empty() || stat(resolved.c_str(), &info) != 0) return {};
  Sha256 key;
  key.update("coreai_torch compiler check\n").update(resolved).update("\n");
  key.update(std::to_string(info.st_dev) + ":" + std::to_string(info.st_ino) + ":" +
             std::to_string(info.st_size) + ":" + std::to_string(info.st_mtime) + "\n");
  key.update(kProbeSource);
  for (const std::string& flag : probe_flags()) key.update(flag).update("\n");
  return "compiler-" + key.hex_digest().substr(0, 32) + ".txt";
}

std::optional<std::string> read_memo(const CacheDir& cache, const std::string& name) {
  if (name.empty()) return std::nullopt;
  std::optional<std::string> identity = cache.read_note(name);
  if (!identity || identity->find("clang version") == std::string::npos) return std::nullopt;
  return identity;
}

}  // namespace

std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

double compile_timeout_seconds() {
  constexpr double kDefaultSeconds = 300;
  const char* text = std::getenv("COREAI_TORCH_COMPILE_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefaultSeconds;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  TORCH_CHECK(end != text && *end == '\0' && seconds > 0 && seconds < 1e9,
              "COREAI_TORCH_COMPILE_TIMEOUT=", text,
              " is not a positive number of seconds; unset it for the default of ",
              kDefaultSeconds, " s");
  return seconds;
}

ProcessLimits compiler_limits() {
  ProcessLimits limits;
  limits.timeout_seconds = compile_timeout_seconds();
  if (const cpu::LaunchScope* scope = cpu::LaunchScope::current()) {
    limits.should_stop = [scope] { return scope->interrupted(); };
  }
  return limits;
}

namespace {

// Why a compiler run that did not succeed failed, for messages.
std::string describe_failed_run(const ProcessResult& run, const std::string& program) {
  if (run.timed_out) {
    return "the compiler (" + program + ") did not finish within " +
           std::to_string(static_cast<int64_t>(compile_timeout_seconds())) +
           " s and was stopped. Set COREAI_TORCH_COMPILE_TIMEOUT to a larger number of "
           "seconds if the kernel needs longer";
  }
  if (run.term_signal != 0) {
    return "the compiler (" + program + ") was killed by signal " +
           std::to_string(run.term_signal) + " (" + strsignal(run.term_signal) + ")";
  }
  return "the compiler (" + program + ") failed (exit code " + std::to_string(run.exit_code) +
         ") without reporting an error in the kernel's source (a full disk, a missing file "
         "or a crash can do this)";
}

}  // namespace

void throw_compile_failure(const ProcessResult& run, const std::string& kernel,
                           const std::string& program,
                           const std::function<std::string()>& compile_error) {
  if (run.stopped) cpu::throw_interrupted("kernel '" + kernel + "': compiling was interrupted (SIGINT)");
  TORCH_CHECK(run.started, "kernel '", kernel, "': cannot run the compiler ", program, ": ",
              run.error);
  // Only an error the compiler found in the source is a MetalCompileError
  // (remembered for the process); anything else is raised as it is and the
  // next call compiles again.
  if (!run.timed_out && run.term_signal == 0 && reports_source_error(run.output)) {
    TORCH_CHECK(false, compile_error());
  }
  TORCH_CHECK(false, "kernel '", kernel, "': ", describe_failed_run(run, program),
              ". Nothing was cached: the next call compiles again.",
              run.output.empty() ? "" : "\nCompiler output:\n", run.output);
}

bool reports_source_error(const std::string& output) {
  for (const std::string_view line : source::split_lines(output)) {
    // `file:line:column: error:` or `...: fatal error:`, with numbers for line and column.
    size_t at = line.find(": error:");
    if (at == std::string_view::npos) at = line.find(": fatal error:");
    if (at == std::string_view::npos) continue;
    const std::string_view place = line.substr(0, at);
    const size_t column = place.rfind(':');
    if (column == std::string_view::npos || column + 1 == place.size()) continue;
    const size_t row = place.rfind(':', column - 1);
    if (row == std::string_view::npos || row == 0) continue;
    auto digits = [](std::string_view s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      });
    };
    if (digits(place.substr(column + 1)) && digits(place.substr(row + 1, column - row - 1))) {
      return true;
    }
  }
  return false;
}

namespace {

// What looking through the candidates found: the first usable compiler, or
// why each one tried is not usable.
struct Search {
  std::optional<Compiler> found;
  std::string tried;              // a line per refused candidate
  std::string refused_explicit;   // $COREAI_TORCH_CXX, when it names an unusable compiler
  bool interrupted = false;       // SIGINT stopped the launch that searched
};

// Checks the candidates in order, noting a passed check in `cache`.
Search search(const CacheDir& cache, const std::string& kernel) {
  Search s;
  for (const Candidate& c : candidates()) {
    const std::string memo = memo_name(c.program);
    if (std::optional<std::string> identity = read_memo(cache, memo)) {
      s.found = Compiler{c.program, *identity};
      return s;
    }
    std::string identity;
    const std::string why_not = check(c.program, cache, kernel, identity);
    if (const cpu::LaunchScope* scope = cpu::LaunchScope::current(); scope && scope->interrupted()) {
      s.interrupted = true;
      return s;
    }
    if (why_not.empty()) {
      if (!memo.empty()) cache.write_note(memo, identity);
      s.found = Compiler{c.program, identity};
      return s;
    }
    s.tried += "\n  " + c.program + " (" + c.origin + "): " + why_not;
    if (c.origin == "$COREAI_TORCH_CXX") {
      s.refused_explicit = c.program;
      return s;
    }
  }
  return s;
}

[[noreturn]] void throw_search_interrupted(const std::string& kernel) {
  cpu::throw_interrupted("kernel '" + kernel +
                         "': interrupted (SIGINT) while looking for a C++ compiler");
}

// The search started when the first kernel is defined (start_compiler_check):
// its thread, and its end, which a launch that needs a compiler waits for
// rather than checking the same compiler beside it. Both are forgotten in a
// forked child, which has no such thread.
std::mutex& early_search_mutex() {
  static std::mutex& mutex = child_unlocked_mutex();
  return mutex;
}
std::thread* early_search = nullptr;  // joined or detached at exit, never destroyed
std::shared_future<void> early_search_done;
// How long the exit waits for an early search still running.
constexpr int kExitWaitSeconds = 5;

// Waits until the early search (if any) has ended; a SIGINT of the launch
// stops the wait, not the search.
void await_early_search(const std::string& kernel) {
  std::shared_future<void> done;
  {
    std::lock_guard<std::mutex> lock(early_search_mutex());
    done = early_search_done;
  }
  if (!done.valid()) return;
  const cpu::LaunchScope* scope = cpu::LaunchScope::current();
  while (done.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
    if (scope != nullptr && scope->interrupted()) throw_search_interrupted(kernel);
  }
}

}  // namespace

const Compiler& find_compiler(const std::string& kernel, const std::string& backend,
                              const CacheDir& cache) {
  static std::mutex& mutex = child_unlocked_mutex();
  static std::optional<Compiler> found;
  std::lock_guard<std::mutex> lock(mutex);
  if (found) return *found;

  await_early_search(kernel);  // it noted what it found in the cache
  const Search s = search(cache, kernel);
  if (s.found) {
    found = s.found;
    return *found;
  }
  if (s.interrupted) throw_search_interrupted(kernel);
  TORCH_CHECK(s.refused_explicit.empty(), "kernel '", kernel, "': COREAI_TORCH_CXX names ",
              s.refused_explicit, ", which the ", backend, " backend cannot use:", s.tried,
              "\nPoint COREAI_TORCH_CXX at clang++ 15 or newer, or unset it to search PATH.");
  TORCH_CHECK(false, "kernel '", kernel,
              "': the ", backend, " backend compiles Metal kernels with clang++ (version 15 or newer, "
              "C++23), and no usable compiler was found. Tried:",
              s.tried,
              "\nInstall one: `apt-get install clang-19` (Debian/Ubuntu), `dnf install clang` "
              "(Fedora), or the Xcode command line tools (`xcode-select --install`) on macOS; "
              "or set COREAI_TORCH_CXX to the path of a clang++ binary.");
}

void start_compiler_check(const std::string& kernel) {
  std::lock_guard<std::mutex> lock(early_search_mutex());
  static bool started = false;  // a forked child inherits it: one search per process tree
  if (started) return;
  started = true;
  pthread_atfork(nullptr, nullptr, [] {
    early_search = nullptr;
    early_search_done = std::shared_future<void>();
  });
  auto ended = std::make_shared<std::promise<void>>();
  early_search_done = ended->get_future().share();
  early_search = new std::thread([kernel, ended] {
    try {
      (void)search(CacheDir::current("CPU"), kernel);
    } catch (...) {
      // The first launch searches again and reports what went wrong.
    }
    ended->set_value();
  });
}

void wait_for_compiler_check() {
  std::lock_guard<std::mutex> lock(early_search_mutex());
  if (early_search == nullptr || !early_search->joinable()) return;
  // A compiler that hangs would hold the exit for the compile timeout: after
  // a few seconds the search is left to end with the process. What it uses
  // outlives the process's static objects (the cache directories, the
  // probe's flags, its own end).
  if (early_search_done.wait_for(std::chrono::seconds(kExitWaitSeconds)) ==
      std::future_status::ready) {
    early_search->join();
  } else {
    early_search->detach();
  }
}

}  // namespace coreai_torch::jit
