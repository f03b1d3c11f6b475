"""Joining and splitting: cat, stack, split, unbind, repeat/tile.

``stack``, ``chunk`` and ``tile`` reach the converter as ``cat`` of
``unsqueeze``, ``split_with_sizes`` and ``repeat`` after decomposition; the
whole-op lowerings here also serve programs that were not decomposed.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..constants import i32
from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import normalize_dim
from .views import _slice

aten = torch.ops.aten


@register_lowering(aten.cat.default, aten.concat.default)
def cat(ctx: LoweringContext, node: fx.Node) -> Value:
    tensors, dim = list(ctx.arg("tensors")), ctx.arg("dim")
    dtype = ctx.result_dtype()
    rank = ctx.fake().dim()
    # torch skips legacy empty 1-D tensors ([0]) whatever the other shapes are.
    kept = [
        t
        for t in tensors
        if not (ctx.rank(t) == 1 and _is_zero(ctx.fake(t).shape[0]) and rank != 1)
    ]
    values = [ctx.value(t, dtype) for t in kept or tensors]
    if len(values) == 1:
        return values[0]
    return coreai.concat(i32(normalize_dim(dim, rank)), values)


def _is_zero(size) -> bool:
    return not isinstance(size, torch.SymInt) and int(size) == 0


@register_lowering(aten.stack.default)
def stack(ctx: LoweringContext, node: fx.Node) -> Value:
    tensors = list(ctx.arg("tensors"))
    dtype = ctx.result_dtype()
    dim = normalize_dim(ctx.arg("dim"), ctx.fake().dim())
    axis = np.array([dim], dtype=np.int32)
    values = [coreai.expand_dims(ctx.value(t, dtype), axis) for t in tensors]
    return values[0] if len(values) == 1 else coreai.concat(np.int32(dim), values)


def _pieces(ctx: LoweringContext, source, dim: int) -> list[Value]:
    """One slice per result of a split node, sized from its fake results."""
    results = ctx.fake()
    pieces = []
    start = 0
    for fake in results:
        length = fake.shape[dim]
        pieces.append(_slice(ctx, source, dim, start, length, 1))
        start = start + length
    return pieces


@register_lowering(
    aten.split_with_sizes.default,
    aten.split.Tensor,
    aten.split_with_sizes_copy.default,
    aten.chunk.default,
)
def split(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    # The number and sizes of the pieces are those of torch's results.
    source = ctx.arg("self")
    return _pieces(ctx, source, normalize_dim(ctx.arg("dim"), ctx.rank(source)))


@register_lowering(aten.unbind.int)
def unbind(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    source = ctx.arg("self")
    dim = normalize_dim(ctx.arg("dim"), ctx.rank(source))
    axes = np.array([dim], dtype=np.int32)
    return [coreai.shrink_dims(piece, axes) for piece in _pieces_of_one(ctx, source, dim)]


def _pieces_of_one(ctx: LoweringContext, source, dim: int) -> list[Value]:
    size = ctx.fake(source).shape[dim]
    if isinstance(size, torch.SymInt):
        raise NotImplementedError("unbind along a symbolic dimension has no fixed result count")
    return [_slice(ctx, source, dim, i, 1, 1) for i in range(int(size))]


def _repeat(ctx: LoweringContext, source: fx.Node, repeats: list) -> Value:
    """``source`` repeated ``repeats[d]`` times along each dimension d (new leading ones too)."""
    x = ctx.value(source)
    rank = ctx.rank(source)
    if len(repeats) > rank:
        # Leading new dimensions of size 1, then tile.
        new_axes = np.arange(len(repeats) - rank, dtype=np.int32)
        x = coreai.expand_dims(x, new_axes)
    if all(isinstance(r, int) and r == 1 for r in repeats):
        return x
    return coreai.tile(x, ctx.shape_tensor(repeats))


@register_lowering(aten.repeat.default)
def repeat(ctx: LoweringContext, node: fx.Node) -> Value:
    return _repeat(ctx, ctx.arg("self"), list(ctx.arg("repeats")))


@register_lowering(aten.tile.default)
def tile(ctx: LoweringContext, node: fx.Node) -> Value:
    source, dims = ctx.arg("self"), list(ctx.arg("dims"))
    # tile repeats the trailing dimensions when given fewer factors.
    return _repeat(ctx, source, [1] * (ctx.rank(source) - len(dims)) + dims)


@register_lowering(aten.repeat_interleave.self_int)
def repeat_interleave(ctx: LoweringContext, node: fx.Node) -> Value:
    """Each element ``repeats`` times in a row along ``dim`` (the flattened input without one)."""
    source, repeats, dim = ctx.arg("self"), ctx.arg("repeats"), ctx.arg("dim")
    x = ctx.value(source)
    sizes = list(ctx.fake(source).shape)
    if dim is None:
        x = coreai.reshape(x, np.array([-1], dtype=np.int32))
        sizes, axis = [ctx.fake(source).numel()], 0
    else:
        axis = normalize_dim(dim, len(sizes))
    widened = coreai.expand_dims(x, np.array([axis + 1], dtype=np.int32))
    target = [*sizes[: axis + 1], repeats, *sizes[axis + 1 :]]
    widened = coreai.broadcast_to(widened, ctx.shape_tensor(target))
    return coreai.reshape(widened, ctx.shape_of(node))
