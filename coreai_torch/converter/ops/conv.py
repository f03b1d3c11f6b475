"""Convolutions: ``aten.convolution`` in 1, 2 and 3 spatial dimensions, plain and transposed.

Core AI convolutions take no padding, so zero padding is a ``coreai.pad`` in
front of them. A 1-D convolution runs as a 2-D one over a height of 1. The
bias is added afterwards, broadcast over the spatial dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._layout import channel_vector, rank, squeeze, u32, unsqueeze

aten = torch.ops.aten


def _per_dim(values: Sequence[int] | int, count: int) -> list[int]:
    values = [values] if isinstance(values, int) else list(values)
    return values * count if len(values) == 1 else values


def _zero_pad_spatial(
    ctx: LoweringContext, x: Value, padding: list[tuple[int, int]], dtype: torch.dtype
) -> Value:
    """``x`` (N, C, *spatial) with (before, after) zeros around each spatial dim."""
    if not any(before or after for before, after in padding):
        return x
    widths = [0, 0, 0, 0]
    for before, after in padding:
        widths += [before, after]
    return coreai.pad(x, u32(widths), ctx.constant(0, dtype), "constant")


def _same_padding(kernel: list[int], dilation: list[int]) -> list[tuple[int, int]]:
    """torch's padding="same" (stride 1): the odd extra cell goes after."""
    pads = []
    for k, d in zip(kernel, dilation, strict=True):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return pads


def _convolve(
    ctx: LoweringContext,
    x: Value,
    weight: Value,
    stride: list[int],
    padding: list[tuple[int, int]],
    dilation: list[int],
    groups: int,
    dtype: torch.dtype,
) -> Value:
    x = _zero_pad_spatial(ctx, x, padding, dtype)
    build = coreai.conv2d if len(stride) == 2 else coreai.conv3d
    return build(x, weight, u32(stride), u32(dilation), np.array(groups, dtype=np.uint32))


def _transposed(
    x: Value,
    weight: Value,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    output_padding: list[int],
    groups: int,
) -> Value:
    build = coreai.conv_transpose2d if len(stride) == 2 else coreai.conv_transpose3d
    return build(
        x,
        weight,
        u32(stride),
        u32(padding),
        u32(dilation),
        u32(output_padding),
        np.array(groups, dtype=np.uint32),
    )


def _convolution(ctx: LoweringContext, node: fx.Node, transposed: bool) -> Value:
    """``aten.convolution`` semantics; ``padding`` may also be "same" or "valid"."""
    x_arg, w_arg, bias_arg = ctx.arg("input"), ctx.arg("weight"), ctx.arg("bias")
    stride, padding, dilation = ctx.arg("stride"), ctx.arg("padding"), ctx.arg("dilation")
    groups = ctx.arg("groups")
    output_padding = ctx.arg("output_padding") if transposed else 0
    dtype = ctx.result_dtype()
    x = ctx.value(x_arg, dtype)
    weight = ctx.value(w_arg, dtype)
    spatial = rank(x) - 2
    if spatial not in (1, 2, 3):
        raise NotImplementedError(
            f"{node.name}: convolution over {spatial} spatial dimensions; Core AI has 1-D "
            "(as 2-D), 2-D and 3-D convolutions"
        )
    stride = _per_dim(stride, spatial)
    dilation = _per_dim(dilation, spatial)
    output_padding = _per_dim(output_padding, spatial)
    if padding == "same":
        kernel = [int(k) for k in ctx.fake(w_arg).shape[2:]]
        pairs = _same_padding(kernel, dilation)
    elif padding == "valid":
        pairs = [(0, 0)] * spatial
    else:
        pairs = [(p, p) for p in _per_dim(padding, spatial)]
    if spatial == 1:
        # A height of 1 with unit stride, dilation and no padding leaves the math unchanged.
        x, weight = unsqueeze(x, 2), unsqueeze(weight, 2)
        stride, dilation, pairs = [1, *stride], [1, *dilation], [(0, 0), *pairs]
        output_padding = [0, *output_padding]
    if transposed:
        out = _transposed(
            x, weight, stride, [p for p, _ in pairs], dilation, output_padding, groups
        )
    else:
        out = _convolve(ctx, x, weight, stride, pairs, dilation, groups, dtype)
    if spatial == 1:
        out = squeeze(out, [2])
    if bias_arg is not None:
        out = coreai.broadcasting_add(out, channel_vector(ctx, ctx.value(bias_arg, dtype), spatial))
    return out


@register_lowering(aten.convolution.default)
def lower_convolution(ctx: LoweringContext, node: fx.Node) -> Value:
    return _convolution(ctx, node, transposed=ctx.arg("transposed"))


@register_lowering(
    aten.conv1d.default,
    aten.conv2d.default,
    aten.conv3d.default,
    aten.conv1d.padding,
    aten.conv2d.padding,
    aten.conv3d.padding,
    keep_in_export=True,
)
def lower_conv(ctx: LoweringContext, node: fx.Node) -> Value:
    return _convolution(ctx, node, transposed=False)


@register_lowering(
    aten.conv_transpose1d.default,
    aten.conv_transpose2d.input,
    aten.conv_transpose3d.input,
    keep_in_export=True,
)
def lower_conv_transpose(ctx: LoweringContext, node: fx.Node) -> Value:
    return _convolution(ctx, node, transposed=True)


@register_lowering(aten.im2col.default)
def lower_im2col(ctx: LoweringContext, node: fx.Node) -> Value:
    """``F.unfold``: every kh x kw patch as a column, as a depthwise convolution.

    Output channel ``c * kh * kw + i * kw + j`` of a grouped convolution (one
    group per input channel) whose filter is 1 at (i, j) and 0 elsewhere picks
    exactly the patch element torch puts in that row: the result is exact.
    """
    source = ctx.arg("self")
    dtype = ctx.result_dtype()
    x = ctx.value(source, dtype)
    unbatched = rank(x) == 3
    if unbatched:
        x = unsqueeze(x, 0)
    channels = ctx.fake(source).shape[-3]
    if not isinstance(channels, int):
        raise NotImplementedError(f"{node.name}: im2col with a symbolic channel count")
    kh, kw = _per_dim(ctx.arg("kernel_size"), 2)
    one_hot = np.eye(kh * kw, dtype=np.float32).reshape(kh * kw, 1, kh, kw)
    weight = ctx.constant(torch.tensor(np.tile(one_hot, (channels, 1, 1, 1))), dtype)
    padding = [(p, p) for p in _per_dim(ctx.arg("padding"), 2)]
    stride, dilation = _per_dim(ctx.arg("stride"), 2), _per_dim(ctx.arg("dilation"), 2)
    patches = _convolve(ctx, x, weight, stride, padding, dilation, channels, dtype)
    columns = coreai.reshape(patches, ctx.shape_tensor([*ctx.fake().shape[:-1], -1], False))
    return columns
