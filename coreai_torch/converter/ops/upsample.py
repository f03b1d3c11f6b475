"""2-D upsampling: nearest, nearest-exact, bilinear and bicubic (with and without align_corners).

Nearest neighbour is lowered as a gather of precomputed source rows and
columns, computed with torch's own float32 formula, because Core AI's
``nearest_neighbor`` interpolation rounds half-pixel coordinates while torch's
legacy ``nearest`` floors ``dst * scale``; the two agree only for integer
factors. When the source indices are exactly ``dst // f`` the gather becomes a
broadcast and reshape. Bilinear maps onto ``coreai.interpolate``: its
``coord = (dst + 0.5 - offset) / scale - 0.5`` with edge clamping is torch's
half-pixel rule for ``offset = 0``, and torch's align-corners rule for
``offset = (1 - scale) / 2``. Core AI has no cubic interpolation: bicubic
resampling is separable, so it is two matmuls with [out, in] weight matrices
built from torch's formulas (static sizes).
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
from ._layout import broadcast, reshape, separable, static_sizes, take, unsqueeze

aten = torch.ops.aten


def _torch_ratio(in_size: int, out_size: int, scale_factor: float | None) -> np.float32:
    """Source pixels per output pixel, as torch computes it (float32)."""
    if scale_factor is not None and scale_factor > 0:
        return np.float32(1.0 / scale_factor)
    return np.float32(in_size / out_size)


def _nearest_sources(
    in_size: int, out_size: int, scale_factor: float | None, exact: bool
) -> np.ndarray:
    ratio = _torch_ratio(in_size, out_size, scale_factor)
    dst = np.arange(out_size, dtype=np.float32)
    if exact:
        src = np.floor((dst + np.float32(0.5)) * ratio)
    else:
        src = np.floor(dst * ratio)
    return np.minimum(src.astype(np.int64), in_size - 1).astype(np.int32)


def _input_and_factors(ctx: LoweringContext, vec: bool) -> tuple[fx.Node, list[float | None]]:
    """The input and the height and width scale factors, from either overload's parameters."""
    if vec:
        factors = ctx.arg("scale_factors")
        return ctx.arg("input"), list(factors) if factors else [None, None]
    return ctx.arg("self"), [ctx.arg("scales_h"), ctx.arg("scales_w")]


def _repeat_each(ctx: LoweringContext, x: Value, sizes: list[Any], factors: list[int]) -> Value:
    """Each pixel repeated f_h x f_w times: [N, C, H, 1, W, 1] broadcast, then merged."""
    n, c, h, w = sizes
    fh, fw = factors
    x = unsqueeze(unsqueeze(x, 3), 5)
    x = broadcast(ctx, x, [n, c, h, fh, w, fw])
    return reshape(ctx, x, [n, c, h * fh, w * fw])


