// Runs a program (no shell) and collects what it prints.
#pragma once

#include <string>
#include <vector>

namespace coreai_torch::cpu {

struct ProcessResult {
  bool started = false;  // false: the program could not be executed at all
  int exit_code = -1;    // -1 when it did not exit normally (killed by a signal)
  std::string output;    // stdout and stderr, interleaved
  std::string error;     // why it could not be started
};

// argv[0] is looked up in PATH when it contains no '/'.
ProcessResult run_process(const std::vector<std::string>& argv);

}  // namespace coreai_torch::cpu
