"""Helpers of the compression ops and modules that coreai-opt imports.

>>> import torch
>>> repeat_tensor_as(torch.tensor([[1.0], [2.0]]), torch.Size([2, 3])).tolist()
[[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]
>>> int_dtype_range(torch.int4)
(-8, 7)
"""

from __future__ import annotations

from typing import Any

import torch

# torch's sub-byte dtypes, which torch.iinfo does not describe: (signed, bits).
_SUB_BYTE: dict[torch.dtype, tuple[bool, int]] = {
    getattr(torch, name): (name.startswith("int"), int(name.lstrip("uint")))
    for name in [f"{sign}int{bits}" for sign in ("", "u") for bits in range(1, 8)]
    if hasattr(torch, name)
}


def int_dtype_bits(dtype: torch.dtype) -> int:
    """The width of an integer dtype, sub-byte ones included."""
    if dtype in _SUB_BYTE:
        return _SUB_BYTE[dtype][1]
    return torch.iinfo(dtype).bits


def int_dtype_range(dtype: torch.dtype) -> tuple[int, int]:
    """The least and greatest value of an integer dtype, sub-byte ones included."""
    if dtype in _SUB_BYTE:
        signed, bits = _SUB_BYTE[dtype]
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    info = torch.iinfo(dtype)
    return info.min, info.max


def repeat_tensor_as(tensor: torch.Tensor, target_shape: torch.Size) -> torch.Tensor:
    """``tensor`` with each of its first ``len(target_shape)`` dims repeated blockwise.

    Each element of a per-block tensor (a scale of shape ``[rows, blocks]``)
    stands for a block of consecutive elements of the target; each target
    size must be a multiple of the tensor's.
    """
    if tensor.dim() < len(target_shape):
        raise ValueError(
            f"repeat_tensor_as: a tensor of rank {tensor.dim()} cannot cover the rank "
            f"{len(target_shape)} shape {list(target_shape)}"
        )
    for axis, size in enumerate(target_shape):
        blocks = tensor.shape[axis]
        if size % blocks:
            raise ValueError(
                f"repeat_tensor_as: size {size} of dimension {axis} is not a multiple of "
                f"{blocks} (tensor shape {list(tensor.shape)}, target {list(target_shape)})"
            )
        if size != blocks:
            tensor = tensor.repeat_interleave(size // blocks, dim=axis)
    return tensor


def wrap_for_parametrization(module_class: type[torch.nn.Module]) -> type[torch.nn.Module]:
    """``module_class`` as a parametrization: its forward takes (and ignores) the weight.

    ``torch.nn.utils.parametrize.register_parametrization`` calls a
    parametrization with the original weight; a compression module computes
    the weight from its own buffers instead.
    """

    class Parametrization(module_class):  # type: ignore[misc, valid-type]
        def forward(self, _original: Any) -> torch.Tensor:
            return super().forward()

    Parametrization.__name__ = Parametrization.__qualname__ = (
        f"{module_class.__name__}Parametrization"
    )
    return Parametrization
