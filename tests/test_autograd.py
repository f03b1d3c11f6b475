"""Kernels have no backward yet: a gradient that would flow through one raises.

Before this, backward() silently left out the kernel's contribution and
torch.func.grad returned zeros, with only a torch warning (issue 9, 2.7).
"""

from __future__ import annotations

import pytest
import torch

from coreai_torch import MetalParameter, TorchMetalKernel

CALL = {"threads_per_grid": (4, 1, 1), "threads_per_thread_group": (4, 1, 1)}


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x * 2, x + 1


ID = [MetalParameter("id", "uint", "thread_position_in_grid")]
kernel = TorchMetalKernel(
    "grad_double", ["x"], ["out"], "out[id] = x[id] * 2;", double, metal_params=ID
)
pair = TorchMetalKernel(
    "grad_split", ["x"], ["a", "b"], "a[id] = x[id] * 2; b[id] = x[id] + 1;", split, metal_params=ID
)


def call(x: torch.Tensor) -> torch.Tensor:
    return kernel(x, **CALL, result_shapes=[[4]])


def test_backward_through_a_kernel_raises():
    x = torch.randn(4, requires_grad=True)
    y = call(x)  # the forward runs: only a gradient through it is refused
    torch.testing.assert_close(y, x.detach() * 2)
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="kernel 'grad_double' has no backward"):
        (y.sum() + x.sum()).backward()
    # The op itself, as an exported program calls it.
    y = kernel.op(x, [4, 1, 1], [4, 1, 1], [4])
    with pytest.raises(RuntimeError, match="kernel 'grad_double' has no backward"):
        y.sum().backward()


def test_backward_through_one_result_of_several_raises():
    x = torch.randn(4, requires_grad=True)
    _, b = pair(x, **CALL, result_shapes=[[4], [4]])
    torch.testing.assert_close(b, x.detach() + 1)
    with pytest.raises(RuntimeError, match="kernel 'grad_split' has no backward"):
        b.sum().backward()


def test_func_grad_raises():
    with pytest.raises(RuntimeError, match="kernel 'grad_double' has no backward"):
        torch.func.grad(lambda t: call(t).sum())(torch.randn(4))


def test_calls_without_gradients_are_unaffected():
    x = torch.randn(4, requires_grad=True)
    with torch.no_grad():
        torch.testing.assert_close(call(x), x.detach() * 2)
    plain = torch.randn(4)
    out = call(plain)
    assert not out.requires_grad
    torch.testing.assert_close(out, plain * 2)
    # A graph that uses the kernel's output only where no gradient is needed.
    w = torch.randn(4, requires_grad=True)
    (w * call(plain)).sum().backward()
    torch.testing.assert_close(w.grad, plain * 2)


def as_list(x: torch.Tensor) -> list[torch.Tensor]:
    return [x * 2, x + 1]


listed = TorchMetalKernel(
    "grad_list", ["x"], ["a", "b"], "a[id] = x[id] * 2; b[id] = x[id] + 1;", as_list,
    metal_params=ID,
)  # fmt: skip


def test_list_results_keep_their_type_and_refuse_backward():
    x = torch.randn(4, requires_grad=True)
    out = listed(x, **CALL, result_shapes=[[4], [4]])
    assert type(out) is list
    torch.testing.assert_close(out[0], x.detach() * 2)
    with pytest.raises(RuntimeError, match="kernel 'grad_list' has no backward"):
        out[1].sum().backward()
