"""triu and tril: the input where a (possibly symbolic) triangular mask holds, else 0.

Kept out of the decomposition table: with static sizes the mask is a constant,
so the op is a single select instead of two aranges, a subtraction, a
comparison and a select.
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
from ._layout import unsqueeze

aten = torch.ops.aten


def _keep_mask(ctx: LoweringContext, rows: Any, cols: Any, diagonal: int, upper: bool) -> Value:
    """Boolean [rows, cols]: true where col - row >= diagonal (upper) or <= diagonal (lower)."""
    if isinstance(rows, int) and isinstance(cols, int):
        ones = np.ones((rows, cols), dtype=np.bool_)
        mask = np.triu(ones, diagonal) if upper else np.tril(ones, diagonal)
        return coreai.constant(mask)
    row = coreai.range_(np.int32(0), ctx.scalar(rows), np.int32(1))
    col = coreai.range_(np.int32(0), ctx.scalar(cols), np.int32(1))
    offset = coreai.broadcasting_sub(unsqueeze(col, 0), unsqueeze(row, 1))
    bound = np.int32(diagonal)
    if upper:
        # col - row >= d  <=>  not (d > col - row)
        return coreai.not_(coreai.broadcasting_greater(bound, offset))
    return coreai.not_(coreai.broadcasting_greater(offset, bound))


def _triangle(ctx: LoweringContext, upper: bool) -> Value:
    x_arg, diagonal = ctx.arg("self"), ctx.arg("diagonal")
    sizes = list(ctx.fake(x_arg).shape)
    mask = _keep_mask(ctx, sizes[-2], sizes[-1], int(diagonal), upper)
    dtype = ctx.result_dtype()
    return coreai.broadcasting_where(mask, ctx.value(x_arg), ctx.constant(0, dtype))


@register_lowering(aten.triu.default, keep_in_export=True)
def lower_triu(ctx: LoweringContext, node: fx.Node) -> Value:
    return _triangle(ctx, upper=True)


@register_lowering(aten.tril.default, keep_in_export=True)
def lower_tril(ctx: LoweringContext, node: fx.Node) -> Value:
    return _triangle(ctx, upper=False)
