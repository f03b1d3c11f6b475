"""Run converted programs in Core AI's CPU runtime and compare with PyTorch."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import torch
import torch.utils._pytree as pytree
from coreai.authoring import AIProgram
from coreai.runtime import NDArray

from coreai_torch.converter import TorchConverter

# What a torch input becomes in a converted program (64-bit types are narrowed).
_NARROW = {torch.int64: torch.int32, torch.float64: torch.float32}


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu().contiguous()
    tensor = tensor.to(_NARROW.get(tensor.dtype, tensor.dtype))
    if tensor.dtype == torch.bfloat16:
        return tensor.float().numpy().astype(ml_dtypes.bfloat16)
    return tensor.numpy()


def to_torch(array: np.ndarray) -> torch.Tensor:
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array))


def run_program(
    program: AIProgram, inputs: dict[str, torch.Tensor], entrypoint: str = "main"
) -> dict[str, torch.Tensor]:
    """Save ``program`` as an asset, load it in the runtime and call one entry point."""

    async def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as directory:
            asset = program.save_asset(Path(directory) / "program.aimodel")
            async with asset.executable() as model:
                function = model.load_function(entrypoint)
                arrays = {name: NDArray(to_numpy(t)) for name, t in inputs.items()}
                outputs = await function(arrays)
                return {name: value.numpy().copy() for name, value in outputs.items()}

    return {name: to_torch(a) for name, a in asyncio.run(run()).items()}


def convert(
    module: torch.nn.Module,
    args: Sequence[torch.Tensor],
    dynamic_shapes: Any = None,
) -> tuple[AIProgram, list[str], list[str]]:
    """Export and convert ``module``; returns the program and its input/output names."""
    program = torch.export.export(module, tuple(args), dynamic_shapes=dynamic_shapes)
    input_names = [f"in{i}" for i in range(len(args))]
    n_outputs = len(program.graph_signature.user_outputs)
    output_names = [f"out{i}" for i in range(n_outputs)]
    converted = (
        TorchConverter()
        .add_exported_program(program, input_names=input_names, output_names=output_names)
        .to_coreai()
    )
    return converted, input_names, output_names


def assert_converted_matches(
    module: torch.nn.Module,
    args: Sequence[torch.Tensor],
    *,
    run_args: Sequence[torch.Tensor] | None = None,
    dynamic_shapes: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Convert ``module`` for ``args`` and compare it with eager PyTorch.

    ``run_args`` (other shapes, for dynamic programs) default to ``args``.
    Integer and bool results must match exactly; 64-bit results are compared
    after narrowing, which is what the converted program computes in.
    """
    program, input_names, output_names = convert(module, args, dynamic_shapes)
    run_args = list(run_args if run_args is not None else args)
    got = run_program(program, dict(zip(input_names, run_args, strict=True)))
    expected = module(*run_args)
    expected = pytree.tree_leaves(expected)
    assert len(expected) == len(output_names)
    for name, want in zip(output_names, expected, strict=True):
        want = want.to(_NARROW.get(want.dtype, want.dtype))
        result = got[name]
        if want.dim() == 0 and tuple(result.shape) == (1,):
            # The runtime hands 0-d outputs back as one-element vectors (the IR
            # type is 0-d: the program itself is right).
            result = result.reshape(())
        assert result.dtype == want.dtype, f"{name}: {result.dtype} vs {want.dtype}"
        assert tuple(result.shape) == tuple(want.shape), f"{name}: {result.shape} vs {want.shape}"
        if want.dtype.is_floating_point:
            torch.testing.assert_close(result, want, rtol=rtol, atol=atol, msg=name)
        else:
            torch.testing.assert_close(result, want, rtol=0, atol=0, msg=name)


class Lambda(torch.nn.Module):
    """A module around a function, so that one-line tests can export it."""

    def __init__(self, function: Any) -> None:
        super().__init__()
        self.function = function

    def forward(self, *args: torch.Tensor) -> Any:
        return self.function(*args)
