// Answers questions to csrc/mps/launch_rules.h and csrc/mps/weak_cache.h, one
// per line of standard input, one answer line each, for
// tests/mps/test_mps_launch_rules.py (which holds the cases and the expected
// answers). Messages are printed with their newlines as "\n".
//
//   plan SIZES / STRIDES              -> copy=0|1 strides=A,B,...
//   bind HAS_BUFFER NUMEL OFFSET ELEMENT_SIZE -> placeholder=0|1 offset=BYTES
//   reason MAJOR MINOR PATCH MPS DEVICE FAMILY GPU NAME...  -> the reason, or "(none)"
//   failure FINAL CODE OS_MAJOR DOMAIN MATH_MODE MESSAGE... -> remembered=0|1 TEXT
//   cache get KEY HOLD | cache release | cache size         -> built|found, released, N
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mps/launch_rules.h"
#include "mps/weak_cache.h"

using namespace coreai_torch;
using namespace coreai_torch::mps;

namespace {

std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

std::string rest_of(std::istringstream& in) {
  std::string rest;
  std::getline(in >> std::ws, rest);
  return rest;
}

std::string join(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out;
}

}  // namespace

int main() {
  WeakCache<int> cache;
  std::vector<std::shared_ptr<const int>> held;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "plan") {
      std::vector<int64_t> sizes, strides;
      std::string word;
      auto* into = &sizes;
      while (in >> word) {
        if (word == "/") {
          into = &strides;
        } else {
          into->push_back(std::stoll(word));
        }
      }
      const InputPlan plan = plan_input(sizes, strides);
      std::cout << "copy=" << plan.copy << " strides=" << join(plan.strides) << "\n";
    } else if (command == "bind") {
      int has_buffer = 0;
      int64_t numel = 0, offset = 0, element_size = 0;
      in >> has_buffer >> numel >> offset >> element_size;
      const BufferBinding b = buffer_binding(has_buffer != 0, numel, offset, element_size);
      std::cout << "placeholder=" << b.placeholder << " offset=" << b.offset << "\n";
    } else if (command == "reason") {
      MachineFacts facts;
      int mps = 0, device = 0, family = 0;
      in >> facts.os_major >> facts.os_minor >> facts.os_patch >> mps >> device >> family;
      facts.mps_available = mps != 0;
      facts.has_device = device != 0;
      facts.metal4_family = family != 0;
      facts.gpu_name = rest_of(in);
      const std::string reason = unavailable_reason(facts);
      std::cout << (reason.empty() ? "(none)" : one_line(reason)) << "\n";
    } else if (command == "failure") {
      int final_failure = 0;
      int64_t code = 0, os_major = 0;
      std::string domain, math_mode;
      in >> final_failure >> code >> os_major >> domain >> math_mode;
      const std::string text =
          library_failure("k", final_failure != 0, domain, code, math_mode, rest_of(in), os_major);
      std::cout << "remembered=" << is_compile_error(text) << " " << one_line(text) << "\n";
    } else if (command == "cache") {
      std::string what;
      in >> what;
      if (what == "get") {
        std::string key;
        int hold = 0;
        in >> key >> hold;
        bool built = false;
        auto value = cache.get(key, [&] {
          built = true;
          return std::make_shared<const int>(1);
        });
        if (hold != 0) held.push_back(value);
        std::cout << (built ? "built" : "found") << "\n";
      } else if (what == "release") {
        held.clear();
        std::cout << "released\n";
      } else {
        std::cout << cache.size() << "\n";
      }
    } else {
      std::cout << "unknown command: " << command << "\n";
    }
  }
  return 0;
}
