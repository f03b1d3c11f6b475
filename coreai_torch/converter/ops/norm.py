"""Normalisation layers: layer_norm, group_norm, batch_norm (inference), rms_norm.

Statistics of float16 and bfloat16 inputs are computed in float32 and the
result cast back, as torch's CPU and MPS kernels do: summing hundreds of
half-precision squares in half precision loses several bits, which would make
the converted model disagree with the one it came from.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Value

from ..lowering_context import LoweringContext
from ..registry import register_lowering
from ._layout import channel_vector, i32, rank, reshape
from .reductions import vector_norm

aten = torch.ops.aten

_REDUCED_FLOATS = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _REDUCED_FLOATS else dtype


def _mean_keep(value: Value, axes: list[int]) -> Value:
    """Mean over ``axes``; Core AI keeps the reduced dimensions as size 1."""
    return coreai.reduce_mean(value, i32(axes))


def _standardize(
    ctx: LoweringContext, x: Value, axes: list[int], eps: float, dtype: torch.dtype
) -> tuple[Value, Value, Value]:
    """(x - mean) * rstd with the biased variance, plus mean and rstd (dims kept)."""
    mean = _mean_keep(x, axes)
    centered = coreai.broadcasting_sub(x, mean)
    variance = _mean_keep(coreai.broadcasting_mul(centered, centered), axes)
    rstd = coreai.rsqrt(coreai.broadcasting_add(variance, ctx.constant(eps, dtype)))
    return coreai.broadcasting_mul(centered, rstd), mean, rstd


def _affine(
    ctx: LoweringContext, x: Value, weight: object, bias: object, dtype: torch.dtype
) -> Value:
    if weight is not None:
        x = coreai.broadcasting_mul(x, ctx.value(weight, dtype))
    if bias is not None:
        x = coreai.broadcasting_add(x, ctx.value(bias, dtype))
    return x


def _layer_norm(ctx: LoweringContext) -> tuple[Value, Value, Value]:
    """The normalized input (input dtype), and the mean and rstd (compute dtype, dims kept)."""
    x_arg = ctx.arg("input")
    dtype = ctx.dtype(x_arg)
    compute = _compute_dtype(dtype)
    x = ctx.value(x_arg, compute)
    n = rank(x)
    axes = list(range(n - len(ctx.arg("normalized_shape")), n))
    normed, mean, rstd = _standardize(ctx, x, axes, ctx.arg("eps"), compute)
    out = _affine(ctx, normed, ctx.arg("weight"), ctx.arg("bias"), compute)
    return ctx.cast(out, dtype), mean, rstd


@register_lowering(aten.native_layer_norm.default)
def lower_native_layer_norm(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    out, mean, rstd = _layer_norm(ctx)
    return [out, ctx.cast(mean, ctx.result_dtype(1)), ctx.cast(rstd, ctx.result_dtype(2))]


@register_lowering(aten.layer_norm.default, keep_in_export=True)
def lower_layer_norm(ctx: LoweringContext, node: fx.Node) -> Value:
    return _layer_norm(ctx)[0]


@register_lowering(aten.group_norm.default)
def lower_group_norm(ctx: LoweringContext, node: fx.Node) -> Value:
    # The undecomposed op of raw exports.
    batch = ctx.fake(ctx.arg("input")).shape[0]
    return _group_norm(ctx, batch, ctx.arg("num_groups"))[0]


@register_lowering(aten.native_group_norm.default)
def lower_native_group_norm(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    normed, mean, rstd = _group_norm(ctx, ctx.arg("N"), ctx.arg("group"))
    return [normed, ctx.cast(mean, ctx.result_dtype(1)), ctx.cast(rstd, ctx.result_dtype(2))]


def _group_norm(ctx: LoweringContext, batch: Any, groups: int) -> list[Value]:
    """The normalized input (input dtype) and the [N, G] mean and rstd (compute dtype)."""
    x_arg, weight, bias, eps = ctx.arg("input"), ctx.arg("weight"), ctx.arg("bias"), ctx.arg("eps")
    dtype = ctx.dtype(x_arg)
    compute = _compute_dtype(dtype)
    x = ctx.value(x_arg, compute)
    spatial_rank = rank(x) - 2
    grouped = reshape(ctx, x, [batch, groups, -1])
    normed, mean, rstd = _standardize(ctx, grouped, [2], eps, compute)
    normed = reshape(ctx, normed, list(ctx.fake(x_arg).shape))
    if weight is not None:
        scale = channel_vector(ctx, ctx.value(weight, compute), spatial_rank)
        normed = coreai.broadcasting_mul(normed, scale)
    if bias is not None:
        shift = channel_vector(ctx, ctx.value(bias, compute), spatial_rank)
        normed = coreai.broadcasting_add(normed, shift)
    # torch returns the statistics as [N, G].
    mean = reshape(ctx, mean, [batch, groups])
    rstd = reshape(ctx, rstd, [batch, groups])
    return [ctx.cast(normed, dtype), mean, rstd]


def _batch_norm_inference(ctx: LoweringContext, node: fx.Node) -> Value:
    """Batch norm with the running statistics, as ``model.eval()`` computes it."""
    training = ctx.args.get("training", False)
    mean_arg, var_arg = ctx.arg("running_mean"), ctx.arg("running_var")
    if training or mean_arg is None or var_arg is None:
        raise NotImplementedError(
            f"{node.name}: batch_norm is converted for inference only (running statistics, "
            f"training=False); got training={training}. Call model.eval() before exporting"
        )
    x_arg, weight, bias, eps = ctx.arg("input"), ctx.arg("weight"), ctx.arg("bias"), ctx.arg("eps")
    dtype = ctx.dtype(x_arg)
    compute = _compute_dtype(dtype)
    x = ctx.value(x_arg, compute)
    spatial_rank = rank(x) - 2
    # Fold the statistics into one scale and one shift per channel.
    scale = coreai.rsqrt(
        coreai.broadcasting_add(ctx.value(var_arg, compute), ctx.constant(eps, compute))
    )
    if weight is not None:
        scale = coreai.broadcasting_mul(scale, ctx.value(weight, compute))
    shift = coreai.broadcasting_mul(ctx.value(mean_arg, compute), scale)
    shift = coreai.broadcasting_sub(ctx.constant(0.0, compute), shift)
    if bias is not None:
        shift = coreai.broadcasting_add(shift, ctx.value(bias, compute))
    out = coreai.broadcasting_mul(x, channel_vector(ctx, scale, spatial_rank))
    out = coreai.broadcasting_add(out, channel_vector(ctx, shift, spatial_rank))
    return ctx.cast(out, dtype)


def _empty_statistics(ctx: LoweringContext, index: int) -> Value:
    """Inference batch norm's saved mean / invstd: empty tensors in torch."""
    fake = ctx.fake()[index]
    return ctx.constant(np.zeros(tuple(int(s) for s in fake.shape)), ctx.result_dtype(index))


