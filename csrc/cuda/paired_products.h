// Two SIMD-group matrix products that share B, on one tensor-core instruction.
//
// A Metal 8x8 product fills half of mma.sync's m16n8k8 (target_nvptx.h): A's
// rows 8..15 and C's are zero and D's are thrown away. D and C are tuples of
// four registers, so each accumulator of a tiled GEMM pins four registers
// where it holds two values, and ptxas zeroes the unused half before every
// product. A tiled GEMM multiplies each B it loads by several A
// (`acc[i][j] += a[i] * b[j]`); two of those products make one m16n8k8 with
// the second product's A and C in rows 8..15. Each row of the tensor cores'
// product depends on its own row of A and C only, so both results are the
// bits the two instructions gave; the kernel issues half the instructions and
// its accumulators take half the registers (the wide GEMM of
// benchmarks/bench_kernels.py: 164 registers before, 120 after, at sm_90).
#pragma once

#include <string>

namespace coreai_torch::cuda {

struct PairedProducts {
  std::string ir;  // the module with the products paired
  int count = 0;   // how many pairs were made
};

// `ir` (optimized, clang -emit-llvm -S) with pairs of the headers' 8x8
// products (the m16n8k8 asm with zero rows 8..15) that read the same B in the
// same block made one product each, at the first one's place. A product is
// moved up to its partner only where its A and C are known there already
// (defined before it, in a block that dominates it, or by a lane extract,
// aggregate extract or bit cast of such values, repeated there), and only
// where nothing reads the unused rows of either result. For the code
// generator alone, as vector_alignment.h's rewrite.
PairedProducts pair_products_sharing_b(const std::string& ir);

}  // namespace coreai_torch::cuda
