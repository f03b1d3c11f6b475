"""Execution-mode switches and the reference fallback for devices with no backend."""

import subprocess
import sys
import warnings

import pytest
import torch

import coreai_torch
from coreai_torch import MetalParameter, TorchMetalKernel, kernel_op

CALL = {
    "threads_per_grid": (4, 1, 1),
    "threads_per_thread_group": (4, 1, 1),
    "result_shapes": [[4]],
}


def reference(x: torch.Tensor) -> torch.Tensor:
    return x + 100  # deliberately not what the kernel computes


@pytest.fixture(scope="module")
def kernel():
    return TorchMetalKernel(
        "modes_kernel",
        ["x"],
        ["out"],
        "out[id] = x[id] + 1;",
        reference,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )


def test_kernel_mode_is_the_default(kernel):
    assert coreai_torch.get_execution_mode() == "kernel"
    torch.testing.assert_close(kernel(torch.zeros(4), **CALL), torch.ones(4))


def test_global_reference_mode(kernel):
    coreai_torch.set_execution_mode("reference")
    try:
        torch.testing.assert_close(kernel(torch.zeros(4), **CALL), torch.full((4,), 100.0))
    finally:
        coreai_torch.set_execution_mode("kernel")
    torch.testing.assert_close(kernel(torch.zeros(4), **CALL), torch.ones(4))


def test_per_kernel_mode_overrides_global(kernel):
    kernel.execution_mode = "reference"
    try:
        torch.testing.assert_close(kernel(torch.zeros(4), **CALL), torch.full((4,), 100.0))
        coreai_torch.set_execution_mode("reference")
        kernel.execution_mode = "kernel"
        torch.testing.assert_close(kernel(torch.zeros(4), **CALL), torch.ones(4))
    finally:
        kernel.execution_mode = None
        coreai_torch.set_execution_mode("kernel")


def test_bad_modes_are_rejected(kernel):
    with pytest.raises(ValueError, match="execution mode must be one of"):
        coreai_torch.set_execution_mode("gpu")
    kernel.execution_mode = "fast"
    try:
        with pytest.raises(ValueError, match="execution_mode must be None or one of"):
            kernel(torch.zeros(4), **CALL)
    finally:
        kernel.execution_mode = None


def test_environment_variable_sets_the_default_mode():
    code = "import coreai_torch; print(coreai_torch.get_execution_mode())"
    env = {"COREAI_TORCH_EXECUTION_MODE": "reference", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "reference", out.stderr
    env["COREAI_TORCH_EXECUTION_MODE"] = "bogus"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "COREAI_TORCH_EXECUTION_MODE='bogus'" in out.stderr


def test_device_without_backend_runs_reference_once_warned(kernel, monkeypatch):
    # No CUDA here: call the op's fallback implementation (registered for every
    # other device) directly with CPU tensors to pin its behaviour.
    monkeypatch.setattr(kernel_op, "_WARNED_DEVICES", set())
    x = torch.zeros(4)
    with pytest.warns(UserWarning, match="no backend for cpu tensors: kernel 'modes_kernel'"):
        out = kernel_op._other_device(kernel, (x, [4, 1, 1], [4, 1, 1], [4]))
    torch.testing.assert_close(out, torch.full((4,), 100.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call is silent
        kernel_op._other_device(kernel, (x, [4, 1, 1], [4, 1, 1], [4]))


def test_reference_results_never_alias_inputs():
    def identity(x: torch.Tensor) -> torch.Tensor:
        return x

    k = TorchMetalKernel(
        "modes_identity",
        ["x"],
        ["out"],
        "out[id] = x[id];",
        identity,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )
    k.execution_mode = "reference"
    x = torch.arange(4.0)
    out = k(x, **CALL)
    assert out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, x)
