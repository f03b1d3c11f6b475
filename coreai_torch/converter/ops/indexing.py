"""Indexing: embedding, index_select, gather, tensor indexing, scatter, slice_scatter.

Index tensors reach the IR as ``si32`` (int64 is narrowed on entry). Core AI's
``gather_nd``/``scatter_nd`` wrap a negative index once, as torch does for
``x[idx]``; ``gather``, ``index_select`` and ``embedding`` reject negative
indices in torch, so nothing else needs handling.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Attribute, Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import normalize_dim
from ._layout import broadcast, i32, permute, rank, take, unsqueeze

aten = torch.ops.aten

# Core AI caps a slice bound at the dimension size; torch uses INT64_MAX for "to the end".
_I32_MAX = 2**31 - 1


def _indices(ctx: LoweringContext, index_arg: Any) -> Value:
    return ctx.value(index_arg, torch.int32)


@register_lowering(aten.embedding.default)
def lower_embedding(ctx: LoweringContext, node: fx.Node) -> Value:
    # padding_idx and the gradient options only matter for training.
    weight = ctx.value(ctx.arg("weight"))
    return coreai.gather_nd(weight, unsqueeze(_indices(ctx, ctx.arg("indices")), -1))


@register_lowering(aten.index_select.default)
def lower_index_select(ctx: LoweringContext, node: fx.Node) -> Value:
    x, dim = ctx.value(ctx.arg("self")), ctx.arg("dim")
    if rank(x) == 0:
        return x
    index = _indices(ctx, ctx.arg("index"))
    if rank(index) == 0:
        index = unsqueeze(index, 0)
    return take(x, normalize_dim(dim, rank(x)), index)


def _slice_to(ctx: LoweringContext, value: Value, sizes: list[Any]) -> Value:
    """The leading ``sizes`` block of ``value`` (static sizes only differ)."""
    current = list(value.type.shape)
    if all(isinstance(s, int) and s == c for s, c in zip(sizes, current, strict=True)):
        return value
    if not ctx.is_static(sizes):
        return value
    n = len(sizes)
    return coreai.slice_(value, i32([0] * n), i32(sizes), i32([1] * n))


@register_lowering(aten.gather.default)
def lower_gather(ctx: LoweringContext, node: fx.Node) -> Value:
    x_arg, dim, index_arg = ctx.arg("self"), ctx.arg("dim"), ctx.arg("index")
    x = ctx.value(x_arg)
    index = _indices(ctx, index_arg)
    if rank(x) == 0:
        return x
    axis = normalize_dim(dim, rank(x))
    # torch lets the index be smaller than the input on the other axes;
    # Core AI wants them equal, so the input is cut to the index's extent.
    sizes = list(ctx.fake(index_arg).shape)
    sizes[axis] = ctx.fake(x_arg).shape[axis]
    x = _slice_to(ctx, x, sizes)
    return coreai.gather_along_axis(x, index, np.array(axis, dtype=np.int32))


def _broadcast_indices(ctx: LoweringContext, index_args: list[fx.Node]) -> tuple[list[Value], list]:
    """Index tensors broadcast to their common shape, and that shape."""
    fakes = [ctx.fake(a) for a in index_args]
    for a, fake in zip(index_args, fakes, strict=True):
        if fake.dtype == torch.bool:
            raise NotImplementedError(
                f"{ctx.node.name}: indexing with a boolean mask ({a.name}) gives a result whose "
                "size depends on the data, which Core AI cannot express; use torch.where instead"
            )
    if len(fakes) == 1:
        return [_indices(ctx, index_args[0])], list(fakes[0].shape)  # nothing to broadcast
    shape = list(torch.broadcast_shapes(*[f.shape for f in fakes]))
    # With symbolic sizes a broadcast result has fully dynamic dims; broadcast
    # every index then, so that all of them have the same type for the concat.
    everywhere = not ctx.is_static(shape) and any(list(f.shape) != shape for f in fakes)
    values = []
    for a, fake in zip(index_args, fakes, strict=True):
        value = _indices(ctx, a)
        if everywhere or list(fake.shape) != shape:
            value = broadcast(ctx, value, shape)
        values.append(value)
    return values, shape


def _stack_last(values: list[Value]) -> Value:
    columns = [unsqueeze(v, -1) for v in values]
    if len(columns) == 1:
        return columns[0]
    return coreai.concat(np.int32(rank(columns[0]) - 1), columns)


def _advanced_positions(indices: list[Any]) -> list[int]:
    return [i for i, index in enumerate(indices) if index is not None]


@register_lowering(aten.index.Tensor)
def lower_index(ctx: LoweringContext, node: fx.Node) -> Value:
    x = ctx.value(ctx.arg("self"))
    indices = ctx.arg("indices")
    n = rank(x)
    positions = _advanced_positions(list(indices))
    values, batch_shape = _broadcast_indices(ctx, [indices[p] for p in positions])
    others = [d for d in range(n) if d not in positions]
    # Indexed dims first, then gather whole slices of the remaining dims.
    gathered = coreai.gather_nd(permute(x, positions + others), _stack_last(values))
    contiguous = positions == list(range(positions[0], positions[-1] + 1))
    if not contiguous or positions[0] == 0:
        return gathered
    # torch keeps the result of adjacent advanced indices where they stood.
    b, before = len(batch_shape), positions[0]
    order = [*range(b, b + before), *range(b), *range(b + before, b + len(others))]
    return permute(gathered, order)


@register_lowering(aten.index_put.default)
def lower_index_put(ctx: LoweringContext, node: fx.Node) -> Value:
    x_arg, indices, values_arg = ctx.arg("self"), ctx.arg("indices"), ctx.arg("values")
    if ctx.arg("accumulate"):
        raise NotImplementedError(
            f"{node.name}: index_put with accumulate=True (index_add-style) has no Core AI "
            "lowering yet; only assignment (x[idx] = v) is converted"
        )
    x = ctx.value(x_arg)
    n = rank(x)
    positions = _advanced_positions(list(indices))
    others = [d for d in range(n) if d not in positions]
    index_values, batch_shape = _broadcast_indices(ctx, [indices[p] for p in positions])
    fake_x = ctx.fake(x_arg)
    # The values' shape in torch's layout: adjacent advanced indices keep
    # their place (x[:, :, i] = v), other layouts put the indexed dims first.
    before = positions[0] if positions == list(range(positions[0], positions[-1] + 1)) else 0
    rest = [fake_x.shape[d] for d in others]
    update_shape = rest[:before] + batch_shape + rest[before:]
    updates = ctx.value(values_arg, ctx.result_dtype())
    if list(ctx.fake(values_arg).shape) != update_shape:
        updates = broadcast(ctx, updates, update_shape)
    b = len(batch_shape)
    if before:
        # Scatter along leading dims: indexed dims first, in x and in the values.
        updates = permute(
            updates,
            [*range(before, before + b), *range(before), *range(before + b, len(update_shape))],
        )
    order = positions + others
    if order == list(range(n)):
        return coreai.scatter_nd(x, _stack_last(index_values), updates)
    scattered = coreai.scatter_nd(permute(x, order), _stack_last(index_values), updates)
    return permute(scattered, [order.index(d) for d in range(n)])


@register_lowering(aten.index_copy.default)
def lower_index_copy(ctx: LoweringContext, node: fx.Node) -> Value:
    """``x.index_copy(dim, index, source)``: rows of ``source`` written at ``index`` along dim.

    A KV cache written at the positions of the new tokens. Lowered as a
    scatter along the leading dim, with ``dim`` moved there and back.
    """
    x = ctx.value(ctx.arg("self"))
    n = rank(x)
    if n == 0:
        return ctx.value(ctx.arg("source"), ctx.result_dtype())
    dim = normalize_dim(ctx.arg("dim"), n)
    index = unsqueeze(_indices(ctx, ctx.arg("index")), -1)
    source = ctx.value(ctx.arg("source"), ctx.result_dtype())
    if dim == 0:
        return coreai.scatter_nd(x, index, source)
    order = [dim, *(d for d in range(n) if d != dim)]
    scattered = coreai.scatter_nd(permute(x, order), index, permute(source, order))
    return permute(scattered, [order.index(d) for d in range(n)])


_SCATTER_MODES = {
    "sum": "add",
    "add": "add",
    "prod": "mul",
    "multiply": "mul",
    "amax": "max",
    "amin": "min",
}


def _scatter(ctx: LoweringContext, node: fx.Node, src: Value, mode: str | None) -> Value:
    x_arg, dim, index_arg = ctx.arg("self"), ctx.arg("dim"), ctx.arg("index")
    x = ctx.value(x_arg)
    axis = normalize_dim(dim, rank(x))
    index = _indices(ctx, index_arg)
    index_shape = list(ctx.fake(index_arg).shape)
    x_shape = list(ctx.fake(x_arg).shape)
    src = _slice_to(ctx, src, index_shape)
    attribute = Attribute.parse(f"#coreai.scatter_mode<{mode}>") if mode else None
    covers = all(d == axis or index_shape[d] == x_shape[d] for d in range(len(x_shape)))
    if covers:
        return coreai.scatter_along_axis(
            ctx.tensor_type(ctx.fake()), x, index, src, np.int32(axis), attribute
        )
    # Core AI wants the index to span the input on every other axis: scatter
    # into the block the index covers, then write that block back.
    if not ctx.is_static(index_shape + x_shape):
        raise NotImplementedError(
            f"{node.name}: scatter with an index smaller than the input needs static shapes"
        )
    block_shape = [x_shape[d] if d == axis else index_shape[d] for d in range(len(x_shape))]
    block = _slice_to(ctx, x, block_shape)
    block_type = ctx.tensor_type(torch.empty(block_shape, dtype=ctx.result_dtype(), device="meta"))
    scattered = coreai.scatter_along_axis(block_type, block, index, src, np.int32(axis), attribute)
    n = len(x_shape)
    return coreai.slice_update(x, i32([0] * n), i32(block_shape), i32([1] * n), scattered)


@register_lowering(aten.scatter.src, aten.scatter.reduce)
def lower_scatter_src(ctx: LoweringContext, node: fx.Node) -> Value:
    reduce = ctx.args.get("reduce", None)
    mode = _SCATTER_MODES[reduce] if reduce else None
    return _scatter(ctx, node, ctx.value(ctx.arg("src"), ctx.result_dtype()), mode)


@register_lowering(aten.scatter.value, aten.scatter.value_reduce)
def lower_scatter_value(ctx: LoweringContext, node: fx.Node) -> Value:
    reduce = ctx.args.get("reduce", None)
    mode = _SCATTER_MODES[reduce] if reduce else None
    shape = list(ctx.fake(ctx.arg("index")).shape)
    value = ctx.value(ctx.arg("value"), ctx.result_dtype())
    src = broadcast(ctx, value, shape)
    return _scatter(ctx, node, src, mode)


@register_lowering(aten.scatter_add.default)
def lower_scatter_add(ctx: LoweringContext, node: fx.Node) -> Value:
    return _scatter(ctx, node, ctx.value(ctx.arg("src"), ctx.result_dtype()), "add")


@register_lowering(aten.scatter_reduce.two)
def lower_scatter_reduce(ctx: LoweringContext, node: fx.Node) -> Value:
    reduce, include_self = ctx.arg("reduce"), ctx.arg("include_self")
    if not include_self or reduce not in _SCATTER_MODES:
        raise NotImplementedError(
            f"{node.name}: scatter_reduce is converted for reduce in "
            f"{sorted(k for k in _SCATTER_MODES if k not in ('add', 'multiply'))} with "
            f"include_self=True; got reduce={reduce!r}, include_self={include_self}"
        )
    src = ctx.value(ctx.arg("src"), ctx.result_dtype())
    return _scatter(ctx, node, src, _SCATTER_MODES[reduce])


def _slice_bounds(size: Any, start: Any, end: Any) -> tuple[Any, Any]:
    """torch's slice start/end clamped into [0, size] (sizes may be symbolic)."""
    start = 0 if start is None else start
    end = _I32_MAX if end is None else end
    if isinstance(size, int):
        if isinstance(start, int):
            start = min(max(start + size if start < 0 else start, 0), size)
        if isinstance(end, int):
            end = min(max(end + size if end < 0 else end, 0), size)
    elif isinstance(end, int) and end >= _I32_MAX:
        end = size
    return start, end


