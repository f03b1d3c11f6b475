// Runs a program (no shell) and collects what it prints.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace coreai_torch::jit {

struct ProcessResult {
  bool started = false;    // false: the program could not be executed at all
  int exit_code = -1;      // -1 when it did not exit normally
  int term_signal = 0;     // the signal that ended it, if one did
  bool timed_out = false;  // stopped by us: it ran past the time limit
  bool stopped = false;    // stopped by us: `should_stop` said so
  std::string output;      // stdout and stderr, interleaved
  std::string error;       // why it could not be started
};

struct ProcessLimits {
  double timeout_seconds = 0;         // 0: no limit
  std::function<bool()> should_stop;  // polled about every 50 ms; empty: never
};

// argv[0] is looked up in PATH when it contains no '/'. The program runs in a
// process group of its own, so that stopping it (time limit, `should_stop`)
// also stops what it started (clang's driver runs the compiler and the linker
// as children).
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessLimits& limits = {});

}  // namespace coreai_torch::jit
