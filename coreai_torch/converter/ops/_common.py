"""Helpers shared by the op-family modules."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.ir import Value

from ..constants import i32
from ..lowering_context import LoweringContext


def normalize_dim(dim: int, rank: int) -> int:
    """A torch dimension index (possibly negative) as 0..rank-1."""
    return dim + rank if dim < 0 else dim


def _meta_like(ctx: LoweringContext, arg: Any) -> Any:
    """A stand-in for ``torch.result_type``: a meta tensor, or the Python scalar."""
    if isinstance(arg, fx.Node):
        val = ctx.fake(arg)
        if isinstance(val, torch.Tensor):
            return torch.empty([1] * val.dim(), dtype=val.dtype, device="meta")
        if isinstance(val, torch.SymBool | bool):
            return True
        if isinstance(val, torch.SymFloat | float):
            return 1.0
        return 1
    return arg


def common_dtype(ctx: LoweringContext, *args: Any) -> torch.dtype:
    """torch's type promotion over tensors and Python scalars (``result_type``)."""
    result = _meta_like(ctx, args[0])
    if not isinstance(result, torch.Tensor):
        result = torch.tensor(result, device="meta")
    for arg in args[1:]:
        dtype = torch.result_type(result, _meta_like(ctx, arg))
        result = torch.empty([1] * max(result.dim(), 1), dtype=dtype, device="meta")
    return result.dtype


def operands(ctx: LoweringContext, args: list[Any], dtype: torch.dtype) -> list[Value]:
    """Each argument as a value of ``dtype`` (tensors cast, scalars as constants)."""
    return [ctx.value(arg, dtype) for arg in args]


def axes_constant(dims: list[int], rank: int) -> Value | np.ndarray:
    """Normalised torch dims as the si32 axes vector that Core AI reductions take."""
    return i32(sorted(normalize_dim(d, rank) for d in dims))


def as_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]
