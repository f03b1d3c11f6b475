"""softmax and log_softmax along one dimension."""

from __future__ import annotations

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import normalize_dim

aten = torch.ops.aten


def _input(ctx: LoweringContext) -> tuple[Value, int]:
    source, dim = ctx.arg("self"), ctx.arg("dim")
    return ctx.value(source, ctx.result_dtype()), normalize_dim(dim, max(ctx.rank(source), 1))


@register_lowering(aten._softmax.default, aten.softmax.int)
def softmax(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dim = _input(ctx)
    if x.type.rank == 0:
        return ctx.constant(1, ctx.result_dtype())
    return coreai.softmax(x, np.int32(dim))


@register_lowering(aten._log_softmax.default, aten.log_softmax.int)
def log_softmax(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dim = _input(ctx)
    if x.type.rank == 0:
        return ctx.constant(0, ctx.result_dtype())
    axes = np.array([dim], dtype=np.int32)
    # Shift by the maximum so that exp cannot overflow.
    shifted = coreai.broadcasting_sub(x, coreai.reduce_max(x, axes))
    return coreai.broadcasting_sub(
        shifted, coreai.log(coreai.reduce_sum(coreai.exp(shifted), axes))
    )
