"""Run a converted program in Core AI's runtime (the CPU runtime on Linux) with torch tensors.

The runtime cannot execute ``coreai.metal4_kernel`` on Linux; programs without
kernels run everywhere.

>>> import torch
>>> from coreai_torch import TorchConverter
>>> from coreai_torch.runtime import run_program
>>> class Double(torch.nn.Module):
...     def forward(self, x):
...         return x * 2
>>> ep = torch.export.export(Double(), (torch.ones(3),))
>>> program = TorchConverter().add_exported_program(
...     ep, input_names=["x"], output_names=["y"]).to_coreai()
>>> run_program(program, {"x": torch.arange(3.0)})["y"]
tensor([0., 2., 4.])
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

# Converted programs compute 64-bit values in 32 bits (see converter/dtypes.py).
_NARROWED = {torch.int64: torch.int32, torch.float64: torch.float32}


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    import ml_dtypes

    tensor = tensor.detach().cpu().contiguous()
    tensor = tensor.to(_NARROWED.get(tensor.dtype, tensor.dtype))
    if tensor.dtype == torch.bfloat16:
        return tensor.float().numpy().astype(ml_dtypes.bfloat16)
    return tensor.numpy()


def _to_torch(array: np.ndarray) -> torch.Tensor:
    import ml_dtypes

    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array))


def run_program(
    program: Any, inputs: dict[str, torch.Tensor], entrypoint: str = "main"
) -> dict[str, torch.Tensor]:
    """Runs one entry point of an ``AIProgram``; returns its outputs by name.

    The program is saved as an asset in a temporary directory, loaded by the
    runtime and called once.
    """
    from coreai.runtime import NDArray

    async def call() -> dict[str, np.ndarray]:
        with tempfile.TemporaryDirectory(prefix="coreai_torch_run_") as directory:
            asset = program.save_asset(Path(directory) / "program.aimodel")
            async with asset.executable() as model:
                function = model.load_function(entrypoint)
                arrays = {name: NDArray(_to_numpy(t)) for name, t in inputs.items()}
                outputs = await function(arrays)
                return {name: value.numpy().copy() for name, value in outputs.items()}

    return {name: _to_torch(a) for name, a in asyncio.run(call()).items()}
