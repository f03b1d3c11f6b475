"""Calls of TorchMetalKernel objects by vectorcall (csrc/kernel_call.cpp).

A plain eager call of a registered specialization is launched without running
the Python ``__call__``; every other call runs it. These tests watch which one
ran with ``sys.setprofile`` (a Python frame of ``__call__`` appears only when
it runs) and check that every way of calling gives the same results and the
same errors.
"""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch
from support.kernels import axpy_kernel

import coreai_torch
from coreai_torch import MetalParameter, TorchMetalKernel

ID = [MetalParameter("id", "uint", "thread_position_in_grid")]
LAUNCH = {
    "threads_per_grid": (8, 1, 1),
    "threads_per_thread_group": (8, 1, 1),
    "result_shapes": [[8]],
}


@pytest.fixture(scope="module")
def axpy() -> TorchMetalKernel:
    return axpy_kernel("kernel_call_axpy")


@contextmanager
def python_calls() -> Iterator[list[str]]:
    """The names of the TorchMetalKernel.__call__ frames entered meanwhile."""
    seen: list[str] = []
    code = TorchMetalKernel.__call__.__code__

    def profile(frame, event, arg) -> None:
        if event == "call" and frame.f_code is code:
            seen.append(frame.f_locals["self"].name)

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, generator=g), torch.randn(8, generator=g)


def test_a_plain_repeated_call_runs_no_python(axpy) -> None:
    x, y = inputs()
    axpy(x, y, 2.0, **LAUNCH)  # registers the specialization
    with python_calls() as seen:
        out = axpy(x, y, 2.0, **LAUNCH)
    assert seen == []
    torch.testing.assert_close(out, 2.0 * x + y, rtol=0, atol=0)  # one rounding each


@pytest.mark.parametrize(
    "call",
    [
        lambda k, x, y: k(x, y, 2.0, **LAUNCH),
        lambda k, x, y: k(
            x,
            y,
            2.0,
            result_shapes=[[8]],
            threads_per_thread_group=(8, 1, 1),
            threads_per_grid=(8, 1, 1),
        ),
        lambda k, x, y: functools.partial(k, x)(y, 2.0, **LAUNCH),
        lambda k, x, y: type(k).__call__(k, x, y, 2.0, **LAUNCH),
        lambda k, x, y: k.__call__(*(x, y, 2.0), **dict(LAUNCH)),
    ],
    ids=["keywords", "keywords-reordered", "partial", "unbound-call", "bound-call"],
)
def test_every_way_of_calling_gives_the_same_result(axpy, call: Callable) -> None:
    x, y = inputs()
    torch.testing.assert_close(call(axpy, x, y), 2.0 * x + y, rtol=0, atol=0)


def test_calls_the_fast_path_declines_run_the_python_call(axpy, monkeypatch) -> None:
    x, y = inputs()
    axpy(x, y, 2.0, **LAUNCH)
    with python_calls() as seen:
        axpy.execution_mode = "reference"
        try:
            reference = axpy(x, y, 2.0, **LAUNCH)
        finally:
            axpy.execution_mode = None
        before = coreai_torch.get_execution_mode()
        coreai_torch.set_execution_mode("reference")
        try:
            axpy(x, y, 2.0, **LAUNCH)
        finally:
            coreai_torch.set_execution_mode(before)
        monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
        compiling = axpy(x, y, 2.0, **LAUNCH)
        monkeypatch.setattr(torch.compiler, "_is_compiling_flag", False)
        axpy(x.requires_grad_(), y, 2.0, **LAUNCH)  # _launch declines: autograd records it
    assert seen == ["kernel_call_axpy"] * 4
    torch.testing.assert_close(reference, 2.0 * x.detach() + y)
    torch.testing.assert_close(compiling, 2.0 * x.detach() + y, rtol=0, atol=0)


def test_bad_calls_raise_what_the_python_call_raises(axpy) -> None:
    x, y = inputs()
    axpy(x, y, 2.0, **LAUNCH)
    bad_keyword = dict(LAUNCH, result_shape=[[8]])
    del bad_keyword["result_shapes"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'result_shape'"):
        axpy(x, y, 2.0, **bad_keyword)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument"):
        axpy(x, y, 2.0, threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1))
    with pytest.raises(TypeError, match="kernel_call_axpy"):
        axpy(x, y, "2.0", **LAUNCH)  # a str for the float input: the op's checks say so


def test_a_redefined_kernel_object_is_refused(axpy) -> None:
    x, y = inputs()
    old = axpy_kernel("kernel_call_redefined", "out[id] = alpha * x[id];")
    old(x, y, 2.0, **LAUNCH)
    with pytest.warns(UserWarning, match="Redefining kernel 'kernel_call_redefined'"):
        axpy_kernel("kernel_call_redefined")
    with pytest.raises(RuntimeError, match="redefined with a different definition"):
        old(x, y, 2.0, **LAUNCH)


def test_copies_of_a_model_share_its_kernels(axpy) -> None:
    # Like a function, a kernel object stands for its op: copy and deepcopy
    # give the object itself, so models holding kernels can be deep-copied.
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.kernel = axpy
            self.scale = torch.nn.Parameter(torch.tensor(2.0))

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.kernel(x, y, 3.0, **LAUNCH) * self.scale

    block = Block()
    twin = copy.deepcopy(block)
    assert twin.kernel is axpy and copy.copy(axpy) is axpy
    assert twin.scale is not block.scale
    x, y = inputs()
    with torch.no_grad():
        torch.testing.assert_close(twin(x, y), block(x, y), rtol=0, atol=0)