def slice_update(
    ctx: LoweringContext,
    x: Value,
    sizes: list[Any],
    src: Value,
    dim: int,
    start: Any,
    end: Any,
    step: int,
) -> Value:
    """``x`` (of torch shape ``sizes``) with ``x[..., start:end:step, ...] = src`` along ``dim``."""
    n = len(sizes)
    axis = normalize_dim(dim, n)
    start, end = _slice_bounds(sizes[axis], start, end)
    starts = [0] * n
    ends = list(sizes)
    strides = [1] * n
    starts[axis], ends[axis], strides[axis] = start, end, step
    return coreai.slice_update(
        x,
        ctx.shape_tensor(starts, unsigned=False),
        ctx.shape_tensor(ends, unsigned=False),
        i32(strides),
        src,
    )


def select_update(
    ctx: LoweringContext, x: Value, sizes: list[Any], src: Value, dim: int, index: Any
) -> Value:
    """``x`` (of torch shape ``sizes``) with ``x.select(dim, index) = src``."""
    axis = normalize_dim(dim, len(sizes))
    if isinstance(index, int) and index < 0 and isinstance(sizes[axis], int):
        index += sizes[axis]
    return slice_update(ctx, x, sizes, unsqueeze(src, axis), axis, index, index + 1, 1)


@register_lowering(aten.slice_scatter.default)
def lower_slice_scatter(ctx: LoweringContext, node: fx.Node) -> Value:
    x_arg = ctx.arg("self")
    src = ctx.value(ctx.arg("src"), ctx.result_dtype())
    sizes = list(ctx.fake(x_arg).shape)
    return slice_update(
        ctx,
        ctx.value(x_arg),
        sizes,
        src,
        ctx.arg("dim"),
        ctx.arg("start"),
        ctx.arg("end"),
        ctx.arg("step"),
    )


@register_lowering(aten.select_scatter.default)
def lower_select_scatter(ctx: LoweringContext, node: fx.Node) -> Value:
    x_arg = ctx.arg("self")
    src = ctx.value(ctx.arg("src"), ctx.result_dtype())
    sizes = list(ctx.fake(x_arg).shape)
    return select_update(ctx, ctx.value(x_arg), sizes, src, ctx.arg("dim"), ctx.arg("index"))
