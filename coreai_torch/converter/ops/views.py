"""Views and layout: view/reshape, permute, expand, squeeze, slice, select, flip, roll.

Core AI has value semantics, so a view is a new tensor. Target shapes are
taken from the node's fake result, which resolves ``-1`` and is symbolic where
the program is; symbolic entries become shape computations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import RankedTensorType, ShapedType, Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import as_list, normalize_dim

aten = torch.ops.aten


def _reshape_to_result(ctx: LoweringContext, node: fx.Node) -> Value:
    return coreai.reshape(ctx.value(ctx.arg("self")), ctx.shape_of(node))


register_lowering(
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.view_copy.default,
    aten.flatten.using_ints,
    aten.unflatten.int,
)(_reshape_to_result)


def _identity(ctx: LoweringContext, node: fx.Node) -> Value:
    return ctx.value(ctx.arg("self"))


register_lowering(
    aten.alias.default,
    aten.clone.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
    aten.contiguous.default,
)(_identity)


def _transpose(x: Value, permutation: list[int]) -> Value:
    if permutation == sorted(permutation):
        return x
    return coreai.transpose(x, np.array(permutation, dtype=np.uint32))


@register_lowering(aten.permute.default, aten.permute_copy.default)
def permute(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    rank = ctx.rank(source)
    return _transpose(ctx.value(source), [normalize_dim(d, rank) for d in ctx.arg("dims")])


@register_lowering(aten.transpose.int)
def transpose(ctx: LoweringContext, node: fx.Node) -> Value:
    source, a, b = ctx.arg("self"), ctx.arg("dim0"), ctx.arg("dim1")
    rank = ctx.rank(source)
    permutation = list(range(rank))
    a, b = normalize_dim(a, rank), normalize_dim(b, rank)
    permutation[a], permutation[b] = permutation[b], permutation[a]
    return _transpose(ctx.value(source), permutation)


@register_lowering(aten.mT.default)
def matrix_transpose(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    rank = ctx.rank(source)
    permutation = [*range(rank - 2), rank - 1, rank - 2]
    return _transpose(ctx.value(source), permutation)


@register_lowering(aten.t.default)
def t(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    return _transpose(ctx.value(source), list(range(ctx.rank(source)))[::-1])


@register_lowering(aten.expand.default, aten.expand_copy.default)
def expand(ctx: LoweringContext, node: fx.Node) -> Value:
    return coreai.broadcast_to(ctx.value(ctx.arg("self")), ctx.shape_of(node))


@register_lowering(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    dim = normalize_dim(ctx.arg("dim"), ctx.rank(source) + 1)
    return coreai.expand_dims(ctx.value(source), np.array([dim], dtype=np.int32))


@register_lowering(
    aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default, aten.squeeze_copy.dims
)
def squeeze(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    fake = ctx.fake(source)
    rank = fake.dim()
    # squeeze.default has no dim: every dimension of size 1 goes.
    dims = as_list(ctx.args.get("dim", list(range(rank))))
    # torch drops only the listed dimensions whose size is 1.
    axes = sorted(
        {
            normalize_dim(d, rank)
            for d in dims
            if rank and _is_one(fake.shape[normalize_dim(d, rank)])
        }
    )
    x = ctx.value(source)
    if not axes:
        return x
    return coreai.shrink_dims(x, np.array(axes, dtype=np.int32))


def _is_one(size: Any) -> bool:
    return not isinstance(size, torch.SymInt) and int(size) == 1


def _slice(
    ctx: LoweringContext, source: Any, dim: int, start: Any, length: Any, step: int
) -> Value:
    """Elements ``start, start+step, ...`` (``length`` of them) along ``dim``."""
    fake = ctx.fake(source)
    rank = fake.dim()
    x = ctx.value(source)
    starts: list[Any] = [0] * rank
    starts[dim] = start
    strides = [1] * rank
    strides[dim] = step
    ends: list[Any] = list(fake.shape)
    static = ctx.is_static([start, length]) and ctx.is_static(fake.shape)
    if static:
        ends[dim] = start + (length - 1) * step + 1 if length > 0 else start
        return coreai.slice_(
            x,
            np.array(starts, dtype=np.int32),
            np.array(ends, dtype=np.int32),
            np.array(strides, dtype=np.int32),
        )
    # end = start + (length - 1) * step + 1 computed in the program. A zero
    # length gives end = start - step + 1 <= start: an empty slice as well.
    span = coreai.broadcasting_mul(
        coreai.broadcasting_sub(ctx.scalar(length), ctx.scalar(1)), ctx.scalar(step)
    )
    end = coreai.broadcasting_add(coreai.broadcasting_add(ctx.scalar(start), span), ctx.scalar(1))
    end_vector = [ctx.scalar(e) if i != dim else end for i, e in enumerate(ends)]
    start_vector = [ctx.scalar(s) for s in starts]
    sliced = coreai.slice_(
        x,
        _vector(start_vector),
        _vector(end_vector),
        np.array(strides, dtype=np.int32),
    )
    # The op cannot infer any size from run-time bounds; restore the sizes
    # torch knows statically (a cast to the same element type refines the shape).
    sizes = list(fake.shape)
    sizes[dim] = length
    known = RankedTensorType.get(
        [s if ctx.is_static([s]) else ShapedType.get_dynamic_size() for s in sizes],
        x.type.element_type,
    )
    return coreai.cast(sliced, known)


def _vector(scalars: list[Value]) -> Value:
    pieces = [coreai.expand_dims(s, np.array([0], dtype=np.int32)) for s in scalars]
    return pieces[0] if len(pieces) == 1 else coreai.concat(np.int32(0), pieces)


def _start(size: Any, start: Any) -> Any:
    if start is None:
        return 0
    if isinstance(start, int) and start < 0:
        # A negative start counts from the end (clamped at 0 when static).
        total = size + start
        return max(total, 0) if isinstance(total, int) else total
    if isinstance(start, int) and isinstance(size, int):
        return min(start, size)
    return start


@register_lowering(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    dim = normalize_dim(ctx.arg("dim"), ctx.rank(source))
    start, step = ctx.arg("start"), ctx.arg("step")
    size = ctx.fake(source).shape[dim]
    length = ctx.fake().shape[dim]
    return _slice(ctx, source, dim, _start(size, start), length, step)


@register_lowering(aten.narrow.default)
def narrow(ctx: LoweringContext, node: fx.Node) -> Value:
    source, start, length = ctx.arg("self"), ctx.arg("start"), ctx.arg("length")
    dim = normalize_dim(ctx.arg("dim"), ctx.rank(source))
    size = ctx.fake(source).shape[dim]
    return _slice(ctx, source, dim, _start(size, start), length, 1)


@register_lowering(aten.select.int, aten.select_copy.int)
def select(ctx: LoweringContext, node: fx.Node) -> Value:
    source, index = ctx.arg("self"), ctx.arg("index")
    dim = normalize_dim(ctx.arg("dim"), ctx.rank(source))
    size = ctx.fake(source).shape[dim]
    start = size + index if isinstance(index, int) and index < 0 else index
    picked = _slice(ctx, source, dim, start, 1, 1)
    return coreai.shrink_dims(picked, np.array([dim], dtype=np.int32))


@register_lowering(aten.flip.default)
def flip(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    rank = ctx.rank(source)
    axes = sorted({normalize_dim(d, rank) for d in ctx.arg("dims")})
    x = ctx.value(source)
    return coreai.reverse(x, np.array(axes, dtype=np.int32)) if axes else x


@register_lowering(aten.roll.default, keep_in_export=True)
def roll(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    shifts, dims = as_list(ctx.arg("shifts")), as_list(ctx.arg("dims"))
    fake = ctx.fake(source)
    if not ctx.is_static(fake.shape):
        raise NotImplementedError("roll of a tensor with symbolic sizes is not converted yet")
    x = ctx.value(source)
    if not dims:
        # Roll the flattened tensor, then restore the shape.
        flat = coreai.reshape(x, np.array([fake.numel()], dtype=np.uint32))
        rolled = _roll_axis(flat, [fake.numel()], 0, shifts[0])
        return coreai.reshape(rolled, np.array(list(fake.shape), dtype=np.uint32))
    shape = [int(s) for s in fake.shape]
    for shift, dim in zip(shifts, dims, strict=True):
        x = _roll_axis(x, shape, normalize_dim(dim, len(shape)), shift)
    return x


def _roll_axis(x: Value, shape: list[int], dim: int, shift: int) -> Value:
    size = shape[dim]
    if size == 0:
        return x
    shift %= size
    if shift == 0:
        return x

    def part(begin: int, end: int) -> Value:
        starts = [0] * len(shape)
        ends = list(shape)
        starts[dim], ends[dim] = begin, end
        return coreai.slice_(
            x,
            np.array(starts, dtype=np.int32),
            np.array(ends, dtype=np.int32),
            np.ones(len(shape), dtype=np.int32),
        )

    return coreai.concat(np.int32(dim), [part(size - shift, size), part(0, size - shift)])
