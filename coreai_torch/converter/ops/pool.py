"""2-D pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d.

Core AI pools never pad, so padding is an explicit ``coreai.pad`` (``-inf``
for max, zeros for average). torch's ``ceil_mode`` lets the last window hang
over the bottom/right edge as long as it starts inside the (left-padded)
input; rather than reproduce that rule with Core AI's own ceil mode, the input
is padded on the far side just enough for floor mode to produce exactly the
output size torch reports.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._layout import i32, rank, separable, squeeze, static_sizes, tensor_type, u32, unsqueeze

aten = torch.ops.aten


def _pair(values: Sequence[int] | int | None, default: list[int] | None = None) -> list[int]:
    if values is None or (isinstance(values, list | tuple) and len(values) == 0):
        return list(default) if default is not None else []
    values = [values] if isinstance(values, int) else list(values)
    return values * 2 if len(values) == 1 else values


class _Window:
    """Kernel, stride, padding and dilation of a 2-D pooling, per spatial dim."""

    def __init__(self, kernel: Any, stride: Any, padding: Any, dilation: Any):
        self.kernel = _pair(kernel)
        # An empty stride means the kernel size.
        self.stride = _pair(stride, self.kernel)
        self.padding = _pair(padding, [0, 0])
        self.dilation = _pair(dilation, [1, 1])

    def far_padding(self, in_sizes: list[Any], out_sizes: list[Any]) -> list[int]:
        """Padding after each spatial dim so that floor mode yields ``out_sizes``."""
        extra = []
        for d in range(2):
            if not isinstance(in_sizes[d], int) or not isinstance(out_sizes[d], int):
                # Symbolic sizes: floor mode with torch's own padding is all we do.
                extra.append(self.padding[d])
                continue
            reach = (out_sizes[d] - 1) * self.stride[d] + self.dilation[d] * (self.kernel[d] - 1)
            extra.append(max(0, reach + 1 - in_sizes[d] - self.padding[d]))
        return extra

    def pad(self, ctx: LoweringContext, x: Value, far: list[int], fill: Value) -> Value:
        widths = [0, 0, 0, 0, self.padding[0], far[0], self.padding[1], far[1]]
        if not any(widths):
            return x
        return coreai.pad(x, u32(widths), fill, "constant")


def _batched(x: Value) -> tuple[Value, bool]:
    """Pools take N, C, H, W; an unbatched C, H, W input gets a unit batch."""
    if rank(x) == 3:
        return unsqueeze(x, 0), True
    return x, False


def _spatial(sizes: list[Any]) -> list[Any]:
    return list(sizes[-2:])


def _lowest(dtype: torch.dtype) -> float | int:
    if dtype.is_floating_point:
        return float("-inf")
    if dtype == torch.bool:
        return False
    return int(torch.iinfo(dtype).min)


def _max_pool(ctx: LoweringContext, node: fx.Node) -> Value:
    x_arg = ctx.arg("self")
    window = _Window(
        ctx.arg("kernel_size"), ctx.arg("stride"), ctx.arg("padding"), ctx.arg("dilation")
    )
    ceil_mode = ctx.arg("ceil_mode")
    fake_out = ctx.fake()
    fake_out = fake_out[0] if isinstance(fake_out, list | tuple) else fake_out
    dtype = fake_out.dtype
    in_sizes = _spatial(list(ctx.fake(x_arg).shape))
    out_sizes = _spatial(list(fake_out.shape))
    if ceil_mode and not ctx.is_static(in_sizes + out_sizes):
        raise NotImplementedError(
            f"{node.name}: max_pool2d with ceil_mode=True needs static spatial sizes, got "
            f"{in_sizes}"
        )
    x, unbatched = _batched(ctx.value(x_arg))
    far = window.far_padding(in_sizes, out_sizes)
    x = window.pad(ctx, x, far, ctx.constant(_lowest(dtype), dtype))
    batched_shape = ([1] if unbatched else []) + list(fake_out.shape)
    out_type = tensor_type(batched_shape, dtype)
    pooled = coreai.maxpool2d(
        out_type,
        x,
        u32(window.kernel),
        u32(window.stride),
        u32(window.dilation),
        np.array(False),
    )
    return squeeze(pooled, [0]) if unbatched else pooled


@register_lowering(aten.max_pool2d_with_indices.default)
def lower_max_pool2d_with_indices(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    for user in node.users:
        # A getitem without users is dead code, dropped from the program.
        if user.users and (user.target is not operator.getitem or user.args[1] != 0):
            raise NotImplementedError(
                f"{node.name}: the indices of max_pool2d (return_indices=True) are not "
                f"converted; only the pooled values are (used by {user.name})"
            )
    # Only the values exist; a use of the indices was refused above.
    return [_max_pool(ctx, node)]


@register_lowering(aten.max_pool2d.default)
def lower_max_pool2d(ctx: LoweringContext, node: fx.Node) -> Value:
    return _max_pool(ctx, node)


def _avg_divisors(
    window: _Window,
    in_sizes: list[int],
    out_sizes: list[int],
    count_include_pad: bool,
) -> np.ndarray:
    """The [H_out, W_out] divisor of every window, by torch's rules."""
    per_dim = []
    for d in range(2):
        k, s, p, size = window.kernel[d], window.stride[d], window.padding[d], in_sizes[d]
        counts = []
        for o in range(out_sizes[d]):
            start = o * s - p
            end = min(start + k, size + p)
            if count_include_pad:
                counts.append(end - start)
            else:
                counts.append(min(end, size) - max(start, 0))
        per_dim.append(np.array(counts, dtype=np.float64))
    return np.outer(per_dim[0], per_dim[1])


