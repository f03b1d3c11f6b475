"""Reductions over dimensions.

Core AI reductions keep the reduced dimensions (size 1); they are dropped with
``shrink_dims`` unless torch's ``keepdim`` asks for them. An empty or absent
dimension list means every dimension, as in torch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from .. import dtypes
from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import as_list, axes_constant, normalize_dim

aten = torch.ops.aten


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


def _dims_and_keepdim(ctx: LoweringContext) -> tuple[Any, bool]:
    """``dim`` and ``keepdim``; overloads without them reduce every dimension."""
    return ctx.args.get("dim", None), bool(ctx.args.get("keepdim", False))


def _simple(op):
    def lower(ctx: LoweringContext, node: fx.Node) -> Value:
        source = ctx.arg("self")
        dims, keepdim = _dims_and_keepdim(ctx)
        x = ctx.value(source, ctx.result_dtype())
        return _reduce(ctx, op, x, _axes(ctx, source, dims), keepdim, ctx.rank(source))

    return lower


register_lowering(aten.sum.dim_IntList, aten.sum.default)(_simple(coreai.reduce_sum))
register_lowering(aten.mean.dim, aten.mean.default)(_simple(coreai.reduce_mean))
register_lowering(aten.amax.default, aten.max.default)(_simple(coreai.reduce_max))
register_lowering(aten.amin.default, aten.min.default)(_simple(coreai.reduce_min))
register_lowering(aten.prod.dim_int, aten.prod.default)(_simple(coreai.reduce_product))


def _boolean(op):
    def lower(ctx: LoweringContext, node: fx.Node) -> Value:
        source = ctx.arg("self")
        dims, keepdim = _dims_and_keepdim(ctx)
        x = ctx.value(source)
        if ctx.dtype(source) != torch.bool:
            x = coreai.broadcasting_not_equal(x, ctx.constant(0, ctx.dtype(source)))
        result = _reduce(ctx, op, x, _axes(ctx, source, dims), keepdim, ctx.rank(source))
        return ctx.cast(result, ctx.result_dtype())

    return lower


register_lowering(aten.any.dim, aten.any.dims, aten.any.default)(_boolean(coreai.any_))
register_lowering(aten.all.dim, aten.all.dims, aten.all.default)(_boolean(coreai.all_))


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


def _arg_reduction(ctx: LoweringContext, minimum: bool) -> Value:
    source = ctx.arg("self")
    dim, keepdim = ctx.arg("dim"), bool(ctx.arg("keepdim"))
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
    return _arg_reduction(ctx, minimum=False)


@register_lowering(aten.argmin.default)
def argmin(ctx: LoweringContext, node: fx.Node) -> Value:
    return _arg_reduction(ctx, minimum=True)


def _values_and_indices(ctx: LoweringContext, minimum: bool) -> list[Value]:
    source, dim, keepdim = ctx.arg("self"), ctx.arg("dim"), bool(ctx.arg("keepdim"))
    rank = ctx.rank(source)
    dim = normalize_dim(dim, rank)
    x = ctx.value(source)
    op = coreai.reduce_min if minimum else coreai.reduce_max
    values = _reduce(ctx, op, x, [dim], keepdim, rank)
    key = _negated(ctx, x, ctx.dtype(source)) if minimum else x
    return [values, _argmax(ctx, key, dim, keepdim, rank)]


@register_lowering(aten.max.dim)
def max_dim(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    return _values_and_indices(ctx, minimum=False)


@register_lowering(aten.min.dim)
def min_dim(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    return _values_and_indices(ctx, minimum=True)


@register_lowering(aten.var.correction, aten.var.dim)
def var(ctx: LoweringContext, node: fx.Node) -> Value:
    source, dims, keepdim = ctx.arg("self"), ctx.arg("dim"), bool(ctx.arg("keepdim"))
    # var.dim says unbiased=True/False, var.correction gives the correction (default 1).
    correction = ctx.args.get("correction", None)
    if correction is None:
        correction = 1 if ctx.args.get("unbiased", True) else 0
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


def vector_norm(
    ctx: LoweringContext, x: Value, order: float, axes: list[int], rank: int, keepdim: bool
) -> Value:
    """torch.linalg.vector_norm of ``x`` (a float value) over ``axes``."""
    dtype = dtypes.torch_dtype_of(x.type)
    magnitude = coreai.abs_(x)
    if order == math.inf:
        return _reduce(ctx, coreai.reduce_max, magnitude, axes, keepdim, rank)
    if order == -math.inf:
        return _reduce(ctx, coreai.reduce_min, magnitude, axes, keepdim, rank)
    if order == 0:
        nonzero = ctx.cast(coreai.broadcasting_not_equal(x, ctx.constant(0, dtype)), dtype)
        return _reduce(ctx, coreai.reduce_sum, nonzero, axes, keepdim, rank)
    if order == 1:
        return _reduce(ctx, coreai.reduce_sum, magnitude, axes, keepdim, rank)
    if order == 2:
        squares = coreai.broadcasting_mul(x, x)
        return coreai.sqrt(_reduce(ctx, coreai.reduce_sum, squares, axes, keepdim, rank))
    powered = coreai.broadcasting_pow(magnitude, ctx.constant(order, dtype))
    total = _reduce(ctx, coreai.reduce_sum, powered, axes, keepdim, rank)
    return coreai.broadcasting_pow(total, ctx.constant(1.0 / order, dtype))


@register_lowering(aten.linalg_vector_norm.default)
def linalg_vector_norm(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    rank = ctx.rank(source)
    x = ctx.value(source, ctx.result_dtype())
    axes = _axes(ctx, source, ctx.arg("dim"))
    return vector_norm(ctx, x, float(ctx.arg("ord")), axes, rank, bool(ctx.arg("keepdim")))
