"""Running reductions and differences along a dimension.

``cumsum`` and ``cumprod`` are one ``coreai.scan``; ``diff`` subtracts
neighbouring slices.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import normalize_dim
from ._layout import rank

aten = torch.ops.aten


def _scan(ctx: LoweringContext, combiner: str) -> Value:
    # torch accumulates in the result dtype (int64 for bool and integer inputs).
    x = ctx.value(ctx.arg("self"), ctx.result_dtype())
    if rank(x) == 0:
        return x
    axis = normalize_dim(ctx.arg("dim"), rank(x))
    return coreai.scan(x, np.array(axis, dtype=np.uint32), np.array(False), combiner)


@register_lowering(aten.cumsum.default)
def lower_cumsum(ctx: LoweringContext, node: fx.Node) -> Value:
    return _scan(ctx, "sum")


@register_lowering(aten.cumprod.default)
def lower_cumprod(ctx: LoweringContext, node: fx.Node) -> Value:
    return _scan(ctx, "product")


@register_lowering(aten.diff.default)
def lower_diff(ctx: LoweringContext, node: fx.Node) -> Value:
    x_arg, order, dim = ctx.arg("self"), ctx.arg("n"), ctx.arg("dim")
    parts = [p for p in (ctx.arg("prepend"), x_arg, ctx.arg("append")) if p is not None]
    dtype = ctx.result_dtype()
    axis = normalize_dim(dim, ctx.rank(x_arg))
    sizes: list[Any] = list(ctx.fake(x_arg).shape)
    sizes[axis] = sum(ctx.fake(p).shape[axis] for p in parts)
    values = [ctx.value(p, dtype) for p in parts]
    x = values[0] if len(values) == 1 else coreai.concat(np.int32(axis), values)
    for _ in range(order):
        sizes[axis] = sizes[axis] - 1
        later = _shifted(ctx, x, axis, sizes, 1)
        earlier = _shifted(ctx, x, axis, sizes, 0)
        if dtype == torch.bool:
            # torch's diff of booleans is their exclusive or.
            x = coreai.broadcasting_not_equal(later, earlier)
        else:
            x = coreai.broadcasting_sub(later, earlier)
    return x


def _shifted(ctx: LoweringContext, x: Value, axis: int, sizes: list[Any], start: int) -> Value:
    """The ``sizes``-shaped block of ``x`` that starts at ``start`` along ``axis``."""
    starts = [0] * len(sizes)
    starts[axis] = start
    ends = list(sizes)
    ends[axis] = sizes[axis] + start
    strides = np.ones(len(sizes), dtype=np.int32)
    return coreai.slice_(
        x, np.array(starts, dtype=np.int32), ctx.shape_tensor(ends, unsigned=False), strides
    )
