#include "cpu/compiler.h"

#include <unistd.h>

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>

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
  const ProcessResult version = run_process({program, "--version"});
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
  const ProcessResult syntax = run_process(argv);
  std::remove(probe.c_str());
  if (syntax.exit_code != 0) {
    return first_line(version.output) + " cannot compile the kernel headers' C++23: " +
           first_line(syntax.output);
  }
  return {};
}

}  // namespace

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
      // Kernel code has no exceptions and must not unwind through fibers.
      "-fno-exceptions",
      "-fvisibility=hidden",
      // [[kernel]], [[buffer(i)]], [[thread_position_in_grid]] ... mean
      // nothing to a C++ compiler; the JIT binds parameters by position.
      "-Wno-unknown-attributes",
  };
  return flags;
}

const Compiler& find_compiler(const std::string& kernel, const std::string& scratch_dir) {
  static std::mutex mutex;
  static std::optional<Compiler> found;
  std::lock_guard<std::mutex> lock(mutex);
  if (found) return *found;

  std::string tried;
  for (const Candidate& c : candidates()) {
    std::string identity;
    const std::string why_not = check(c.program, scratch_dir, identity);
    if (why_not.empty()) {
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
