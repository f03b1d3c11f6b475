"""Re-running a kernel definition (a notebook cell) never runs stale source."""

import warnings

import pytest
import torch

from coreai_torch import MetalParameter, TorchMetalKernel

CALL = {"threads_per_grid": (4, 1, 1), "threads_per_thread_group": (4, 1, 1)}


def plus(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def make(src: str, defn=plus) -> TorchMetalKernel:
    return TorchMetalKernel(
        "redef_kernel",
        ["x"],
        ["out"],
        src,
        defn,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )


def test_identical_definition_reuses_the_op_without_warning():
    first = make("out[id] = x[id] + 1;")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = make("out[id] = x[id] + 1;")
    assert second.op is first.op
    x = torch.arange(4.0)
    for k in (first, second):
        torch.testing.assert_close(k(x, result_shapes=[[4]], **CALL), x + 1)


def test_changed_definition_replaces_the_op_and_later_calls_run_it():
    old = make("out[id] = x[id] + 1;")
    x = torch.arange(4.0)
    torch.testing.assert_close(old(x, result_shapes=[[4]], **CALL), x + 1)

    def plus_two(x: torch.Tensor) -> torch.Tensor:
        return x + 2

    with pytest.warns(UserWarning, match="Redefining kernel 'redef_kernel'"):
        new = make("out[id] = x[id] + 2;", plus_two)
    torch.testing.assert_close(new(x, result_shapes=[[4]], **CALL), x + 2)
    # The op itself now runs the new source too.
    torch.testing.assert_close(
        torch.ops.coreai_metal_kernels.redef_kernel(x, [4, 1, 1], [4, 1, 1], [4]), x + 2
    )
    with pytest.raises(RuntimeError, match="was redefined with a different definition"):
        old(x, result_shapes=[[4]], **CALL)
