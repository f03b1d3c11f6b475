"""Sorting: sort, argsort and topk along one dimension.

Core AI sorts with ``sort`` / ``argsort``; ``topk`` is the first ``k`` of a
stable descending (or ascending) argsort, with the values gathered at those
indices. Among equal values the lower index comes first, which is one of the
orders torch allows (its ``topk`` and unstable ``sort`` leave ties unordered).
"""

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


def _ordered(ctx: LoweringContext, descending: bool) -> tuple[Value, Value, int]:
    """The input, its sort indices (si32) along ``dim``, and that dim (normalized)."""
    source = ctx.arg("self")
    x = ctx.value(source)
    axis = normalize_dim(ctx.arg("dim"), max(ctx.rank(source), 1))
    indices = coreai.argsort(x, np.int32(axis), np.array(descending), np.array(True))
    return x, indices, axis


@register_lowering(aten.sort.default, aten.sort.stable)
def sort(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    x, indices, axis = _ordered(ctx, bool(ctx.arg("descending")))
    values = coreai.gather_along_axis(x, indices, np.array(axis, dtype=np.int32))
    return [values, ctx.cast(indices, ctx.result_dtype(1))]


@register_lowering(aten.argsort.default, aten.argsort.stable)
def argsort(ctx: LoweringContext, node: fx.Node) -> Value:
    _, indices, _ = _ordered(ctx, bool(ctx.arg("descending")))
    return ctx.cast(indices, ctx.result_dtype())


@register_lowering(aten.topk.default)
def topk(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    x, order, axis = _ordered(ctx, bool(ctx.arg("largest")))
    ends = list(ctx.fake(ctx.arg("self")).shape)
    rank = len(ends)
    ends[axis] = ctx.arg("k")
    first = coreai.slice_(
        order,
        np.zeros(rank, dtype=np.int32),
        ctx.shape_tensor(ends, unsigned=False),
        np.ones(rank, dtype=np.int32),
    )
    values = coreai.gather_along_axis(x, first, np.array(axis, dtype=np.int32))
    return [values, ctx.cast(first, ctx.result_dtype(1))]
