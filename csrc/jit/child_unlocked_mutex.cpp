#include "jit/child_unlocked_mutex.h"

#include <pthread.h>

#include <array>
#include <atomic>
#include <new>

#include <c10/util/Exception.h>

namespace coreai_torch::jit {
namespace {

// A handful are made, each once (function-local statics).
constexpr size_t kMaxMutexes = 32;
std::array<std::atomic<std::mutex*>, kMaxMutexes> g_mutexes{};
std::atomic<size_t> g_count{0};

void remake_in_child() {
  const size_t n = g_count.load(std::memory_order_acquire);
  for (size_t i = 0; i < n && i < kMaxMutexes; ++i) {
    if (std::mutex* m = g_mutexes[i].load(std::memory_order_acquire)) new (m) std::mutex();
  }
}

}  // namespace

std::mutex& child_unlocked_mutex() {
  static const int installed = pthread_atfork(nullptr, nullptr, remake_in_child);
  TORCH_CHECK(installed == 0, "coreai_torch: pthread_atfork failed");
  auto* m = new std::mutex();  // never destroyed: children may use it at exit
  const size_t slot = g_count.fetch_add(1, std::memory_order_acq_rel);
  TORCH_CHECK(slot < kMaxMutexes, "coreai_torch: too many child_unlocked_mutex()");
  g_mutexes[slot].store(m, std::memory_order_release);
  return *m;
}

}  // namespace coreai_torch::jit
