"""Running reductions along a dimension: cumsum and cumprod, as ``coreai.scan``."""

from __future__ import annotations

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..registry import LoweringContext, normalize_dim, register_lowering
from ._layout import rank

aten = torch.ops.aten


def _scan(ctx: LoweringContext, node: fx.Node, combiner: str) -> Value:
    x_arg, dim = node.args[:2]
    # torch accumulates in the result dtype (int64 for bool and integer inputs).
    x = ctx.value(x_arg, ctx.result_dtype())
    if rank(x) == 0:
        return x
    axis = normalize_dim(dim, rank(x))
    return coreai.scan(x, np.array(axis, dtype=np.uint32), np.array(False), combiner)


@register_lowering(aten.cumsum.default)
def lower_cumsum(ctx: LoweringContext, node: fx.Node) -> Value:
    return _scan(ctx, node, "sum")


@register_lowering(aten.cumprod.default)
def lower_cumprod(ctx: LoweringContext, node: fx.Node) -> Value:
    return _scan(ctx, node, "product")
