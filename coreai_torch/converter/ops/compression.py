"""coreai-opt's compression ops (``coreai_torch._compression``) as Core AI's compression ops.

- ``coreai::constexpr_blockwise_shift_scale`` -> ``coreai.blockwise_shift_scale``
- ``coreai::lut_to_dense`` -> ``coreai.lut_to_dense``
- ``coreai::sparse_to_dense`` -> ``coreai.build_sparse_with_bitmask`` and
  ``coreai.sparse_with_bitmask_to_dense``
- ``coreai::quantize`` / ``coreai::dequantize`` -> ``coreai.quantize`` /
  ``coreai.dequantize``

Core AI's ops take the offsets of both quantization forms as two operands:
``offset1`` in the quantized type, subtracted before scaling, and ``offset2``
in the float type, added after: a ``zero_point`` is ``offset1`` (with a zero
``offset2``), a ``minval`` is ``offset2`` with ``offset1`` the quantized type's
least value, and neither gives zeros for both.

Data that a model holds in int8 or uint8 buffers but means as fewer bits is
stored at its size, as 4-bit (or 1- to 6-bit) elements packed into a
resource: int4 quantized data and zero points (``input_dtype=torch.int4``),
palette indices (``2**nbits`` palette entries), pruning masks (one bit each).
The buffers themselves are not stored (``register_lowering``'s ``stores``),
and the user's program is not changed.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.fx as fx
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import IntegerType, Type, Value

from ..._compression import custom_layers  # noqa: F401  (registers torch.ops.coreai.*)
from ..._compression.utils import int_dtype_bits, int_dtype_range
from .. import dtypes
from ..constants import packed_constant
from ..lowering_context import LoweringContext
from ..registry import register_lowering

ops = torch.ops.coreai


def _sub_byte_type(dtype: torch.dtype | None) -> Type | None:
    """The sub-byte integer element type of a torch dtype such as ``torch.int4``."""
    if dtype is None or dtype.is_floating_point or dtype == torch.bool:
        return None
    bits = int_dtype_bits(dtype)
    if bits >= 8:
        return None
    signed = int_dtype_range(dtype)[0] < 0
    return IntegerType.get_signed(bits) if signed else IntegerType.get_unsigned(bits)


def _is_sub_byte(element: Type) -> bool:
    return IntegerType.isinstance(element) and IntegerType(element).width < 8


def _stored(ctx: LoweringContext, arg: fx.Node, element: Type | None) -> Value:
    """``arg``'s value, packed at the width of ``element`` when that is a sub-byte type."""
    if element is None or not _is_sub_byte(element):
        return ctx.value(arg)
    known = ctx.known(arg)
    if known is None:
        raise NotImplementedError(
            f"{ctx.node.name}: {arg.name} is {element} data computed by the program; "
            "sub-byte data is converted when it is a constant (a buffer, as coreai-opt's "
            "modules hold it)"
        )
    values = known.detach().cpu().numpy()
    width = IntegerType(element).width
    low = -(1 << (width - 1)) if IntegerType(element).is_signed else 0
    high = low + (1 << width) - 1
    if values.size and (values.min() < low or values.max() > high):
        raise ValueError(
            f"{ctx.node.name}: {arg.name} holds values in [{values.min()}, {values.max()}], "
            f"outside the range [{low}, {high}] of {element}"
        )
    return packed_constant(values, element)


def _filled(shape: list[int], element: Type, fill: int) -> Value:
    if _is_sub_byte(element):
        return packed_constant(np.full(shape, fill, dtype=np.int8), element)
    return dtypes.constant(np.full(shape, fill), dtypes.torch_dtype_of(element))


def _least(element: Type) -> int:
    """The least value of an integer element type (``q_min``)."""
    integer = IntegerType(element)
    return -(1 << (integer.width - 1)) if integer.is_signed else 0


def _offsets(
    ctx: LoweringContext,
    zero_point: fx.Node | None,
    minval: fx.Node | None,
    quantized: Type,
    real: torch.dtype,
    shape: list[int],
) -> tuple[Value, Value]:
    """Core AI's ``offset1`` (quantized type) and ``offset2`` (real type)."""
    real_type = dtypes.element_type(real)
    if zero_point is not None:
        offset1 = _stored(ctx, zero_point, quantized)
        if not _is_sub_byte(quantized):
            offset1 = ctx.cast(offset1, dtypes.torch_dtype_of(quantized))
        return offset1, _filled(shape, real_type, 0)
    if minval is not None:
        return _filled(shape, quantized, _least(quantized)), ctx.value(minval, real)
    return _filled(shape, quantized, 0), _filled(shape, real_type, 0)


def _data_stores(position: int, dtype_argument: str):
    """``stores`` of an op whose data (and zero point) a sub-byte dtype argument describes."""

    def stores(node: fx.Node) -> list[fx.Node]:
        args = dict(zip((a.name for a in node.target._schema.arguments), node.args, strict=False))
        args.update(node.kwargs)
        if _sub_byte_type(args.get(dtype_argument)) is None:
            return []
        return [a for a in (node.args[position], args.get("zero_point")) if isinstance(a, fx.Node)]

    return stores


