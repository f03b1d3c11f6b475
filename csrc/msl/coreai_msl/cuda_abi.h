// What the CUDA backend's launcher (csrc/cuda/, compiled into _C) hands to a
// kernel it compiled for the GPU, besides the kernel's own arguments. Plain C:
// the same struct is packed by the host compiler and read by clang's device
// code, so every field is a 32-bit integer.
//
// Bump COREAI_CUDA_ABI_VERSION whenever the struct or the kernel's parameter
// list changes; the version is part of the disk cache key.
#ifndef COREAI_MSL_CUDA_ABI_H
#define COREAI_MSL_CUDA_ABI_H

#include <stdint.h>

#define COREAI_CUDA_ABI_VERSION 2

// The __global__ function of every compiled module, and its name as a string.
#define COREAI_CUDA_KERNEL coreai_cuda_kernel
#define COREAI_CUDA_KERNEL_NAME "coreai_cuda_kernel"

// Metal's dispatchThreads(grid, threads_per_threadgroup) as launched: one CUDA
// block per threadgroup, with group[0] * group[1] * group[2] threads in one
// dimension (so that warps are Metal's SIMD-groups). Every field is in Metal
// order (x first).
typedef struct coreai_cuda_dispatch {
  uint32_t grid[3];    // threads_per_grid
  uint32_t group[3];   // dispatch_threads_per_threadgroup
  uint32_t groups[3];  // threadgroups_per_grid
  // 0: block (x, y, z) is threadgroup (x, y, z). 1: the groups did not fit
  // CUDA's grid limits (y and z below 2^16) and are numbered linearly over a
  // two-dimensional grid instead, x fastest.
  uint32_t folded;
  // Since version 2, after the fields of version 1 (whose kernels read only
  // those): group[0] * group[1] * group[2], and 1 when no threadgroup is cut
  // at the grid edge and the grid is not folded, so that every block is a
  // whole threadgroup and a thread's place needs no arithmetic.
  uint32_t threads;
  uint32_t whole_groups;
} coreai_cuda_dispatch;

#endif  // COREAI_MSL_CUDA_ABI_H
