#include "cpu/stack_usage.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace coreai_torch::cpu {
namespace {

struct Frame {
  std::string function;
  int64_t bytes;
  bool dynamic;  // unbounded: alloca or a variable-length array
};

std::vector<Frame> parse(const std::string& su_text) {
  std::vector<Frame> frames;
  std::istringstream lines(su_text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t tab = line.find('\t');
    const size_t tab2 = tab == std::string::npos ? tab : line.find('\t', tab + 1);
    if (tab2 == std::string::npos) continue;
    const size_t colon = line.rfind(':', tab);
    Frame f;
    f.function = line.substr(colon == std::string::npos ? 0 : colon + 1,
                             tab - (colon == std::string::npos ? 0 : colon + 1));
    f.bytes = std::strtoll(line.c_str() + tab + 1, nullptr, 10);
    const std::string qualifier = line.substr(tab2 + 1);
    f.dynamic = qualifier.find("dynamic") != std::string::npos &&
                qualifier.find("bounded") == std::string::npos;
    frames.push_back(std::move(f));
  }
  return frames;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

StackNeeds measure_stack_needs(const std::string& su_text, const std::string& kernel_entry) {
  const std::vector<Frame> frames = parse(su_text);
  // The kernel function in namespace metal, as clang mangles it.
  const std::string mangled_entry =
      "_ZN5metal" + std::to_string(kernel_entry.size()) + kernel_entry + "E";
  int64_t entry_frame = 0, run_thread = 0, run_group = 0, group_loops = 0, others = 0;
  bool dynamic = false;
  for (const Frame& f : frames) {
    dynamic = dynamic || f.dynamic;
    if (contains(f.function, "coreai_thread_body")) {
      run_thread = f.bytes;  // fiber mode: what each thread's fiber runs
    } else if (f.function == "coreai_cpu_kernel_run_group") {
      run_group = f.bytes;
    } else if (contains(f.function, "coreai_group_loop")) {
      group_loops += f.bytes;  // a copy of the loop compiled for another ISA
    } else if (f.function.rfind(mangled_entry, 0) == 0) {
      entry_frame = f.bytes;
    } else {
      others += f.bytes;
    }
  }
  if (dynamic) return {};
  // An entry point whose own frame is at least the kernel's has it inlined:
  // the kernel's frame is already inside the entry point's.
  auto chain = [&](int64_t entry_point) {
    return entry_point + others + (entry_point >= entry_frame ? 0 : entry_frame);
  };
  StackNeeds needs;
  needs.thread_bytes = chain(run_thread);
  needs.group_bytes = chain(run_group + group_loops);
  return needs;
}

}  // namespace coreai_torch::cpu
