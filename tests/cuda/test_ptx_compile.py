"""The GPU compile check of every launched kernel is on, and catches what the GPU refuses.

``support/ptx_check.py`` compiles each specialization a test launches on the CPU
for NVIDIA GPUs (PTX, then ptxas to sm_90 code), failing the test that launched
it if the GPU target cannot take it. This module makes sure that check runs
where it must (CI) and can fail.
"""

from __future__ import annotations

import os

import pytest
import torch
from support import ptx_check
from support.cpu_launch import Tensor, registration

_ID = [("id", "uint", "thread_position_in_grid")]


def test_the_gpu_compile_check_runs_in_ci() -> None:
    if not ptx_check.ENABLED:
        problem = ptx_check.toolchain_problem()
        assert not os.environ.get("CI"), f"CI must compile every kernel for the GPU: {problem}"
        pytest.skip(f"no GPU compile check here: {problem}")


@pytest.mark.skipif(not ptx_check.ENABLED, reason="needs libdevice and ptxas")
def test_a_kernel_compiles_for_the_gpu_and_a_bad_one_is_named() -> None:
    good = registration("ptx_good", [Tensor("x")], [Tensor("out")], "out[id] = x[id] * 2.0f;", _ID)
    assert ptx_check.compile_for_gpu("ptx_good", tuple(good)) == ""
    # A function declared and never defined: the PTX calls it, and ptxas,
    # linking the whole program, cannot resolve it.
    bad = registration(
        "ptx_bad",
        [Tensor("x")],
        [Tensor("out")],
        "out[id] = x[id] * external_scale();",
        _ID,
        helper="float external_scale();",
    )
    failure = ptx_check.compile_for_gpu("ptx_bad", tuple(bad))
    assert "kernel 'ptx_bad'" in failure and "ptxas rejects" in failure, failure


@pytest.mark.skipif(not ptx_check.ENABLED, reason="needs libdevice and ptxas")
def test_launches_are_compiled_for_the_gpu_once_each() -> None:
    from coreai_torch import MetalParameter, TorchMetalKernel

    def triple(x: torch.Tensor) -> torch.Tensor:
        return 3 * x

    k = TorchMetalKernel(
        "ptx_checked_triple",
        ["x"],
        ["out"],
        "out[id] = 3.0f * x[id];",
        triple,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )
    before = ptx_check.checked_count()
    call = dict(threads_per_grid=(4, 1, 1), threads_per_thread_group=(4, 1, 1), result_shapes=[[4]])
    k(torch.ones(4), **call)
    k(torch.ones(4), **call)
    assert ptx_check.checked_count() == before + 1
