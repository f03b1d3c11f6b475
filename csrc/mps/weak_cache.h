// WeakCache<Value>: shared values by key, held weakly. A value lives as long as
// something outside the cache holds it; the cache only lets a second holder
// find it. Entries whose value has gone are erased: the one a lookup finds
// dead at once, the others when the next value is built. So the cache holds
// the live values plus those that died since the last build; for the MPS
// pipeline cache, whose keys are whole kernel sources, that bounds its memory
// by what live kernels use. Plain C++ (tests/mps/test_mps_launch_rules.py
// checks it on any machine).
#pragma once

#include <cstddef>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace coreai_torch::mps {

template <class Value>
class WeakCache {
 public:
  // The live value of `key`, or the one `build()` (which returns a
  // shared_ptr<const Value>) makes. One lock covers lookups and builds, so
  // two callers never build the same key twice. A build that throws caches
  // nothing.
  template <class Build>
  std::shared_ptr<const Value> get(const std::string& key, Build&& build) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto known = entries_.find(key);
    if (known != entries_.end()) {
      if (std::shared_ptr<const Value> alive = known->second.lock()) return alive;
      entries_.erase(known);
    }
    std::shared_ptr<const Value> value = build();
    for (auto entry = entries_.begin(); entry != entries_.end();) {
      entry = entry->second.expired() ? entries_.erase(entry) : std::next(entry);
    }
    entries_.emplace(key, value);
    return value;
  }

  // Entries held, live or not yet erased.
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::weak_ptr<const Value>> entries_;
};

}  // namespace coreai_torch::mps
