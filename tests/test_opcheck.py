"""torch.library.opcheck on the seed kernels, with and without inputs that require grad
(other kernel tests use kernel_testing.run_checked too)."""

import torch
from support.kernel_testing import run_checked

from coreai_torch.examples import (
    custom_add,
    custom_matmul,
    rms_norm,
    scale_shift,
    sincos,
    torch_rms_norm,
)


def test_vector_add():
    x, y = torch.randn(16), torch.randn(16)
    out = run_checked(
        custom_add,
        x,
        y,
        threads_per_grid=(16, 1, 1),
        threads_per_thread_group=(1, 1, 1),
        result_shapes=[[16]],
    )
    torch.testing.assert_close(out, x + y)


def test_sincos():
    x = torch.randn(32)
    s, c = run_checked(
        sincos,
        x,
        threads_per_grid=(32, 1, 1),
        threads_per_thread_group=(8, 1, 1),
        result_shapes=[[32], [32]],
    )
    # float32 sin/cos: a few ulp between libm implementations.
    torch.testing.assert_close(s, torch.sin(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c, torch.cos(x), rtol=1e-5, atol=1e-6)


def test_matmul_float16():
    a = torch.randn(6, 5, dtype=torch.float16)
    b = torch.randn(5, 7, dtype=torch.float16)
    out = run_checked(
        custom_matmul,
        a,
        b,
        threads_per_grid=(7, 6, 1),
        threads_per_thread_group=(4, 4, 1),
        result_shapes=[[6, 7]],
    )
    # The kernel accumulates in half, rounding after every multiply-add (5 terms
    # of magnitude ~1): a few half ulps at |C| ~ 2, i.e. about 1e-2.
    torch.testing.assert_close(out, (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)


def test_scalars():
    x = torch.randn(40)
    out = run_checked(
        scale_shift,
        x,
        3,
        0.5,
        True,
        threads_per_grid=(40, 1, 1),
        threads_per_thread_group=(32, 1, 1),
        result_shapes=[[40]],
    )
    torch.testing.assert_close(out, -(x * 0.5 + 3))


def test_rms_norm():
    rows, weight = torch.randn(3, 40), torch.randn(40)
    out = run_checked(
        rms_norm,
        rows,
        weight,
        1e-6,
        threads_per_grid=(32 * 3, 1, 1),
        threads_per_thread_group=(32, 1, 1),
        result_shapes=[[3, 40]],
    )
    # simd_sum adds the squares in another order than torch's mean: a few ulps.
    torch.testing.assert_close(out, torch_rms_norm(rows, weight, 1e-6), rtol=1e-5, atol=1e-6)
