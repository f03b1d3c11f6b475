// Debug mode gives a kernel copies of its tensors, each inside a guard zone
// of memory that belongs to no tensor, so that an access through a pointer
// past a tensor's ends (get_data_ptr() + n, &x[i] + k) lands there and is
// reported (access_checker.h) instead of touching a neighbouring tensor.
// Tensors that share memory (views of one storage) share one copy, so the
// kernel still sees them alias. After the launch the copies are written back.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <string>
#include <vector>

#include "coreai_torch.h"
#include "cpu/access_checker.h"
#include "specializations/launch_args.h"

namespace coreai_torch::cpu {

class DebugBuffers {
 public:
  // Copies the tensors of `args` (names from `record`).
  DebugBuffers(const KernelRecord& record, const LaunchArgs& args);
  ~DebugBuffers();
  DebugBuffers(const DebugBuffers&) = delete;
  DebugBuffers& operator=(const DebugBuffers&) = delete;

  // The data pointer the kernel gets for tensor argument `j` (in order).
  void* pointer(size_t j) const { return pointers_[j]; }
  // The tensors as the access checker sees them.
  const std::vector<CheckedBuffer>& checked() const { return checked_; }
  // The results, as views of their copies (for the unwritten-result check).
  const std::vector<at::Tensor>& results() const { return results_; }
  // Writes every copy back into the tensor memory it was made from.
  void copy_back() const;

 private:
  struct Copy {
    unsigned char* original;  // the first byte of the tensors' memory it copies
    size_t bytes;
    unsigned char* block;     // guard + copy + guard
    size_t guard;
  };
  std::vector<Copy> copies_;
  std::vector<void*> pointers_;
  std::vector<CheckedBuffer> checked_;
  std::vector<at::Tensor> results_;
};

}  // namespace coreai_torch::cpu
