// Two tensor-core products in a row on one accumulator, as one m16n8k16.
//
// A tiled GEMM adds the products of a tile's K steps to the same accumulator
// (`for kk: acc[i][j] += a[i][kk] * b[j][kk]`): after paired_products.h, each
// m16n8k8 takes the previous one's D as its C. m16n8k16 multiplies A's 16
// columns by B's 16 rows in one instruction; its A registers are those of two
// m16n8k8 (columns 0..7, then 8..15), its B registers those of two, and C and
// D keep their layout. So D2 = A2 B2 + (A1 B1 + C1) becomes one product with
// A1 A2 side by side, B1 over B2 and C1: half the instructions again.
//
// The sum is the same up to the order of its additions: the tensor cores add
// the 16 products of a row inside one instruction, where the two m16n8k8 round
// the first 8 to float. Metal sets no order for the additions of
// simdgroup_multiply_accumulate (Apple's GPUs give no promise either), and
// integers that fit in a float's mantissa give the same bits in either order.
#pragma once

#include <string>

namespace coreai_torch::cuda {

struct ChainedProducts {
  std::string ir;  // the module with the chains fused
  int count = 0;   // how many m16n8k16 were made
};

// `ir` (optimized, clang -emit-llvm -S, after pair_products_sharing_b) with
// each m16n8k8 whose C is the whole D of an m16n8k8 before it, in the same
// block, made one m16n8k16 at its own place. Only where nothing else reads
// the first product's D: it is then left unused, and the code generator drops
// it. Chains of more are fused two by two, in order. For the code generator
// alone, as vector_alignment.h's rewrite.
ChainedProducts fuse_chained_products(const std::string& ir);

}  // namespace coreai_torch::cuda