@register_lowering(aten.avg_pool2d.default)
def lower_avg_pool2d(ctx: LoweringContext, node: fx.Node) -> Value:
    x_arg = ctx.arg("self")
    window = _Window(ctx.arg("kernel_size"), ctx.arg("stride"), ctx.arg("padding"), 1)
    ceil_mode, count_include_pad = ctx.arg("ceil_mode"), ctx.arg("count_include_pad")
    divisor_override = ctx.arg("divisor_override")
    dtype = ctx.result_dtype()
    in_sizes = _spatial(list(ctx.fake(x_arg).shape))
    out_sizes = _spatial(list(ctx.fake().shape))
    simple = not ceil_mode and (not any(window.padding) or count_include_pad)
    if divisor_override:
        divisor: Any = float(divisor_override)
    elif simple:
        # Every window lies inside the padded input and counts all its cells.
        divisor = float(window.kernel[0] * window.kernel[1])
    else:
        in_sizes = static_sizes(ctx, x_arg, "avg_pool2d with ceil_mode or padding excluded", 2)
        out_sizes = [int(s) for s in out_sizes]
        table = _avg_divisors(window, in_sizes, out_sizes, count_include_pad)
        divisor = float(table.flat[0]) if np.all(table == table.flat[0]) else table
    x, unbatched = _batched(ctx.value(x_arg))
    far = window.far_padding(in_sizes, out_sizes)
    x = window.pad(ctx, x, far, ctx.constant(0, dtype))
    summed = coreai.sumpool2d(
        x,
        u32(window.kernel),
        u32(window.stride),
        u32([1, 1]),
    )
    pooled = coreai.broadcasting_divide(summed, ctx.constant(torch.tensor(divisor), dtype))
    return squeeze(pooled, [0]) if unbatched else pooled


def _averaging_matrix(in_size: int, out_size: int) -> np.ndarray:
    """[out, in] weights of torch's adaptive average along one dimension."""
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    for o in range(out_size):
        start = (o * in_size) // out_size
        end = -((-(o + 1) * in_size) // out_size)
        matrix[o, start:end] = 1.0 / (end - start)
    return matrix


@register_lowering(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def lower_adaptive_avg_pool2d(ctx: LoweringContext, node: fx.Node) -> Value:
    return _adaptive_average(ctx, ctx.value(ctx.arg("self")), spatial=2)


@register_lowering(aten.adaptive_avg_pool1d.default)
def lower_adaptive_avg_pool1d(ctx: LoweringContext, node: fx.Node) -> Value:
    # A height of 1: the 2-D pooling's rows matrix is [[1]].
    x = unsqueeze(ctx.value(ctx.arg("self")), -2)
    return squeeze(_adaptive_average(ctx, x, spatial=1), [-2])


def _adaptive_average(ctx: LoweringContext, x: Value, spatial: int) -> Value:
    """Adaptive average pooling of ``x`` over its last two dims, to the node's output size."""
    x_arg = ctx.arg("self")
    dtype = ctx.result_dtype()
    in_sizes = static_sizes(ctx, x_arg, f"adaptive_avg_pool{spatial}d", spatial)
    out_sizes = [int(s) for s in list(ctx.fake().shape)[-spatial:]]
    height, width = [1] * (2 - spatial) + in_sizes
    out_h, out_w = [1] * (2 - spatial) + out_sizes
    if (out_h, out_w) == (1, 1):
        # Core AI reductions keep the reduced dimensions, as this op needs.
        return coreai.reduce_mean(x, i32([rank(x) - 2, rank(x) - 1]))
    # Uneven windows overlap; two small matmuls with averaging matrices
    # compute every window exactly (rows: H_out x H, columns: W x W_out).
    rows = _averaging_matrix(height, out_h)
    cols = _averaging_matrix(width, out_w)
    return separable(ctx, x, rows, cols, dtype)
