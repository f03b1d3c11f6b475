// Where a backend keeps what it compiled for one registered specialization:
// one slot per backend in the record (KernelRecord::artifacts), filled by the
// first launch on that backend and released with the record.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
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
  template <class Build, class IsFinal>
  const Artifact& get(Build&& build, IsFinal&& is_final) {
    if (!ready_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!ready_.load(std::memory_order_relaxed)) {
        try {
          artifact_ = build();
        } catch (const c10::Error& e) {
          if (!is_final(e.msg())) throw;
          error_ = e.msg();
        }
        ready_.store(true, std::memory_order_release);
      }
    }
    TORCH_CHECK(error_.empty(), error_);
    return *artifact_;
  }

  // Whether a launch would find the artifact (or its final error) without building.
  bool ready() const { return ready_.load(std::memory_order_acquire); }

  // The artifact if it is built, else nullptr.
  const Artifact* built() const { return ready() ? artifact_.get() : nullptr; }

 private:
  std::mutex mutex_;
  std::atomic<bool> ready_{false};
  // shared_ptr: the artifact type may be incomplete where records are
  // destroyed, and a backend may share one artifact between records.
  std::shared_ptr<const Artifact> artifact_;
  std::string error_;
};

}  // namespace coreai_torch
