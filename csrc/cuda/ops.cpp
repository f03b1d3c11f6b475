// Test and tool hooks of the CUDA backend, as operators of the coreai_torch
// library (docs/internals.md §2): counters and the translation unit of a
// registration. (Its PTX, which needs no GPU, is _C._cuda_ptx.)
#include <torch/library.h>

#include "coreai_torch.h"
#include "cuda/target.h"

namespace coreai_torch::cuda {
namespace {

int64_t compile_count_op() { return compile_count(); }
int64_t disk_cache_hits_op() { return disk_cache_hits(); }
int64_t loaded_modules_op() { return loaded_modules(); }
std::string translation_unit_op(int64_t handle) {
  return translation_unit(*kernel_record(handle), false, LaunchForm{});
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(coreai_torch, m) {
  m.def("cuda_compile_count() -> int", &compile_count_op);
  m.def("cuda_disk_cache_hits() -> int", &disk_cache_hits_op);
  m.def("cuda_loaded_modules() -> int", &loaded_modules_op);
  m.def("cuda_translation_unit(int handle) -> str", &translation_unit_op);
}

}  // namespace coreai_torch::cuda
