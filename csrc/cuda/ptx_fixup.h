// Repairs what clang 19's NVPTX backend gets wrong in the PTX it writes.
#pragma once

#include <string>
#include <vector>

namespace coreai_torch::cuda {

// The names of the 16-bit globals (half, bfloat) whose initial values the PTX
// spells as 64-bit float literals (`.b16 v = 0d7FF8000000000000`). LLVM 19
// prints a half or bfloat initializer that way and ptxas reads it as 0, so a
// `constexpr half` that a kernel takes the address of (MLX's sort keys its
// padding on a `static constexpr constant T init = NaN`) would be 0 on the GPU.
std::vector<std::string> misprinted_16bit_globals(const std::string& ptx);

// `ptx` with each such global's literals replaced by the 16-bit patterns that
// the LLVM IR of the same translation unit (`ir`, clang -emit-llvm -S) gives
// it (`0xH7E00` for half, `0xR7FC0` for bfloat). A global missing from `ir`
// is left as it is and named in the returned error; "" when all were fixed.
std::string fix_16bit_globals(std::string& ptx, const std::string& ir);

}  // namespace coreai_torch::cuda
