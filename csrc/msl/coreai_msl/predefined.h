// What Metal's compiler predefines for every kernel, which real kernels test
// and use: the language version (4.0, the version with tensors and
// MetalPerformancePrimitives, which this library provides), __METAL__, the
// tensor feature macro MetalPerformancePrimitives' own headers check, and
// METAL_FUNC, the inline-always function marker of Metal's headers.
#pragma once

#define __METAL__ 1
#define __METAL_VERSION__ 400
#define __HAVE_TENSOR__ 1
#define METAL_FUNC inline __attribute__((__always_inline__))
