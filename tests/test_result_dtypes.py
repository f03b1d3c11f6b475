"""How a new specialization learns its result dtypes from ``torch_defn``.

Small GPU inputs are given to the reference as CPU zeros first
(coreai_torch/specializations.py says why). Meta tensors stand in for GPU
tensors here: like them, they are not on the CPU.
"""

from __future__ import annotations

import torch

from coreai_torch import MetalParameter, TorchMetalKernel
from coreai_torch.specializations import CPU_STAND_IN_ELEMENTS, result_dtypes

_seen: list[tuple[str, list[int], torch.dtype, bool]] = []


def _widen(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _seen.append((x.device.type, list(x.shape), x.dtype, x.device.type == "cpu" and not x.any()))
    return (x + y).int()[:, :2]


def _kernel(torch_defn) -> TorchMetalKernel:
    return TorchMetalKernel(
        "dtype_probe",
        ["x", "y"],
        ["out"],
        src="out[id] = 0;",
        torch_defn=torch_defn,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )


def test_small_gpu_inputs_run_the_reference_on_cpu_zeros() -> None:
    _seen.clear()
    x = torch.empty(3, 5, dtype=torch.float16, device="meta")
    y = torch.empty(3, 5, dtype=torch.float32, device="meta")
    assert result_dtypes(_kernel(_widen), [x, y], [[3, 2]]) == [torch.int32]
    assert _seen == [("cpu", [3, 5], torch.float16, True)]


def test_large_gpu_inputs_run_the_reference_on_the_inputs() -> None:
    _seen.clear()
    n = CPU_STAND_IN_ELEMENTS  # two inputs: twice the limit in all
    x = torch.empty(n, 1, dtype=torch.float32, device="meta")
    assert result_dtypes(_kernel(_widen), [x, x], [[n, 1]]) == [torch.int32]
    assert _seen == [("meta", [n, 1], torch.float32, False)]


def test_a_reference_that_cannot_run_on_the_cpu_runs_on_the_inputs() -> None:
    _seen.clear()

    def gpu_only(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu":
            raise RuntimeError("expects its own device")
        return _widen(x, y)

    x = torch.empty(2, 2, device="meta")
    assert result_dtypes(_kernel(gpu_only), [x, x], [[2, 2]]) == [torch.int32]
    assert [seen[0] for seen in _seen] == ["meta"]


def test_a_reference_whose_shapes_depend_on_values_runs_on_the_inputs() -> None:
    calls: list[str] = []

    def positive_count(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls.append(x.device.type)
        # Zeros give an empty result; the real (here: meta) inputs give 4 rows.
        rows = 0 if x.device.type == "cpu" else 4
        return torch.zeros(rows, dtype=torch.int32, device=x.device)

    x = torch.empty(4, device="meta")
    assert result_dtypes(_kernel(positive_count), [x, x], [[4]]) == [torch.int32]
    assert calls == ["cpu", "meta"]


def test_cpu_inputs_run_the_reference_on_the_inputs_themselves() -> None:
    _seen.clear()
    x = torch.ones(2, 3)
    assert result_dtypes(_kernel(_widen), [x, x], [[2, 2]]) == [torch.int32]
    assert _seen == [("cpu", [2, 3], torch.float32, False)]
