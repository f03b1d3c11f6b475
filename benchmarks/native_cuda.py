"""The CUDA benchmarks' Metal kernels written directly in CUDA C++, for anchors.

Each kernel is the same algorithm as its Metal twin in ``bench_kernels.py``,
launched with the same threads per block, the way a CUDA programmer writes it
(no vector types beyond the Metal source's, no tuning the Metal source lacks),
and compiled at run time by NVRTC through CuPy (the GPU machine has CuPy; the
rows that need it are skipped where it is missing). It shows what the hardware
gives that kernel shape, so a row can say how far the backend is from it,
beside the ratio to torch's own kernel.

Half values travel as their bits (``unsigned short``) and convert with PTX's
``cvt``, so the source needs no CUDA header. ``expf`` and ``rsqrtf`` are the
accurate CUDA math functions (no ``-use_fast_math``), like the backend's
libdevice functions; sums and maxima pair lanes in the Metal kernels' order.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

SOURCE = r"""
#define NEG_INF (-__int_as_float(0x7f800000))

struct alignas(16) f4 { float x, y, z, w; };
struct alignas(8) u2 { unsigned x, y; };

__device__ __forceinline__ float h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int s = 1; s < 32; s *= 2) v += __shfl_xor_sync(0xffffffffu, v, s);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int s = 1; s < 32; s *= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}

// bench_add: one element per thread, bounds-checked.
extern "C" __global__ void add(const float* x, const float* y, float* out, unsigned n) {
  const unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
  if (id < n) out[id] = x[id] + y[id];
}

// bench_add_vec4: four elements per thread as float4, the tail one at a time.
extern "C" __global__ void add_vec4(const float* x, const float* y, float* out, unsigned n) {
  const unsigned i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (i + 4 <= n) {
    const f4 a = *reinterpret_cast<const f4*>(x + i);
    const f4 b = *reinterpret_cast<const f4*>(y + i);
    *reinterpret_cast<f4*>(out + i) = f4{a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w};
  } else {
    for (unsigned k = i; k < n; ++k) out[k] = x[k] + y[k];
  }
}

// Four halves of a row at i (8-byte aligned: i is a multiple of 4).
__device__ __forceinline__ f4 load4(const unsigned short* p) {
  const u2 raw = *reinterpret_cast<const u2*>(p);
  return f4{h2f(raw.x & 0xffff), h2f(raw.x >> 16), h2f(raw.y & 0xffff), h2f(raw.y >> 16)};
}
__device__ __forceinline__ void store4(unsigned short* p, float a, float b, float c, float d) {
  u2 raw;
  raw.x = f2h(a) | (unsigned(f2h(b)) << 16);
  raw.y = f2h(c) | (unsigned(f2h(d)) << 16);
  *reinterpret_cast<u2*>(p) = raw;
}

// bench_softmax: one block per row, an online max and sum, then a second pass.
extern "C" __global__ void softmax(const unsigned short* x, unsigned short* out, unsigned dim) {
  const unsigned lid = threadIdx.x, threads = blockDim.x;
  const unsigned lane = lid % 32, simd = lid / 32, simds = (threads + 31) / 32;
  const unsigned short* in_row = x + size_t(blockIdx.x) * dim;
  unsigned short* out_row = out + size_t(blockIdx.x) * dim;
  float m = NEG_INF, s = 0.0f;
  for (unsigned i = 4 * lid; i < dim; i += 4 * threads) {
    const f4 v = load4(in_row + i);
    const float new_m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    const float ex = expf(v.x - new_m), ey = expf(v.y - new_m);
    const float ez = expf(v.z - new_m), ew = expf(v.w - new_m);
    s = s * expf(m - new_m) + (ex + ey) + (ez + ew);
    m = new_m;
  }
  __shared__ float maxes[32], sums[32];
  const float simd_m = warp_max(m);
  const float simd_s = warp_sum(m == NEG_INF ? 0.0f : s * expf(m - simd_m));
  if (lane == 0) { maxes[simd] = simd_m; sums[simd] = simd_s; }
  __syncthreads();
  if (simd == 0) {
    const float gm = lane < simds ? maxes[lane] : NEG_INF;
    const float gs = lane < simds ? sums[lane] : 0.0f;
    const float total_m = warp_max(gm);
    const float total_s = warp_sum(gm == NEG_INF ? 0.0f : gs * expf(gm - total_m));
    if (lane == 0) { maxes[0] = total_m; sums[0] = total_s; }
  }
  __syncthreads();
  const float row_max = maxes[0];
  const float inverse = 1.0f / sums[0];
  for (unsigned i = 4 * lid; i < dim; i += 4 * threads) {
    const f4 v = load4(in_row + i);
    store4(out_row + i, expf(v.x - row_max) * inverse, expf(v.y - row_max) * inverse,
           expf(v.z - row_max) * inverse, expf(v.w - row_max) * inverse);
  }
}

