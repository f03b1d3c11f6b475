"""Probe: what running several Metal threads per CUDA thread would give MLX's RMSNorm.

The CUDA backend runs each Metal thread as one CUDA thread. At 1024 threads
per row (MLX's launch), the RMSNorm of ``bench_kernels.rms_norm`` then runs
at the speed of its CUDA C++ twin at best (``native_cuda.rms_norm``), which is
below ``F.rms_norm`` on H100s (docs/cuda.md, "Where the time goes"). This
probe writes the design that would go past the twin by hand, in CUDA C++: a
group of 1024 Metal threads run by ``1024 / F`` CUDA threads, each CUDA
thread running the Metal threads ``lid = k * blockDim.x + threadIdx.x`` for
``k < F`` between two barriers. Metal's semantics are kept:

- Metal SIMD-group ``lid / 32`` is the lanes of one CUDA warp at one step
  ``k``, so each ``simd_sum`` is still one warp reduction, over the same
  lanes in the same order;
- a barrier is one ``__syncthreads()`` after every Metal thread of the CUDA
  thread has run its part of the region;
- the region that only SIMD-group 0 runs (``if (simd == 0)``) is step 0 of
  warp 0.

No backend code is involved; it needs a GPU and CuPy (NVRTC)::

    python benchmarks/probe_coarsening.py

It prints GB/s (one fp16 read and one write per element) of ``F.rms_norm``,
the one-thread-per-Metal-thread twin and the coarsened twins for F = 2, 4
and 8, on 8192 x 4096 fp16, interleaved, each checked against ``F.rms_norm``.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import native_cuda  # benchmarks/

COARSE_SOURCE = r"""
// MLX's RMSNorm group of F * blockDim.x Metal threads on blockDim.x CUDA threads.
template <int F>
__device__ __forceinline__ void rms_norm_coarse(const unsigned short* x,
                                                const unsigned short* weight, float eps,
                                                unsigned short* out, unsigned dim) {
  const unsigned threads = F * blockDim.x, simds = threads / 32;
  const unsigned short* in_row = x + size_t(blockIdx.x) * dim;
  unsigned short* out_row = out + size_t(blockIdx.x) * dim;
  __shared__ float partial[32];
#pragma unroll
  for (int k = 0; k < F; ++k) {
    const unsigned lid = k * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (unsigned i = 4 * lid; i < dim; i += 4 * threads) {
      const f4 v = load4(in_row + i);
      acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    acc = warp_sum(acc);
    if (lid % 32 == 0) partial[lid / 32] = acc;
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // SIMD-group 0: step 0 of warp 0
    const unsigned lane = threadIdx.x;
    const float total = warp_sum(lane < simds ? partial[lane] : 0.0f);
    if (lane == 0) partial[0] = total;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / float(dim) + eps);
#pragma unroll
  for (int k = 0; k < F; ++k) {
    const unsigned lid = k * blockDim.x + threadIdx.x;
    for (unsigned i = 4 * lid; i < dim; i += 4 * threads) {
      const f4 v = load4(in_row + i);
      const f4 g = load4(weight + i);
      store4(out_row + i, v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z,
             v.w * scale * g.w);
    }
  }
}
#define COARSE(F)                                                                   \
  extern "C" __global__ void rms_norm_x##F(const unsigned short* x,                \
                                           const unsigned short* weight, float eps, \
                                           unsigned short* out, unsigned dim) {     \
    rms_norm_coarse<F>(x, weight, eps, out, dim);                                   \
  }
COARSE(2)
COARSE(4)
COARSE(8)
"""

ROWS, DIM, METAL_THREADS, EPS = 8192, 4096, 1024, 1e-6


def _interleaved(fns: list[Any], reps: int = 11, calls: int = 20) -> list[float]:
    """Median seconds per call of each, alternating per repetition (CUDA events)."""
    for fn in fns:
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for fn, samples in zip(fns, times):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / calls)
    return [statistics.median(t) for t in times]


def main() -> None:
    if not torch.cuda.is_available() or not native_cuda.available():
        print("probe_coarsening: needs a CUDA GPU and CuPy")
        return
    torch.manual_seed(0)
    x = torch.randn(ROWS, DIM, device="cuda", dtype=torch.float16) * 3
    weight = (1 + 0.1 * torch.randn(DIM, device="cuda")).half()
    expected = torch.nn.functional.rms_norm(x, (DIM,), weight, EPS)
    names = ["F.rms_norm", "twin, 1 Metal thread per CUDA thread"]
    fns = [lambda: torch.nn.functional.rms_norm(x, (DIM,), weight, EPS)]
    import cupy

    module = cupy.RawModule(code=native_cuda.SOURCE + COARSE_SOURCE, options=("-std=c++17",))
    for name, cuda_threads in [("rms_norm", METAL_THREADS)] + [
        (f"rms_norm_x{f}", METAL_THREADS // f) for f in (2, 4, 8)
    ]:
        out = torch.empty_like(x)
        call = native_cuda.launcher(
            name, ROWS, cuda_threads, x, weight, np.float32(EPS), out, np.uint32(DIM), module=module
        )
        call()
        torch.cuda.synchronize()
        # fp32 sums in another order than torch's, one rounding to fp16.
        torch.testing.assert_close(out, expected, rtol=2e-3, atol=2e-3)
        fns.append(call)
        if name != "rms_norm":
            names.append(
                f"coarsened, {METAL_THREADS // cuda_threads} Metal threads per CUDA thread"
            )
    seconds = _interleaved(fns)
    gb = 2 * ROWS * DIM * 2 / 1e9
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"RMSNorm {ROWS}x{DIM} fp16, a group of {METAL_THREADS} Metal threads per row")
    print("| kernel | GB/s | vs F.rms_norm | vs twin |")
    print("|---|---:|---:|---:|")
    for name, s in zip(names, seconds):
        print(f"| {name} | {gb / s:.0f} | {seconds[0] / s:.2f}x | {seconds[1] / s:.2f}x |")


if __name__ == "__main__":
    main()
