"""Reductions over dimensions.

Core AI reductions keep the reduced dimensions (size 1); they are dropped with
``shrink_dims`` unless torch's ``keepdim`` asks for them. An empty or absent
dimension list means every dimension, as in torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..registry import LoweringContext, normalize_dim, register_lowering
from ._common import as_list, axes_constant

aten = torch.ops.aten


def _arg(node: fx.Node, index: int, name: str, default: Any = None) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _axes(ctx: LoweringContext, source: Any, dims: Any) -> list[int]:
    rank = ctx.rank(source)
    dims = as_list(dims)
    if not dims:
        return list(range(rank))
    return sorted(normalize_dim(d, rank) for d in dims)


def _reduce(ctx: LoweringContext, op, x: Value, axes: list[int], keepdim: bool, rank: int) -> Value:
    if rank == 0:
        return x  # reducing a 0-d tensor over "all" of its no dimensions
    reduced = op(x, axes_constant(axes, rank))
    if keepdim:
        return reduced
    return coreai.shrink_dims(reduced, axes_constant(axes, rank))


def _simple(op, dims_index: int | None, keepdim_index: int | None):
    def lower(ctx: LoweringContext, node: fx.Node) -> Value:
        source = node.args[0]
        dims = _arg(node, dims_index, "dim") if dims_index is not None else None
        keepdim = bool(_arg(node, keepdim_index, "keepdim", False)) if keepdim_index else False
        x = ctx.value(source, ctx.result_dtype())
        return _reduce(ctx, op, x, _axes(ctx, source, dims), keepdim, ctx.rank(source))

    return lower


register_lowering(aten.sum.dim_IntList)(_simple(coreai.reduce_sum, 1, 2))
register_lowering(aten.sum.default)(_simple(coreai.reduce_sum, None, None))
register_lowering(aten.mean.dim)(_simple(coreai.reduce_mean, 1, 2))
register_lowering(aten.mean.default)(_simple(coreai.reduce_mean, None, None))
register_lowering(aten.amax.default)(_simple(coreai.reduce_max, 1, 2))
register_lowering(aten.amin.default)(_simple(coreai.reduce_min, 1, 2))
register_lowering(aten.max.default)(_simple(coreai.reduce_max, None, None))
register_lowering(aten.min.default)(_simple(coreai.reduce_min, None, None))
register_lowering(aten.prod.dim_int)(_simple(coreai.reduce_product, 1, 2))
register_lowering(aten.prod.default)(_simple(coreai.reduce_product, None, None))


def _boolean(op, dims_index: int | None, keepdim_index: int | None):
    def lower(ctx: LoweringContext, node: fx.Node) -> Value:
        source = node.args[0]
        dims = _arg(node, dims_index, "dim") if dims_index is not None else None
        keepdim = bool(_arg(node, keepdim_index, "keepdim", False)) if keepdim_index else False
        x = ctx.value(source)
        if ctx.dtype(source) != torch.bool:
            x = coreai.broadcasting_not_equal(x, ctx.constant(0, ctx.dtype(source)))
        result = _reduce(ctx, op, x, _axes(ctx, source, dims), keepdim, ctx.rank(source))
        return ctx.cast(result, ctx.result_dtype())

    return lower


register_lowering(aten.any.dim, aten.any.dims)(_boolean(coreai.any_, 1, 2))
register_lowering(aten.any.default)(_boolean(coreai.any_, None, None))
register_lowering(aten.all.dim, aten.all.dims)(_boolean(coreai.all_, 1, 2))
register_lowering(aten.all.default)(_boolean(coreai.all_, None, None))


def _argmax(ctx: LoweringContext, x: Value, dim: int, keepdim: bool, rank: int) -> Value:
    """Index of the first maximum along ``dim`` as si32 (torch: int64)."""
    if rank == 0:
        return ctx.constant(0, torch.int32)
    index = coreai.argmax(x, np.int32(dim))
    index = ctx.cast(index, torch.int32)
    if keepdim:
        return index
    return coreai.shrink_dims(index, axes_constant([dim], rank))


def _negated(ctx: LoweringContext, x: Value, dtype: torch.dtype) -> Value:
    """Order-reversing map, so that argmin is an argmax."""
    if dtype == torch.bool:
        return coreai.not_(x)
    return coreai.broadcasting_sub(ctx.constant(0, dtype), x)


def _arg_reduction(ctx: LoweringContext, node: fx.Node, minimum: bool) -> Value:
    source = node.args[0]
    dim = _arg(node, 1, "dim")
    keepdim = bool(_arg(node, 2, "keepdim", False))
    dtype = ctx.dtype(source)
    x = ctx.value(source)
    if minimum:
        x = _negated(ctx, x, dtype)
    rank = ctx.rank(source)
    if dim is None:
        # Over the flattened tensor.
        x = coreai.reshape(x, np.array([-1], dtype=np.int32)) if rank != 1 else x
        index = _argmax(ctx, x, 0, False, 1)
        if keepdim:
            index = coreai.reshape(index, np.ones(rank, dtype=np.uint32))
        return index
    return _argmax(ctx, x, normalize_dim(dim, rank), keepdim, rank)


@register_lowering(aten.argmax.default)
def argmax(ctx: LoweringContext, node: fx.Node) -> Value:
    return _arg_reduction(ctx, node, minimum=False)


@register_lowering(aten.argmin.default)
def argmin(ctx: LoweringContext, node: fx.Node) -> Value:
    return _arg_reduction(ctx, node, minimum=True)


def _values_and_indices(ctx: LoweringContext, node: fx.Node, minimum: bool) -> list[Value]:
    source, dim = node.args[:2]
    keepdim = bool(_arg(node, 2, "keepdim", False))
    rank = ctx.rank(source)
    dim = normalize_dim(dim, rank)
    x = ctx.value(source)
    op = coreai.reduce_min if minimum else coreai.reduce_max
    values = _reduce(ctx, op, x, [dim], keepdim, rank)
    key = _negated(ctx, x, ctx.dtype(source)) if minimum else x
    return [values, _argmax(ctx, key, dim, keepdim, rank)]


@register_lowering(aten.max.dim)
def max_dim(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    return _values_and_indices(ctx, node, minimum=False)


@register_lowering(aten.min.dim)
def min_dim(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    return _values_and_indices(ctx, node, minimum=True)


@register_lowering(aten.var.correction, aten.var.dim)
def var(ctx: LoweringContext, node: fx.Node) -> Value:
    source = node.args[0]
    dims = _arg(node, 1, "dim")
    if node.target in (aten.var.dim, aten.std.dim):
        unbiased = _arg(node, 2, "unbiased", True)
        correction = 1 if unbiased else 0
        keepdim = bool(_arg(node, 3, "keepdim", False))
    else:
        correction = node.kwargs.get("correction")
        correction = 1 if correction is None else correction
        keepdim = bool(node.kwargs.get("keepdim", False))
    dtype = ctx.result_dtype()
    rank = ctx.rank(source)
    axes = _axes(ctx, source, dims)
    x = ctx.value(source, dtype)
    mean = coreai.reduce_mean(x, axes_constant(axes, rank))
    centered = coreai.broadcasting_sub(x, mean)
    squares = coreai.reduce_sum(
        coreai.broadcasting_mul(centered, centered), axes_constant(axes, rank)
    )
    count = _element_count(ctx, source, axes, dtype)
    denominator = coreai.broadcasting_sub(count, ctx.constant(correction, dtype))
    # torch gives inf/nan when count <= correction; max(.., 0) keeps that sign.
    denominator = coreai.broadcasting_maximum(denominator, ctx.constant(0, dtype))
    result = coreai.broadcasting_divide(squares, denominator)
    if keepdim:
        return result
    return coreai.shrink_dims(result, axes_constant(axes, rank))


@register_lowering(aten.std.correction, aten.std.dim)
def std(ctx: LoweringContext, node: fx.Node) -> Value:
    # Same arguments as var's overloads of the same names.
    return coreai.sqrt(var(ctx, node))


def _element_count(ctx: LoweringContext, source: Any, axes: list[int], dtype: torch.dtype) -> Value:
    sizes = [ctx.size(source, axis) for axis in axes]
    if all(isinstance(s, int) for s in sizes):
        return ctx.constant(int(np.prod(sizes)) if sizes else 1, dtype)
    count = ctx.scalar(1)
    for size in sizes:
        count = coreai.broadcasting_mul(
            count, size if isinstance(size, Value) else ctx.scalar(size)
        )
    return ctx.cast(count, dtype)
