// Where a backend keeps what it compiled for one registered specialization:
// one slot per backend in the record (KernelRecord::artifacts), filled by the
// first launch on that backend and released with the record.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <c10/util/Exception.h>

namespace coreai_torch {

template <class Artifact>
class ArtifactSlot {
 public:
  // The artifact, built by `build()` (which returns a shared_ptr<const
  // Artifact>) on first use; concurrent callers wait for that one build. A
  // build failure whose message `is_final(message)` accepts (a compile error)
  // is remembered and raised again by every later call without rebuilding;
  // any other failure leaves the slot empty, so a later call tries again.
  //
  // No lock is held while building: a process that forks while one of its
  // threads builds would give the child a lock no thread of the child ever
  // releases. A child finds the build marked as its parent's (by process id)
  // and builds afresh.
  template <class Build, class IsFinal>
  const Artifact& get(Build&& build, IsFinal&& is_final) {
    for (int waited = 0; state_.load(std::memory_order_acquire) != kReady;) {
      int empty = kEmpty;
      if (state_.compare_exchange_strong(empty, kBuilding, std::memory_order_acq_rel)) {
        builder_.store(getpid(), std::memory_order_release);
        run_build(build, is_final);
        break;
      }
      if (empty == kBuilding && builder_.load(std::memory_order_acquire) != getpid()) {
        // The builder was a thread of the process this one was forked from.
        int building = kBuilding;
        state_.compare_exchange_strong(building, kEmpty, std::memory_order_acq_rel);
        continue;
      }
      // Another thread builds (a compile: a fraction of a second); poll gently.
      std::this_thread::sleep_for(std::chrono::microseconds(waited++ < 100 ? 50 : 1000));
    }
    TORCH_CHECK(error_.empty(), error_);
    return *artifact_;
  }

  // Whether a launch would find the artifact (or its final error) without building.
  bool ready() const { return state_.load(std::memory_order_acquire) == kReady; }

  // The artifact if it is built, else nullptr.
  const Artifact* built() const { return ready() ? artifact_.get() : nullptr; }

 private:
  static constexpr int kEmpty = 0, kBuilding = 1, kReady = 2;

  template <class Build, class IsFinal>
  void run_build(Build& build, IsFinal& is_final) {
    try {
      artifact_ = build();
    } catch (const c10::Error& e) {
      if (!is_final(e.msg())) {
        state_.store(kEmpty, std::memory_order_release);  // a later call tries again
        throw;
      }
      error_ = e.msg();
    } catch (...) {
      state_.store(kEmpty, std::memory_order_release);
      throw;
    }
    state_.store(kReady, std::memory_order_release);
  }

  std::atomic<int> state_{kEmpty};
  std::atomic<pid_t> builder_{0};
  // shared_ptr: the artifact type may be incomplete where records are
  // destroyed, and a backend may share one artifact between records.
  std::shared_ptr<const Artifact> artifact_;
  std::string error_;
};

}  // namespace coreai_torch