// bench_rms_norm: one block per row, a sum of squares, then the scaled row.
extern "C" __global__ void rms_norm(const unsigned short* x, const unsigned short* weight,
                                    float eps, unsigned short* out, unsigned dim) {
  const unsigned lid = threadIdx.x, threads = blockDim.x;
  const unsigned lane = lid % 32, simd = lid / 32, simds = (threads + 31) / 32;
  const unsigned short* in_row = x + size_t(blockIdx.x) * dim;
  unsigned short* out_row = out + size_t(blockIdx.x) * dim;
  float acc = 0.0f;
  for (unsigned i = 4 * lid; i < dim; i += 4 * threads) {
    const f4 v = load4(in_row + i);
    acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  __shared__ float partial[32];
  acc = warp_sum(acc);
  if (lane == 0) partial[simd] = acc;
  __syncthreads();
  if (simd == 0) {
    const float total = warp_sum(lane < simds ? partial[lane] : 0.0f);
    if (lane == 0) partial[0] = total;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / float(dim) + eps);
  for (unsigned i = 4 * lid; i < dim; i += 4 * threads) {
    const f4 v = load4(in_row + i);
    const f4 g = load4(weight + i);
    store4(out_row + i, v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z,
           v.w * scale * g.w);
  }
}
"""


def available() -> bool:
    """Whether CuPy (and so NVRTC) is importable here."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        return False
    return True


@cache
def _module() -> Any:
    import cupy

    return cupy.RawModule(code=SOURCE, options=("-std=c++17",))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def launcher(
    name: str, grid: int, block: int, *args: Any, module: Any = None
) -> Callable[[], None]:
    """A call of kernel ``name`` on torch's current stream; tensors are passed as CuPy views.

    ``module``: the ``cupy.RawModule`` holding the kernel (default: ``SOURCE``'s).
    """
    import cupy

    kernel = (module or _module()).get_function(name)
    converted = tuple(cupy.asarray(a) if isinstance(a, torch.Tensor) else a for a in args)
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def call() -> None:
        with stream:
            kernel((grid,), (block,), converted)

    return call


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, threads: int, *, vec4: bool):
    """The launch of ``add`` (one element per thread) or ``add_vec4`` (four) into ``out``."""
    import numpy as np

    n = x.numel()
    per_thread = 4 if vec4 else 1
    grid = _ceil_div(_ceil_div(n, per_thread), threads)
    return launcher("add_vec4" if vec4 else "add", grid, threads, x, y, out, np.uint32(n))


def softmax(x: torch.Tensor, out: torch.Tensor, threads: int):
    """The launch of the CUDA softmax, one block of ``threads`` per row of fp16 ``x``."""
    import numpy as np

    rows, dim = x.shape
    return launcher("softmax", rows, threads, x, out, np.uint32(dim))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor, threads: int):
    """The launch of the CUDA RMSNorm, one block of ``threads`` per row of fp16 ``x``."""
    import numpy as np

    rows, dim = x.shape
    return launcher("rms_norm", rows, threads, x, weight, np.float32(eps), out, np.uint32(dim))
