// Problems found while a launch runs. Kernel code cannot throw (its threads
// may be fibers, and exceptions do not cross the C boundary of a kernel
// library), so problems are recorded here and raised once the launch is over.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace coreai_torch::cpu {

class LaunchState {
 public:
  // `tensors`: base pointer and name of every tensor argument, for messages.
  LaunchState(std::string kernel, std::vector<std::pair<const void*, std::string>> tensors)
      : kernel_(std::move(kernel)), tensors_(std::move(tensors)) {}

  const std::string& kernel() const { return kernel_; }
  // Another base pointer of a tensor argument (debug mode's copy of it).
  void name_tensor(const void* pointer, std::string name) {
    tensors_.emplace_back(pointer, std::move(name));
  }

  // Records a problem; the first one is reported, the rest are counted.
  void fail(std::string message);
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  // The report: the first problem, plus how many more there were.
  std::string report() const;

  // Kernel code was abandoned (a fault, or SIGINT when `interrupted`): the
  // launch's threads start no further threadgroups.
  void stop(bool interrupted) {
    if (interrupted) interrupted_.store(true, std::memory_order_relaxed);
    stopped_.store(true, std::memory_order_relaxed);
  }
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }
  bool interrupted() const { return interrupted_.load(std::memory_order_relaxed); }

  // Debug mode: a tensor view was indexed outside its extents.
  void out_of_bounds(const void* base, uint32_t rank, const int64_t* index, const int32_t* extents,
                     const uint32_t* thread_position);

  // The launch whose threads the calling OS thread is running (nullptr if none).
  static LaunchState* current();
  static void set_current(LaunchState* state);

 private:
  std::string tensor_name(const void* base) const;

  std::string kernel_;
  std::vector<std::pair<const void*, std::string>> tensors_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<bool> interrupted_{false};
  mutable std::mutex mutex_;
  std::string first_;
  int64_t more_ = 0;
};

// Sets LaunchState::current() for the lifetime of a scope.
class CurrentLaunch {
 public:
  explicit CurrentLaunch(LaunchState* state) : previous_(LaunchState::current()) {
    LaunchState::set_current(state);
  }
  ~CurrentLaunch() { LaunchState::set_current(previous_); }
  CurrentLaunch(const CurrentLaunch&) = delete;
  CurrentLaunch& operator=(const CurrentLaunch&) = delete;

 private:
  LaunchState* previous_;
};

}  // namespace coreai_torch::cpu
