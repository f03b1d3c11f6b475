#include "cpu/compiler.h"

#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>

#include "cpu/kernel_guard.h"
#include "cpu/metal_tokens.h"
#include "cpu/sha256.h"
#include "cpu/subprocess.h"

namespace coreai_torch::cpu {
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

// Empty if `program` is usable, else why not.
std::string check(const std::string& program, const std::string& scratch_dir,
                  std::string& identity) {
  const ProcessResult version = run_process({program, "--version"}, compiler_limits());
  if (version.stopped) return "interrupted";
  if (version.timed_out) return "`--version` did not finish within the compile timeout";
  if (!version.started) return "not found";
  if (version.exit_code != 0) return "`--version` failed";
  if (version.output.find("clang version") == std::string::npos) {
    return "not clang (" + first_line(version.output) + ")";
  }
  identity = version.output;

  std::random_device entropy;
  const std::string probe = scratch_dir + "/probe-" + std::to_string(getpid()) + "-" +
                            std::to_string(entropy()) + ".cpp";
  {
    std::ofstream out(probe);
    out << kProbeSource;
    if (!out) return "cannot write the probe source " + probe;
  }
  std::vector<std::string> argv{program};
  for (const std::string& flag : kernel_compile_flags()) {
    // Code generation flags are irrelevant to a syntax check.
    if (flag != "-shared" && flag != "-fPIC") argv.push_back(flag);
  }
  argv.insert(argv.end(), {"-fsyntax-only", "-x", "c++", probe});
  const ProcessResult syntax = run_process(argv, compiler_limits());
  std::remove(probe.c_str());
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
std::string memo_path(const std::string& program, const std::string& scratch_dir) {
  const std::string resolved = resolve_program(program);
  struct stat info {};
  if (resolved.empty() || stat(resolved.c_str(), &info) != 0) return {};
  Sha256 key;
  key.update("coreai_torch compiler check\n").update(resolved).update("\n");
  key.update(std::to_string(info.st_dev) + ":" + std::to_string(info.st_ino) + ":" +
             std::to_string(info.st_size) + ":" + std::to_string(info.st_mtime) + "\n");
  key.update(kProbeSource);
  for (const std::string& flag : kernel_compile_flags()) key.update(flag).update("\n");
  return scratch_dir + "/compiler-" + key.hex_digest().substr(0, 32) + ".txt";
}

std::optional<std::string> read_memo(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string identity((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (identity.find("clang version") == std::string::npos) return std::nullopt;
  return identity;
}

void write_memo(const std::string& path, const std::string& identity) {
  if (path.empty()) return;
  std::random_device entropy;
  const std::string tmp = path + ".tmp-" + std::to_string(getpid()) + "-" +
                          std::to_string(entropy());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << identity;
    if (!out) {
      std::remove(tmp.c_str());
      return;  // only an optimisation: the next process checks again
    }
  }
  chmod(tmp.c_str(), 0600);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
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

const std::vector<std::string>& kernel_compile_flags() {
  static const std::vector<std::string> flags{
      "-std=c++23",
      "-O2",
      "-fPIC",
      "-shared",
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

const std::vector<std::string>& loop_mode_flags() {
  static const std::vector<std::string> flags{"-DCOREAI_CPU_FIBER_MODE=0"};
  return flags;
}

const std::vector<std::string>& debug_compile_flags() {
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
  if (const LaunchScope* scope = LaunchScope::current()) {
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
  if (run.stopped) throw_interrupted("kernel '" + kernel + "': compiling was interrupted (SIGINT)");
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
  for (const std::string_view line : split_lines(output)) {
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

const Compiler& find_compiler(const std::string& kernel, const std::string& scratch_dir) {
  static std::mutex mutex;
  static std::optional<Compiler> found;
  std::lock_guard<std::mutex> lock(mutex);
  if (found) return *found;

  std::string tried;
  for (const Candidate& c : candidates()) {
    const std::string memo = memo_path(c.program, scratch_dir);
    if (std::optional<std::string> identity = read_memo(memo)) {
      found = Compiler{c.program, *identity};
      return *found;
    }
    std::string identity;
    const std::string why_not = check(c.program, scratch_dir, identity);
    if (const LaunchScope* scope = LaunchScope::current(); scope && scope->interrupted()) {
      throw_interrupted("kernel '" + kernel +
                        "': interrupted (SIGINT) while looking for a C++ compiler");
    }
    if (why_not.empty()) {
      write_memo(memo, identity);
      found = Compiler{c.program, identity};
      return *found;
    }
    tried += "\n  " + c.program + " (" + c.origin + "): " + why_not;
    if (c.origin == "$COREAI_TORCH_CXX") {
      TORCH_CHECK(false, "kernel '", kernel, "': COREAI_TORCH_CXX names ", c.program,
                  ", which the CPU backend cannot use:", tried,
                  "\nPoint COREAI_TORCH_CXX at clang++ 15 or newer, or unset it to search PATH.");
    }
  }
  TORCH_CHECK(false, "kernel '", kernel,
              "': the CPU backend compiles Metal kernels with clang++ (version 15 or newer, "
              "C++23), and no usable compiler was found. Tried:",
              tried,
              "\nInstall one: `apt-get install clang-19` (Debian/Ubuntu), `dnf install clang` "
              "(Fedora), or the Xcode command line tools (`xcode-select --install`) on macOS; "
              "or set COREAI_TORCH_CXX to the path of a clang++ binary.");
}

}  // namespace coreai_torch::cpu
