"""The benchmarks' own Metal kernels compute what their rows claim (CPU backend).

The CUDA benchmark rows time these kernels on the GPU and check them there
against torch; here they run on the CPU backend, so that CI catches a kernel
that no longer computes its product, and tests/cuda/test_ptx_compile.py
compiles them for the GPU in both forms.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_kernels as kernels


def _small_integers(*shape: int, seed: int) -> torch.Tensor:
    # Sums of products of integers in [-2, 2] stay exact in float and in half.
    return torch.randint(-2, 3, shape, generator=torch.Generator().manual_seed(seed)).half()


@pytest.mark.parametrize(
    ("kernel", "block", "threads"),
    [
        (kernels.gemm_wide, kernels.GEMM_WIDE_BLOCK, kernels.GEMM_WIDE_THREADS),
        (kernels.gemm, kernels.GEMM_BLOCK, kernels.GEMM_THREADS),
    ],
    ids=["wide", "simple"],
)
def test_the_benchmark_gemms_multiply(kernel, block, threads) -> None:
    n, k = 128, 64
    a, b = _small_integers(n, k, seed=1), _small_integers(k, n, seed=2)
    out = kernel(
        a,
        b,
        threads_per_grid=(n // block * threads, n // block, 1),
        threads_per_thread_group=(threads, 1, 1),
        result_shapes=[[n, n]],
    )
    assert torch.equal(out, (a.float() @ b.float()).half())


def test_the_product_ceiling_kernel_sums_its_accumulators() -> None:
    a, b = _small_integers(8, 8, seed=3), _small_integers(8, 8, seed=4)
    out = kernels.mma_peak(
        a,
        b,
        5,
        threads_per_grid=(256, 1, 1),
        threads_per_thread_group=(128, 1, 1),
        result_shapes=[[8, 8]],
    )
    assert torch.equal(out, 8 * 5 * (a.float() @ b.float()) + 28)
    assert torch.equal(out, kernels.torch_mma_peak(a, b, 5))
