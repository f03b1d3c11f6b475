// Vector accesses at element-aligned addresses, at the speed of aligned ones.
//
// Metal reads and writes vectors at any address aligned to their element
// (address_space.h, `loose`), so clang gives a `device half4&` the alignment
// of a half, and the NVPTX backend splits every such access into one access
// per element: MLX's `*(device half4*)p = v` becomes four 16-bit stores, a
// 16-byte tile copy through `device uint4*` four 32-bit loads. C++ has no
// hook on an assignment through a reference, so the test is made in the
// kernel's LLVM IR instead: each vector load or store whose alignment is
// below its size tests its address and takes one vector access when it is
// aligned, the element accesses otherwise. Both paths do what Metal does at
// every address. A load the optimizer has already split into element loads
// (its elements used one by one) stays split.
#pragma once

#include <string>

namespace coreai_torch::cuda {

struct VersionedVectors {
  std::string ir;  // the module with the accesses rewritten
  int count = 0;   // how many loads and stores are tested
  int proven = 0;  // how many are given their full alignment untested (known_alignment.h)
  int async = 0;   // how many copies to threadgroup memory are asynchronous (async_copies.h)
};

// `ir` (optimized, clang -emit-llvm -S) with each under-aligned load and store
// of a vector, or of the integer or float the optimizer made of one (up to 16
// bytes, not volatile, not atomic, through a named pointer) tested at run
// time: its block split at the access into a branch on
// the address's low bits, one vector access of the full alignment on one
// side and the access as it was on the other. An access whose address the IR
// proves aligned (known_alignment.h: a 16-byte aligned threadgroup array at
// an offset known to be a multiple of the access's size) is given its full
// alignment instead, untested. For the code generator alone:
// an optimizer would merge the two sides back into the lesser access. The
// entry block of a function with allocas is left as it is. With
// `async_copies` (sm_80 and later), a kernel's 16-byte copies from a buffer to
// a threadgroup array become asynchronous copies instead (async_copies.h).
VersionedVectors version_underaligned_vectors(const std::string& ir, bool async_copies = false);

}  // namespace coreai_torch::cuda