@register_lowering(
    ops.constexpr_blockwise_shift_scale.default,
    stores=_data_stores(0, "input_dtype"),
)
def lower_blockwise_shift_scale(ctx: LoweringContext, node: fx.Node) -> Value:
    data_arg, scale_arg = ctx.arg("input"), ctx.arg("scale")
    sub_byte = _sub_byte_type(ctx.arg("input_dtype"))
    data = _stored(ctx, data_arg, sub_byte)
    result = ctx.result_dtype()
    scale = ctx.value(scale_arg)
    rank = ctx.rank(data_arg)
    if ctx.rank(scale_arg) == 0:
        scale = coreai.reshape(scale, np.ones(rank, dtype=np.uint32))
    shape = list(ctx.fake(scale_arg).shape) or [1] * rank
    scale_dtype = ctx.dtype(scale_arg)
    offset1, offset2 = _offsets(
        ctx, ctx.arg("zero_point"), ctx.arg("minval"), data.type.element_type, scale_dtype, shape
    )
    value = coreai.blockwise_shift_scale(data, scale, offset1, offset2)
    return ctx.cast(value, result) if scale_dtype != result else value


def _lut_stores(node: fx.Node) -> list[fx.Node]:
    indices, lut = node.args[0], node.args[1]
    palettes = lut.meta["val"].shape[-2]
    return [indices] if isinstance(indices, fx.Node) and palettes < 256 else []


@register_lowering(ops.lut_to_dense.default, stores=_lut_stores)
def lower_lut_to_dense(ctx: LoweringContext, node: fx.Node) -> Value:
    indices_arg, lut_arg = ctx.arg("indices"), ctx.arg("lut")
    bits = int(math.log2(ctx.fake(lut_arg).shape[-2]))
    indices = _stored(ctx, indices_arg, IntegerType.get_unsigned(bits) if bits < 8 else None)
    if bits == 8 and ctx.dtype(indices_arg) != torch.uint8:
        indices = ctx.cast(indices, torch.uint8)
    axis = normalize_axis(ctx.arg("axis"), ctx.rank(indices_arg))
    return coreai.lut_to_dense(indices, ctx.value(lut_arg), np.array(axis, dtype=np.int16))


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _mask_stores(node: fx.Node) -> list[fx.Node]:
    mask = node.args[1]
    return [mask] if isinstance(mask, fx.Node) else []


@register_lowering(ops.sparse_to_dense.default, stores=_mask_stores)
def lower_sparse_to_dense(ctx: LoweringContext, node: fx.Node) -> Value:
    mask_arg = ctx.arg("mask")
    if ctx.known(mask_arg) is None:
        raise NotImplementedError(
            f"{node.name}: coreai::sparse_to_dense needs a mask known when converting (a "
            f"buffer, as coreai-opt's SparseModule has); {mask_arg.name} is computed by the "
            "program"
        )
    mask = ctx.known(mask_arg).detach().cpu().bool().numpy().astype(np.uint8)
    bitmask = packed_constant(mask, IntegerType.get_unsigned(1))
    sparse = coreai.build_sparse_with_bitmask(ctx.value(ctx.arg("nonzero_data")), bitmask)
    return coreai.sparse_with_bitmask_to_dense(sparse)


def _per_axis(ctx: LoweringContext, quantized: Type, real: torch.dtype, quantize: bool) -> Value:
    """``coreai.quantize`` / ``coreai.dequantize`` of the current node."""
    input_arg, scale_arg = ctx.arg("input"), ctx.arg("scale")
    rank = ctx.rank(input_arg)
    axis = normalize_axis(ctx.arg("axis"), max(rank, 1))
    zero_point = ctx.arg("zero_point")
    per_channel = ctx.fake(scale_arg).numel() > 1 or (
        zero_point is not None and ctx.fake(zero_point).numel() > 1
    )
    shape = [int(ctx.fake(input_arg).shape[axis])] if per_channel else []
    sizes = np.array(shape, dtype=np.uint32)
    scale = coreai.reshape(ctx.value(scale_arg, real), sizes)
    offset1, offset2 = _offsets(ctx, zero_point, ctx.arg("minval"), quantized, real, shape)
    offset1, offset2 = coreai.reshape(offset1, sizes), coreai.reshape(offset2, sizes)
    build = coreai.quantize if quantize else coreai.dequantize
    return build(ctx.value(input_arg), scale, offset1, offset2, np.array(axis, dtype=np.int32))


@register_lowering(ops.quantize.default)
def lower_quantize(ctx: LoweringContext, node: fx.Node) -> Value:
    output = ctx.arg("output_dtype")
    if _sub_byte_type(output) is not None:
        raise NotImplementedError(
            f"{node.name}: coreai::quantize to {output} (a sub-byte activation) is not "
            "converted; quantize activations to int8 or uint8"
        )
    return _per_axis(ctx, dtypes.element_type(output), ctx.dtype(ctx.arg("input")), True)


@register_lowering(ops.dequantize.default)
def lower_dequantize(ctx: LoweringContext, node: fx.Node) -> Value:
    quantized = dtypes.element_type(ctx.dtype(ctx.arg("input")))
    value = _per_axis(ctx, quantized, ctx.dtype(ctx.arg("scale")), False)
    return ctx.cast(value, ctx.result_dtype())
