"""Views and layout: view/reshape, permute, expand, squeeze, slice, select, flip, roll.

Core AI has value semantics, so a view is a new tensor. Target shapes are
taken from the node's fake result, which resolves ``-1`` and is symbolic where
the program is; symbolic entries become shape computations.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import RankedTensorType, ShapedType, Value

from ..constants import i32
from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._common import as_list, normalize_dim
from ._layout import permute

aten = torch.ops.aten


def _reshape_to_result(ctx: LoweringContext, node: fx.Node) -> Value:
    x = ctx.value(ctx.arg("self"))
    sizes = list(ctx.fake().shape)
    symbolic = [i for i, size in enumerate(sizes) if not ctx.is_static([size])]
    if not symbolic and list(x.type.shape) == sizes:
        return x  # already that shape
    if len(symbolic) == 1 and 0 not in sizes:
        # One unknown size is implied by the others: a constant shape with -1
        # needs no size computation (and keeps Core AI's shape folding away
        # from run-time shape values, which it mishandles in some chains).
        sizes[symbolic[0]] = -1
        return coreai.reshape(x, np.array(sizes, dtype=np.int32))
    return coreai.reshape(x, ctx.shape_of(node))


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


@register_lowering(aten.permute.default, aten.permute_copy.default)
def lower_permute(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    rank = ctx.rank(source)
    return permute(ctx.value(source), [normalize_dim(d, rank) for d in ctx.arg("dims")])


@register_lowering(aten.transpose.int)
def transpose(ctx: LoweringContext, node: fx.Node) -> Value:
    source, a, b = ctx.arg("self"), ctx.arg("dim0"), ctx.arg("dim1")
    rank = ctx.rank(source)
    permutation = list(range(rank))
    a, b = normalize_dim(a, rank), normalize_dim(b, rank)
    permutation[a], permutation[b] = permutation[b], permutation[a]
    return permute(ctx.value(source), permutation)


@register_lowering(aten.mT.default)
def matrixpermute(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    rank = ctx.rank(source)
    permutation = [*range(rank - 2), rank - 1, rank - 2]
    return permute(ctx.value(source), permutation)


@register_lowering(aten.t.default, aten.numpy_T.default)
def t(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    return permute(ctx.value(source), list(range(ctx.rank(source)))[::-1])


@register_lowering(aten.expand.default, aten.expand_copy.default, aten.broadcast_to.default)
def expand(ctx: LoweringContext, node: fx.Node) -> Value:
    return coreai.broadcast_to(ctx.value(ctx.arg("self")), ctx.shape_of(node))


@register_lowering(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(ctx: LoweringContext, node: fx.Node) -> Value:
    source = ctx.arg("self")
    dim = normalize_dim(ctx.arg("dim"), ctx.rank(source) + 1)
    return coreai.expand_dims(ctx.value(source), i32([dim]))


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
    return coreai.shrink_dims(x, i32(axes))


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
        return coreai.slice_(x, i32(starts), i32(ends), i32(strides))
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
    pieces = [coreai.expand_dims(s, i32([0])) for s in scalars]
    return pieces[0] if len(pieces) == 1 else coreai.concat(i32(0), pieces)


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
    return coreai.shrink_dims(picked, i32([dim]))


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
    x = ctx.value(source)
    if not dims:
        # Roll the flattened tensor, then restore the shape.
        if not ctx.is_static(fake.shape):
            raise NotImplementedError(
                f"{node.name}: roll without dims flattens the tensor, whose shape "
                f"{list(fake.shape)} is symbolic; pass dims, or export it static"
            )
        flat = coreai.reshape(x, np.array([fake.numel()], dtype=np.uint32))
        rolled = _roll_axis(flat, 1, 0, fake.numel(), shifts[0])
        return coreai.reshape(rolled, np.array(list(fake.shape), dtype=np.uint32))
    for shift, dim in zip(shifts, dims, strict=True):
        axis = normalize_dim(dim, fake.dim())
        size = fake.shape[axis]
        if not ctx.is_static([size]):
            raise NotImplementedError(
                f"{node.name}: roll along dimension {axis}, whose size {size} is symbolic"
            )
        x = _roll_axis(x, fake.dim(), axis, int(size), shift)
    return x


def _roll_axis(x: Value, rank: int, dim: int, size: int, shift: int) -> Value:
    """``x`` rolled by ``shift`` along ``dim`` (of static ``size``; other dims may be symbolic)."""
    if size == 0:
        return x
    shift %= size
    if shift == 0:
        return x

    def part(begin: int, end: int) -> Value:
        # Core AI clamps slice ends to the size: the int32 maximum means "to the end".
        starts = [0] * rank
        ends = [np.iinfo(np.int32).max] * rank
        starts[dim], ends[dim] = begin, end
        return coreai.slice_(x, i32(starts), i32(ends), i32([1] * rank))

    return coreai.concat(i32(dim), [part(size - shift, size), part(0, size - shift)])


@register_lowering(aten.as_strided.default, aten.as_strided_copy.default)
def as_strided(ctx: LoweringContext, node: fx.Node) -> Value:
    """A strided view of a contiguous tensor, as reshape, slice, transpose and broadcast.

    Core AI values have no strides, so only views that pick every element at
    most once are lowered: sorted by stride, each dimension's stride must be a
    multiple of the next one's and span all of it (dims of size 1 do not count,
    stride 0 broadcasts). The flat input, from the storage offset on, is then
    reshaped so that each dimension is a slice of its own axis. Overlapping
    windows (``unfold``-style strides) are refused with the strides named.
    """
    source = ctx.arg("self")
    fake = ctx.fake(source)
    size, stride = list(ctx.arg("size")), list(ctx.arg("stride"))
    offset = ctx.arg("storage_offset")
    offset = fake.storage_offset() if offset is None else offset

    def refuse(why: str) -> NotImplementedError:
        return NotImplementedError(
            f"{node.name}: as_strided with sizes {size}, strides {stride} and storage offset "
            f"{offset} {why}; Core AI tensors have no strides. Express the view with "
            "reshape, permute, slicing or expand instead"
        )

    if not ctx.is_static([*size, *stride, offset, *fake.shape, *fake.stride()]):
        raise refuse("has symbolic entries")
    if not fake.is_contiguous():
        raise refuse(f"reads a non-contiguous tensor (strides {list(fake.stride())})")
    kept = [d for d in range(len(size)) if size[d] != 1 and stride[d] != 0]
    if any(stride[d] < 0 for d in kept):
        raise refuse("has negative strides")
    order = sorted(kept, key=lambda d: -stride[d])
    for outer, inner in itertools.pairwise(order):
        if stride[outer] % stride[inner] or stride[outer] < stride[inner] * size[inner]:
            raise refuse("reads some elements more than once (overlapping windows)")
    start = offset - fake.storage_offset()
    total = int(fake.numel())
    innermost = stride[order[-1]] if order else 1
    # [size0, e1, ..., em, innermost], where e_k = stride[k-1] / stride[k].
    blocks = [size[order[0]]] if order else [1]
    blocks += [stride[a] // stride[b] for a, b in itertools.pairwise(order)]
    blocks.append(innermost)
    span = int(np.prod(blocks))
    flat = coreai.reshape(ctx.value(source), np.array([-1], dtype=np.int32))
    end = min(start + span, total)
    if start < 0 or (start >= total and span > 0):
        raise refuse(f"starts outside the {total} elements of its input")
    window = coreai.slice_(flat, _i32([start]), _i32([end]), _i32([1]))
    if end - start < span:
        # The last block reaches past the input; the padding is never picked.
        padding = np.array([0, span - (end - start)], dtype=np.uint32)
        window = coreai.pad(window, padding, ctx.constant(0, ctx.result_dtype()), "constant")
    shaped = coreai.reshape(window, np.array(blocks, dtype=np.uint32))
    ends = [size[d] for d in order] + [1]
    picked = coreai.slice_(shaped, _i32([0] * len(blocks)), _i32(ends), _i32([1] * len(blocks)))
    # Back to the requested order, then unit and broadcast dims in place.
    picked = coreai.reshape(picked, np.array([size[d] for d in order], dtype=np.uint32))
    if order != sorted(order):
        positions = sorted(order)
        picked = coreai.transpose(
            picked, np.array([order.index(d) for d in positions], dtype=np.uint32)
        )
    ones = [size[d] if d in kept else 1 for d in range(len(size))]
    picked = coreai.reshape(picked, np.array(ones, dtype=np.uint32))
    if ones != size:
        picked = coreai.broadcast_to(picked, np.array(size, dtype=np.uint32))
    return picked


def _i32(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int32)