@register_lowering(
    aten._native_batch_norm_legit_no_training.default, aten.native_batch_norm.default
)
def lower_native_batch_norm(ctx: LoweringContext, node: fx.Node) -> list[Value]:
    out = _batch_norm_inference(ctx, node)
    return [out, _empty_statistics(ctx, 1), _empty_statistics(ctx, 2)]


@register_lowering(aten.batch_norm.default)
def lower_batch_norm(ctx: LoweringContext, node: fx.Node) -> Value:
    # The undecomposed op of raw exports.
    return _batch_norm_inference(ctx, node)


@register_lowering(aten.rms_norm.default, keep_in_export=True)
def lower_rms_norm(ctx: LoweringContext, node: fx.Node) -> Value:
    x_arg, normalized = ctx.arg("input"), ctx.arg("normalized_shape")
    weight, eps = ctx.arg("weight"), ctx.arg("eps")
    dtype = ctx.dtype(x_arg)
    if eps is None:
        eps = torch.finfo(dtype).eps
    compute = _compute_dtype(dtype)
    x = ctx.value(x_arg, compute)
    n = rank(x)
    axes = list(range(n - len(normalized), n))
    mean_square = _mean_keep(coreai.broadcasting_mul(x, x), axes)
    rstd = coreai.rsqrt(coreai.broadcasting_add(mean_square, ctx.constant(eps, compute)))
    # torch rounds the normalised input to the input dtype before the weight.
    out = ctx.cast(coreai.broadcasting_mul(x, rstd), dtype)
    if weight is not None:
        out = coreai.broadcasting_mul(out, ctx.value(weight, ctx.result_dtype()))
    return out


@register_lowering(aten._weight_norm.default)
def lower_weight_norm(ctx: LoweringContext, node: fx.Node) -> Value:
    """``v * (g / ||v||)``, the norm over every dimension but ``dim`` (all of them for -1)."""
    v_arg, dim = ctx.arg("v"), ctx.arg("dim")
    dtype = ctx.result_dtype()
    compute = _compute_dtype(dtype)
    v = ctx.value(v_arg, compute)
    n = rank(v)
    axes = list(range(n)) if dim == -1 else [d for d in range(n) if d != dim % n]
    norm = vector_norm(ctx, v, 2.0, axes, n, keepdim=True)
    scale = coreai.broadcasting_divide(ctx.value(ctx.arg("g"), compute), norm)
    return ctx.cast(coreai.broadcasting_mul(v, scale), dtype)
