"""Small building blocks for the neural-network op families.

Core AI is strict about the element types of its shape-like operands:
permutations, scan axes, pooling windows and paddings are unsigned, while
reduction axes and gather axes are ``si32``. These helpers spell each of them
once so that lowerings read as the math they implement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import RankedTensorType, ShapedType, Value

from .. import dtypes
from ..constants import i32, u32
from ..lowering_context import LoweringContext


def rank(value: Value) -> int:
    return value.type.rank


def permute(value: Value, order: Sequence[int]) -> Value:
    if list(order) == list(range(len(order))):
        return value
    return coreai.transpose(value, u32(list(order)))


def swap_last_two(value: Value) -> Value:
    n = rank(value)
    return permute(value, [*range(n - 2), n - 1, n - 2])


def unsqueeze(value: Value, axis: int) -> Value:
    return coreai.expand_dims(value, i32([axis]))


def squeeze(value: Value, axes: Sequence[int]) -> Value:
    return coreai.shrink_dims(value, i32(list(axes)))


def reshape(ctx: LoweringContext, value: Value, sizes: Sequence[Any]) -> Value:
    """``value`` reshaped to ``sizes`` (ints, ``-1`` or symbolic sizes)."""
    return coreai.reshape(value, ctx.shape_tensor(list(sizes), unsigned=False))


def broadcast(ctx: LoweringContext, value: Value, sizes: Sequence[Any]) -> Value:
    """``value`` broadcast (numpy rules) to ``sizes``, which may be symbolic."""
    return coreai.broadcast_to(value, ctx.shape_tensor(list(sizes)))


def mul_scalar(ctx: LoweringContext, value: Value, number: float, dtype: torch.dtype) -> Value:
    if number == 1:
        return value
    return coreai.broadcasting_mul(value, ctx.constant(number, dtype))


def channel_vector(ctx: LoweringContext, value: Value, spatial_rank: int) -> Value:
    """A per-channel ``[C]`` vector shaped ``[C, 1, ..., 1]`` to broadcast over NC... data."""
    return reshape(ctx, value, [-1, *([1] * spatial_rank)])


def tensor_type(sizes: Sequence[Any], dtype: torch.dtype) -> RankedTensorType:
    """The IR type of a tensor with ``sizes`` (symbolic ones become dynamic dims)."""
    dims = [int(s) if isinstance(s, int) else ShapedType.get_dynamic_size() for s in sizes]
    return RankedTensorType.get(dims, dtypes.element_type(dtype))


def static_sizes(ctx: LoweringContext, arg_or_fake: Any, what: str, last: int) -> list[int]:
    """The sizes of the ``last`` trailing dims of a tensor, which a lowering needs as ints.

    Lowerings that precompute index tables, weights or divisors over spatial
    dims need their sizes; they call this to refuse symbolic ones with a
    message that says which. Leading dims (batch, channels) may stay symbolic.
    """
    fake = ctx.fake(arg_or_fake) if isinstance(arg_or_fake, fx.Node) else arg_or_fake
    sizes = list(fake.shape)[-last:]
    if not ctx.is_static(sizes):
        node = ctx.node.name if ctx.node is not None else "?"
        raise NotImplementedError(
            f"{node}: {what} needs static sizes for its last {last} dimensions, but the "
            f"tensor has shape {list(fake.shape)}; export with those dimensions static"
        )
    return [int(s) for s in sizes]


def take(value: Value, axis: int, indices: np.ndarray | Value) -> Value:
    """``index_select``: the slices of ``value`` at 1-D ``indices`` along ``axis``.

    The axis is moved to the front so that ``gather_nd`` picks whole slices;
    this works whatever the other (possibly symbolic) sizes are.
    """
    n = rank(value)
    order = [axis, *[d for d in range(n) if d != axis]]
    front = permute(value, order)
    if isinstance(indices, np.ndarray):
        columns = indices.reshape(-1, 1).astype(np.int32)
    else:
        columns = unsqueeze(indices, -1)
    picked = coreai.gather_nd(front, columns)
    return permute(picked, [order.index(d) for d in range(n)])


def separable(
    ctx: LoweringContext, x: Value, rows: np.ndarray, cols: np.ndarray, dtype: torch.dtype
) -> Value:
    """``rows @ x @ cols.T`` over the last two dims: a resampling with one [out, in]
    matrix per spatial dimension (identity matrices are skipped)."""
    if not _is_identity(cols):
        x = coreai.broadcasting_batch_matmul(x, ctx.constant(torch.tensor(cols.T.copy()), dtype))
    if not _is_identity(rows):
        x = coreai.broadcasting_batch_matmul(ctx.constant(torch.tensor(rows), dtype), x)
    return x


def _is_identity(matrix: np.ndarray) -> bool:
    return matrix.shape[0] == matrix.shape[1] and np.array_equal(matrix, np.eye(len(matrix)))
