#include "cpu/launch_state.h"

#include <sstream>

namespace coreai_torch::cpu {
namespace {
thread_local LaunchState* tls_current = nullptr;
}  // namespace

LaunchState* LaunchState::current() { return tls_current; }
void LaunchState::set_current(LaunchState* state) { tls_current = state; }

void LaunchState::fail(std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failed_.load(std::memory_order_relaxed)) {
    first_ = std::move(message);
    failed_.store(true, std::memory_order_relaxed);
  } else {
    ++more_;
  }
}

std::string LaunchState::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = first_;
  if (more_ > 0) out += " (and " + std::to_string(more_) + " more like it in this launch)";
  return out;
}

std::string LaunchState::tensor_name(const void* base) const {
  for (const auto& [pointer, name] : tensors_) {
    if (pointer == base) return "'" + name + "'";
  }
  return "(a view not built from a kernel argument)";
}

void LaunchState::out_of_bounds(const void* base, uint32_t rank, const int64_t* index,
                                const int32_t* extents, const uint32_t* thread_position) {
  if (failed()) {  // only the first is described; count the rest cheaply
    std::lock_guard<std::mutex> lock(mutex_);
    ++more_;
    return;
  }
  std::ostringstream msg;
  const std::string name = tensor_name(base);
  msg << "kernel '" << kernel_ << "': out-of-bounds access to tensor " << name << ": index [";
  for (uint32_t d = 0; d < rank; ++d) msg << (d ? ", " : "") << index[d];
  msg << "] is outside its extents [";
  for (uint32_t d = 0; d < rank; ++d) msg << (d ? ", " : "") << extents[d];
  msg << "] (Metal order: dimension 0 is the last torch dimension, so the torch shape is [";
  for (uint32_t d = rank; d-- > 0;) msg << extents[d] << (d ? ", " : "");
  msg << "]), by the thread at thread_position_in_grid (" << thread_position[0] << ", "
      << thread_position[1] << ", " << thread_position[2] << "). The access was skipped.";
  fail(msg.str());
}

}  // namespace coreai_torch::cpu
