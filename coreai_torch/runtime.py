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
    program: Any,
    inputs: dict[str, torch.Tensor],
    entrypoint: str = "main",
    state: dict[str, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Runs one entry point of an ``AIProgram``; returns its outputs by name.

    The program is saved as an asset in a temporary directory, loaded by the
    runtime and called once. ``state`` gives a stateful program's states by
    name; the call writes their new values into those tensors. To call a
    program several times (decode steps), use :class:`LoadedProgram`.
    """
    with LoadedProgram(program) as loaded:
        return loaded.run(inputs, entrypoint, state)


class LoadedProgram:
    """An ``AIProgram`` saved and loaded in the runtime once, for many calls.

    States are torch tensors the caller keeps: each call reads them and writes
    their new values back, so entry points that name the same state (prefill
    and decode) share it.

    >>> import torch
    >>> from coreai_torch import TorchConverter
    >>> class Counter(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.register_buffer("count", torch.zeros(1))
    ...     def forward(self, x):
    ...         self.count.add_(1)
    ...         return x * self.count
    >>> ep = torch.export.export(Counter(), (torch.ones(2),))
    >>> program = TorchConverter().add_exported_program(
    ...     ep, input_names=["x"], output_names=["y"], state_names=["count"]).to_coreai()
    >>> count = torch.zeros(1)
    >>> with LoadedProgram(program) as loaded:
    ...     _ = loaded.run({"x": torch.ones(2)}, state={"count": count})
    ...     loaded.run({"x": torch.ones(2)}, state={"count": count})["y"]
    tensor([2., 2.])
    """

    def __init__(self, program: Any) -> None:
        self._program = program
        self._loop: asyncio.AbstractEventLoop | None = None
        self._directory: tempfile.TemporaryDirectory | None = None
        self._executable: Any = None
        self._model: Any = None
        self._functions: dict[str, Any] = {}

    def __enter__(self) -> LoadedProgram:
        self._loop = asyncio.new_event_loop()
        self._directory = tempfile.TemporaryDirectory(prefix="coreai_torch_run_")
        try:
            asset = self._program.save_asset(Path(self._directory.name) / "program.aimodel")
            self._executable = asset.executable()
            self._model = self._loop.run_until_complete(self._executable.__aenter__())
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._model is not None:
                self._loop.run_until_complete(self._executable.__aexit__(None, None, None))
        finally:
            self._model = self._executable = None
            self._functions.clear()
            if self._directory is not None:
                self._directory.cleanup()
                self._directory = None
            if self._loop is not None:
                self._loop.close()
                self._loop = None

    def run(
        self,
        inputs: dict[str, torch.Tensor],
        entrypoint: str = "main",
        state: dict[str, torch.Tensor] | None = None,
    ) -> dict[str, torch.Tensor]:
        """Call ``entrypoint``; returns its outputs and updates ``state`` in place."""
        from coreai.runtime import NDArray

        if self._model is None:
            raise RuntimeError("LoadedProgram.run outside its `with` block")
        function = self._functions.get(entrypoint)
        if function is None:
            function = self._functions[entrypoint] = self._model.load_function(entrypoint)
        arrays = {name: NDArray(_to_numpy(t)) for name, t in inputs.items()}
        states = {name: NDArray(_to_numpy(t)) for name, t in (state or {}).items()}
        outputs = self._loop.run_until_complete(function(arrays, state=states))
        for name, array in states.items():
            # The runtime hands a 0-d state back with shape [1].
            state[name].copy_(_to_torch(array.numpy()).reshape(state[name].shape))
        return {name: _to_torch(value.numpy().copy()) for name, value in outputs.items()}