def _nearest(ctx: LoweringContext, exact: bool, vec: bool) -> Value:
    x_arg, factors = _input_and_factors(ctx, vec)
    height, width = static_sizes(ctx, x_arg, "nearest upsampling", 2)
    out_h, out_w = (int(s) for s in ctx.fake().shape[-2:])
    sources = [
        _nearest_sources(height, out_h, factors[0], exact),
        _nearest_sources(width, out_w, factors[1], exact),
    ]
    x = ctx.value(x_arg)
    sizes = list(ctx.fake(x_arg).shape)
    whole = [
        out // size if out % size == 0 else 0 for out, size in ((out_h, height), (out_w, width))
    ]
    if all(whole) and all(
        np.array_equal(src, np.arange(len(src)) // f) for src, f in zip(sources, whole, strict=True)
    ):
        return _repeat_each(ctx, x, sizes, whole)
    for axis, (src, size) in enumerate(zip(sources, (height, width), strict=True)):
        if not np.array_equal(src, np.arange(size)):
            x = take(x, len(sizes) - 2 + axis, src)
    return x


@register_lowering(aten.upsample_nearest2d.vec)
def lower_upsample_nearest2d_vec(ctx: LoweringContext, node: fx.Node) -> Value:
    return _nearest(ctx, exact=False, vec=True)


@register_lowering(aten.upsample_nearest2d.default)
def lower_upsample_nearest2d(ctx: LoweringContext, node: fx.Node) -> Value:
    return _nearest(ctx, exact=False, vec=False)


@register_lowering(aten._upsample_nearest_exact2d.vec)
def lower_upsample_nearest_exact2d_vec(ctx: LoweringContext, node: fx.Node) -> Value:
    return _nearest(ctx, exact=True, vec=True)


@register_lowering(aten._upsample_nearest_exact2d.default)
def lower_upsample_nearest_exact2d(ctx: LoweringContext, node: fx.Node) -> Value:
    return _nearest(ctx, exact=True, vec=False)


def _linear_transform(
    in_size: Any, out_size: Any, align_corners: bool, scale_factor: float | None
) -> tuple[float, float]:
    """Core AI (scale, offset) reproducing torch's source coordinate along one dim."""
    if align_corners:
        if not isinstance(in_size, int) or not isinstance(out_size, int):
            raise NotImplementedError("align_corners=True with symbolic spatial sizes")
        if in_size == 1 or out_size == 1:
            # torch samples source pixel 0 for every output pixel.
            return 1.0, 0.0
        scale = (out_size - 1) / (in_size - 1)
        return scale, 0.5 * (1.0 - scale)
    if scale_factor is not None and scale_factor > 0:
        return float(scale_factor), 0.0
    if not isinstance(in_size, int) or not isinstance(out_size, int):
        raise NotImplementedError("bilinear upsampling to a symbolic size without a scale factor")
    return out_size / in_size, 0.0


def _bilinear(ctx: LoweringContext, node: fx.Node, vec: bool) -> Value:
    x_arg, factors = _input_and_factors(ctx, vec)
    align_corners = bool(ctx.arg("align_corners"))
    in_sizes = list(ctx.fake(x_arg).shape)
    out_sizes = list(ctx.fake().shape)
    scales, offsets = [1.0, 1.0], [0.0, 0.0]
    for d in range(2):
        try:
            scale, offset = _linear_transform(
                in_sizes[2 + d], out_sizes[2 + d], align_corners, factors[d]
            )
        except NotImplementedError as exc:
            raise NotImplementedError(f"{node.name}: {exc}") from None
        scales.append(scale)
        offsets.append(offset)
    return coreai.interpolate(
        ctx.value(x_arg),
        ctx.shape_tensor(out_sizes, unsigned=False),
        np.array(scales, dtype=np.float32),
        np.array(offsets, dtype=np.float32),
        Attribute.parse("#coreai.interpolation_mode<linear>"),
    )


@register_lowering(aten.upsample_bilinear2d.vec)
def lower_upsample_bilinear2d_vec(ctx: LoweringContext, node: fx.Node) -> Value:
    return _bilinear(ctx, node, vec=True)


@register_lowering(aten.upsample_bilinear2d.default)
def lower_upsample_bilinear2d(ctx: LoweringContext, node: fx.Node) -> Value:
    return _bilinear(ctx, node, vec=False)


# torch's cubic convolution coefficient (Keys, a = -0.75).
_CUBIC_A = np.float32(-0.75)


def _cubic_near(t: np.float32) -> np.float32:
    """Weight of a tap at distance t <= 1."""
    return ((_CUBIC_A + 2) * t - (_CUBIC_A + 3)) * t * t + 1


def _cubic_far(t: np.float32) -> np.float32:
    """Weight of a tap at distance 1 < t < 2."""
    return ((_CUBIC_A * t - 5 * _CUBIC_A) * t + 8 * _CUBIC_A) * t - 4 * _CUBIC_A


def _bicubic_matrix(
    in_size: int, out_size: int, align_corners: bool, scale_factor: float | None
) -> np.ndarray:
    """[out, in] weights of torch's bicubic resampling along one dimension.

    Source coordinates and weights are computed in float32 with torch's
    formulas; taps that fall outside the input are clamped to its edge.
    """
    if align_corners:
        ratio = np.float32((in_size - 1) / (out_size - 1)) if out_size > 1 else np.float32(0)
    else:
        ratio = _torch_ratio(in_size, out_size, scale_factor)
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    for o in range(out_size):
        if align_corners:
            real = ratio * np.float32(o)
        else:
            real = ratio * (np.float32(o) + np.float32(0.5)) - np.float32(0.5)
        index = int(np.floor(real))
        t = np.float32(real - np.float32(index))
        weights = (
            _cubic_far(t + 1),
            _cubic_near(t),
            _cubic_near(np.float32(1) - t),
            _cubic_far(np.float32(2) - t),
        )
        for k, weight in enumerate(weights):
            matrix[o, min(max(index - 1 + k, 0), in_size - 1)] += weight
    return matrix


def _bicubic(ctx: LoweringContext, vec: bool) -> Value:
    x_arg, factors = _input_and_factors(ctx, vec)
    align_corners = bool(ctx.arg("align_corners"))
    height, width = static_sizes(ctx, x_arg, "bicubic upsampling", 2)
    out_h, out_w = (int(s) for s in ctx.fake().shape[-2:])
    rows = _bicubic_matrix(height, out_h, align_corners, factors[0])
    cols = _bicubic_matrix(width, out_w, align_corners, factors[1])
    dtype = ctx.result_dtype()
    return separable(ctx, ctx.value(x_arg), rows, cols, dtype)


@register_lowering(aten.upsample_bicubic2d.vec)
def lower_upsample_bicubic2d_vec(ctx: LoweringContext, node: fx.Node) -> Value:
    return _bicubic(ctx, vec=True)


@register_lowering(aten.upsample_bicubic2d.default)
def lower_upsample_bicubic2d(ctx: LoweringContext, node: fx.Node) -> Value:
    return _bicubic(ctx, vec=False)
