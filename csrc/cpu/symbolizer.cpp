#include "cpu/symbolizer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "jit/compiler.h"
#include "cpu/target.h"
#include "jit/cache_dir.h"
#include "jit/compiler.h"
#include "source/metal_fidelity.h"
#include "jit/subprocess.h"

namespace coreai_torch::cpu {
namespace {

bool executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// The symbolizer of the compiler's own installation, else one on PATH; the
// second result is whether it is llvm-symbolizer (else addr2line).
std::pair<std::string, bool> find_tool() {
  const std::string compiler = jit::resolve_program(
      jit::find_compiler("(symbolizer)", "CPU", jit::CacheDir::current("CPU")).program);
  if (char* real = compiler.empty() ? nullptr : realpath(compiler.c_str(), nullptr)) {
    std::string dir(real);
    std::free(real);
    dir = dir.substr(0, dir.rfind('/'));
    if (executable(dir + "/llvm-symbolizer")) return {dir + "/llvm-symbolizer", true};
  }
  for (const char* name : {"llvm-symbolizer", "llvm-symbolizer-19", "llvm-symbolizer-18",
                           "llvm-symbolizer-17", "llvm-symbolizer-16", "llvm-symbolizer-15"}) {
    const std::string found = jit::resolve_program(name);
    if (!found.empty()) return {found, true};
  }
  const std::string addr2line = jit::resolve_program("addr2line");
  if (!addr2line.empty()) return {addr2line, false};
  return {{}, false};
}

std::string basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One frame ("/dir/src:12:5" or "/dir/src:12"), as the report names it.
std::string frame_name(const std::string& frame) { return basename(frame); }

CodeLocation locate(const std::vector<std::string>& frames) {
  CodeLocation loc;
  for (const std::string& f : frames) {
    loc.chain += f + "\n";
    const std::string name = frame_name(f);
    const std::string file = name.substr(0, name.find(':'));
    if (loc.user.empty() && source::is_user_file(file)) loc.user = name;
  }
  if (loc.user.empty()) {
    loc.user = frames.empty() || frames.front().starts_with("??")
                   ? std::string("an unknown place (no line table)")
                   : frame_name(frames.front()) + " (not in the kernel's source)";
  }
  return loc;
}

std::string hex(uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::vector<CodeLocation> symbolize(const std::string& library_path,
                                    const std::vector<uintptr_t>& offsets) {
  std::vector<CodeLocation> out(offsets.size());
  const auto [tool, llvm] = find_tool();
  if (tool.empty()) {
    for (CodeLocation& c : out) {
      c.user = "an unknown place (install llvm-symbolizer or addr2line for source lines)";
    }
    return out;
  }
  std::vector<std::string> argv{tool};
  if (llvm) {
    argv.insert(argv.end(), {"--obj=" + library_path, "--inlining", "--functions=none"});
  } else {
    argv.insert(argv.end(), {"-a", "-i", "-e", library_path});
  }
  for (uintptr_t o : offsets) argv.push_back(hex(o));
  jit::ProcessLimits limits;
  limits.timeout_seconds = 60;
  const jit::ProcessResult run = jit::run_process(argv, limits);
  // llvm-symbolizer: the frames of each address, then an empty line.
  // addr2line -a: the address, then its frames.
  std::istringstream lines(run.exit_code == 0 ? run.output : std::string());
  std::string line;
  std::vector<std::string> frames;
  size_t next = 0;
  auto flush = [&] {
    if (next < out.size()) out[next++] = locate(frames);
    frames.clear();
  };
  bool started = false;
  while (std::getline(lines, line)) {
    if (llvm) {
      if (line.empty()) {
        if (!frames.empty()) flush();
        continue;
      }
      frames.push_back(line);
    } else if (line.starts_with("0x")) {
      if (started) flush();
      started = true;
    } else {
      frames.push_back(line);
    }
  }
  if (!frames.empty() || (!llvm && started)) flush();
  for (size_t i = next; i < out.size(); ++i) out[i] = locate({});
  return out;
}

}  // namespace coreai_torch::cpu
