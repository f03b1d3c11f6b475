"""Gradient checks for kernels, which run in float32 (Metal has no double).

``gradcheck_fp32`` runs ``torch.autograd.gradcheck`` (reverse and forward mode)
on float32 inputs; ``assert_grads_match_float64`` compares a kernel call's
gradients with those of its reference evaluated in float64.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

# gradcheck compares the analytical Jacobian with central differences
# (f(x + EPS) - f(x - EPS)) / 2 EPS, here computed in float32. Their rounding
# error is about k ulp(f) / (2 EPS) with k a few ulps of kernel rounding: for
# |f| ~ 1, 4 * 1.2e-7 / 2e-2 ~ 2.4e-5; their truncation error is
# EPS^2 / 6 |f'''| ~ 1.7e-5 |f'''|. Inputs of size ~1 keep f''' of order 1,
# so ATOL = RTOL = 1e-3 bound both with a margin of over 10x, and still catch
# any wrong derivative (an error of one term is of order 1e-1 or more).
EPS = 1e-2
ATOL = RTOL = 1e-3


def gradcheck_fp32(
    fn: Callable[..., Any], inputs: Sequence[Any], *, second_order: bool = False
) -> None:
    """torch.autograd.gradcheck of ``fn`` at float32 ``inputs``, forward mode included
    (``second_order``: torch.autograd.gradgradcheck, of the backward itself)."""
    with warnings.catch_warnings():
        # gradcheck warns that float32 inputs need loose tolerances: see above.
        warnings.filterwarnings("ignore", "Input #\\d+ requires gradient and is not a double")
        if second_order:
            check = torch.autograd.gradgradcheck(fn, tuple(inputs), eps=EPS, atol=ATOL, rtol=RTOL)
        else:
            check = torch.autograd.gradcheck(
                fn, tuple(inputs), eps=EPS, atol=ATOL, rtol=RTOL, check_forward_ad=True
            )
    assert check


def assert_grads_match_float64(
    call: Callable[..., Any], reference: Callable[..., Any], inputs: Sequence[Any]
) -> None:
    """The gradients of ``call`` (the kernel, float32) at ``inputs`` against those of
    ``reference`` in float64, for random cotangents.

    The backward is the vector-Jacobian product of the reference computed in
    float32: a handful of float32 roundings of values of size ~1, so within
    rtol 1e-5 / atol 1e-5 of the float64 one.
    """
    generator = torch.Generator().manual_seed(0)
    wanted = [i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor) and v.requires_grad]
    outs = _as_tuple(call(*inputs))
    differentiable = [o for o in outs if o.requires_grad]
    cotangents = [torch.randn(o.shape, generator=generator) for o in differentiable]
    got = torch.autograd.grad(differentiable, [inputs[i] for i in wanted], cotangents)

    doubles = [
        v.detach().double().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v
        for v in inputs
    ]
    ref_outs = [o for o in _as_tuple(reference(*doubles)) if o.requires_grad]
    want = torch.autograd.grad(
        ref_outs, [doubles[i] for i in wanted], [c.double() for c in cotangents]
    )
    for g, w in zip(got, want):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5)


def _as_tuple(value: Any) -> tuple[torch.Tensor, ...]:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)
