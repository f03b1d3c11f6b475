"""The ``coreai::`` compression ops (eager and fake) and the modules coreai-opt builds.

Importing this module registers the ops as ``torch.ops.coreai.<name>`` with
the schemas of Apple's ``coreai-torch``; each has an eager meaning (below) and
a fake one for ``torch.export``. Where a weight is a module's buffer, the
converter stores it at its size: int4 data and 4-bit palette indices as 4-bit
elements, a pruning mask as 1-bit ones (``converter/ops/compression.py``).

- ``constexpr_blockwise_shift_scale(input, scale, zero_point, minval,
  input_dtype, output_dtype)``: blockwise dequantization. ``scale`` has the
  rank of ``input`` and each of its elements scales a block of ``input``:
  ``scale * (input - zero_point)``, ``scale * (input - q_min) + minval``
  (``q_min`` of ``input_dtype``, which may be a sub-byte dtype such as
  ``torch.int4`` while the data is held in int8), or ``scale * input``.
- ``quantize(input, scale, output_dtype, zero_point, minval, axis)`` and
  ``dequantize(input, scale, zero_point, minval, axis, input_dtype,
  output_dtype)``: per-tensor (0-D scale) or per-channel (1-D scale along
  ``axis``) quantization of activations, rounding to nearest-even and
  clamping to the range of ``output_dtype``.
- ``lut_to_dense(indices, lut, axis)``: palettized weights. ``lut`` is
  ``[*blocks, 2**nbits, vector_size]`` over the ``K`` dims of ``indices``,
  each palette serving one block; with ``vector_size > 1`` each index stands
  for that many consecutive elements along ``axis``.
- ``sparse_to_dense(nonzero_data, mask)``: the elements of ``nonzero_data``
  placed, in row-major order, where ``mask`` is 1; zeros elsewhere.

>>> import torch
>>> indices = torch.tensor([[0, 3], [1, 2]], dtype=torch.uint8)
>>> lut = torch.tensor([0.0, 1.0, 2.0, 3.0]).reshape(1, 1, 4, 1)
>>> torch.ops.coreai.lut_to_dense(indices, lut, 0).tolist()
[[0.0, 3.0], [1.0, 2.0]]
>>> mask = torch.tensor([[1, 0], [0, 1]], dtype=torch.uint8)
>>> torch.ops.coreai.sparse_to_dense(torch.tensor([5.0, 6.0]), mask).tolist()
[[5.0, 0.0], [0.0, 6.0]]
"""

from __future__ import annotations

import math

import torch

from ._floatx import Float4Tensor
from .utils import int_dtype_range, repeat_tensor_as

__all__ = [
    "ActivationDequantizeModule",
    "ActivationQuantizeModule",
    "Float4Tensor",
    "PalettizeModule",
    "ScaledPalettizeModule",
    "SparseModule",
    "WeightDequantizeModule",
]

_PALETTE_DTYPES = (
    torch.uint8,
    torch.int8,
    torch.float8_e5m2,
    torch.float8_e4m3fn,
    torch.bfloat16,
    torch.float16,
    torch.float32,
)


def _refuse_fp4(op: str, data: torch.Tensor, scale: torch.Tensor) -> None:
    if data.dtype == torch.uint8 and scale.dtype == torch.float8_e8m0fnu:
        raise NotImplementedError(
            f"coreai::{op}: fp4 data (uint8 bytes with a float8_e8m0fnu scale) is not "
            "supported by coreai_torch yet; compress with int8 or int4 instead"
        )


def _check_offsets(
    op: str,
    data: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    minval: torch.Tensor | None,
    data_dtype: torch.dtype | None,
) -> None:
    if zero_point is not None and minval is not None:
        raise ValueError(f"coreai::{op}: give zero_point or minval, not both")
    for name, offset in (("zero_point", zero_point), ("minval", minval)):
        if offset is not None and offset.shape != scale.shape:
            raise ValueError(
                f"coreai::{op}: {name} has shape {list(offset.shape)}, scale has "
                f"{list(scale.shape)}; they must be equal"
            )
    if minval is not None and data_dtype is None:
        raise ValueError(
            f"coreai::{op}: minval needs the quantized dtype (input_dtype), whose least value "
            "q_min it offsets; int4 data is held in int8, so the tensor's dtype does not say it"
        )


# -- blockwise dequantization ------------------------------------------------------


@torch.library.custom_op("coreai::constexpr_blockwise_shift_scale", mutates_args=())
def constexpr_blockwise_shift_scale(
    input: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None = None,
    minval: torch.Tensor | None = None,
    input_dtype: torch.dtype | None = None,
    output_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Blockwise dequantization (see the module's docstring)."""
    _refuse_fp4("constexpr_blockwise_shift_scale", input, scale)
    if scale.dim() != input.dim():
        raise ValueError(
            f"coreai::constexpr_blockwise_shift_scale: scale has rank {scale.dim()}, input "
            f"has rank {input.dim()}; give one scale per block, with the input's rank"
        )
    full_scale = repeat_tensor_as(scale, input.shape)
    if input.is_floating_point():
        if zero_point is not None or minval is not None:
            raise ValueError(
                "coreai::constexpr_blockwise_shift_scale: float data takes no zero_point or minval"
            )
        result = input.to(torch.float32) * full_scale.to(torch.float32)
        return result.to(output_dtype or scale.dtype)
    _check_offsets("constexpr_blockwise_shift_scale", input, scale, zero_point, minval, input_dtype)
    values = input.to(scale.dtype)
    if zero_point is not None:
        return (values - repeat_tensor_as(zero_point, input.shape).to(scale.dtype)) * full_scale
    if minval is not None:
        q_min = int_dtype_range(input_dtype)[0]
        return (values - q_min) * full_scale + repeat_tensor_as(minval, input.shape)
    return values * full_scale


@constexpr_blockwise_shift_scale.register_fake
def _(input, scale, zero_point=None, minval=None, input_dtype=None, output_dtype=None):
    _refuse_fp4("constexpr_blockwise_shift_scale", input, scale)
    dtype = (output_dtype or scale.dtype) if input.is_floating_point() else scale.dtype
    return input.new_empty(input.shape, dtype=dtype)


# -- activation quantization -------------------------------------------------------


def _along(tensor: torch.Tensor, axis: int, rank: int) -> torch.Tensor:
    """A per-tensor (0-D) or per-channel (1-D) tensor shaped to broadcast along ``axis``."""
    if tensor.dim() > 1:
        return tensor
    shape = [1] * rank
    if tensor.numel() > 1:
        shape[axis] = tensor.numel()
    return tensor.reshape(shape)


def _check_per_axis(op: str, data: torch.Tensor, scale: torch.Tensor, axis: int) -> int:
    if not -data.dim() <= axis < max(data.dim(), 1):
        raise ValueError(f"coreai::{op}: axis {axis} is out of range for rank {data.dim()}")
    axis %= max(data.dim(), 1)
    if scale.dim() > 1 and scale.dim() != data.dim():
        raise ValueError(
            f"coreai::{op}: a scale of rank {scale.dim()} must have the input's rank {data.dim()}"
        )
    if scale.numel() not in (1, data.shape[axis] if data.dim() else 1):
        raise ValueError(
            f"coreai::{op}: scale has {scale.numel()} elements; expected 1 (per tensor) or "
            f"{data.shape[axis]} (per channel along axis {axis})"
        )
    return axis


@torch.library.custom_op("coreai::quantize", mutates_args=())
def quantize(
    input: torch.Tensor,
    scale: torch.Tensor,
    output_dtype: torch.dtype,
    zero_point: torch.Tensor | None = None,
    minval: torch.Tensor | None = None,
    axis: int = 0,
) -> torch.Tensor:
    """Quantization of activations (see the module's docstring)."""
    axis = _check_per_axis("quantize", input, scale, axis)
    if not output_dtype.is_floating_point:
        _check_offsets("quantize", input, scale, zero_point, minval, output_dtype)
    rank = input.dim()
    scale = _along(scale, axis, rank)
    if output_dtype.is_floating_point:
        if zero_point is not None or minval is not None:
            raise ValueError("coreai::quantize: float quantization takes no zero_point or minval")
        info = torch.finfo(output_dtype)
        scaled = input.to(torch.float32) / scale.to(torch.float32)
        return scaled.clamp(info.min, info.max).to(output_dtype)
    q_min, q_max = int_dtype_range(output_dtype)
    if zero_point is not None:
        q = torch.round(input / scale) + _along(zero_point, axis, rank)
    elif minval is not None:
        q = torch.round((input - _along(minval, axis, rank)) / scale) + q_min
    else:
        q = torch.round(input / scale)
    return q.clamp(q_min, q_max).to(output_dtype)


@quantize.register_fake
def _(input, scale, output_dtype, zero_point=None, minval=None, axis=0):
    return input.new_empty(input.shape, dtype=output_dtype)


@torch.library.custom_op("coreai::dequantize", mutates_args=())
def dequantize(
    input: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None = None,
    minval: torch.Tensor | None = None,
    axis: int = 0,
    input_dtype: torch.dtype | None = None,
    output_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Dequantization of activations (see the module's docstring)."""
    axis = _check_per_axis("dequantize", input, scale, axis)
    if not input.is_floating_point():
        _check_offsets("dequantize", input, scale, zero_point, minval, input_dtype)
    rank = input.dim()
    scale = _along(scale, axis, rank)
    if input.is_floating_point():
        if zero_point is not None or minval is not None:
            raise ValueError("coreai::dequantize: float data takes no zero_point or minval")
        result = input.to(torch.float32) * scale.to(torch.float32)
        return result.to(output_dtype or scale.dtype)
    values = input.to(scale.dtype)
    if zero_point is not None:
        return (values - _along(zero_point, axis, rank).to(scale.dtype)) * scale
    if minval is not None:
        q_min = int_dtype_range(input_dtype)[0]
        return (values - q_min) * scale + _along(minval, axis, rank)
    return values * scale


@dequantize.register_fake
def _(input, scale, zero_point=None, minval=None, axis=0, input_dtype=None, output_dtype=None):
    dtype = (output_dtype or scale.dtype) if input.is_floating_point() else scale.dtype
    return input.new_empty(input.shape, dtype=dtype)


# -- palettization -----------------------------------------------------------------


def _palette_bits(lut: torch.Tensor) -> int:
    palettes = lut.shape[-2]
    bits = int(math.log2(palettes)) if palettes > 0 else -1
    if bits < 1 or 1 << bits != palettes or lut.dtype not in _PALETTE_DTYPES:
        raise ValueError(
            f"coreai::lut_to_dense: lut must be [*blocks, 2**nbits, vector_size] of one of "
            f"{[str(d) for d in _PALETTE_DTYPES]}; got {list(lut.shape)} {lut.dtype}"
        )
    return bits


def _lut_output_shape(indices: torch.Tensor, lut: torch.Tensor, axis: int) -> list[int]:
    if lut.dim() != indices.dim() + 2:
        raise ValueError(
            f"coreai::lut_to_dense: lut has rank {lut.dim()}, expected the indices' rank "
            f"{indices.dim()} + 2 ([*blocks, palettes, vector_size])"
        )
    _palette_bits(lut)
    shape = list(indices.shape)
    shape[axis % indices.dim()] *= lut.shape[-1]
    return shape


@torch.library.custom_op("coreai::lut_to_dense", mutates_args=())
def lut_to_dense(indices: torch.Tensor, lut: torch.Tensor, axis: int) -> torch.Tensor:
    """Palettized weights (see the module's docstring)."""
    shape = _lut_output_shape(indices, lut, axis)
    # As Python ints: a uint8 tensor compared with 256 compares with 256 wrapped to 0.
    if indices.is_floating_point() or not (
        int(indices.min()) >= 0 and int(indices.max()) < lut.shape[-2]
    ):
        raise ValueError(
            f"coreai::lut_to_dense: indices must be integers in [0, {lut.shape[-2]}) "
            f"(one per palette entry)"
        )
    # Each index's palette: [*indices.shape, palettes, vector_size].
    palettes = repeat_tensor_as(lut, indices.shape)
    index = indices.long()[..., None, None].expand(*indices.shape, 1, lut.shape[-1])
    picked = palettes.gather(-2, index).squeeze(-2)  # [*indices.shape, vector_size]
    # A vector's elements lie next to each other along axis.
    return picked.movedim(-1, axis % indices.dim() + 1).reshape(shape)


@lut_to_dense.register_fake
def _(indices, lut, axis):
    return lut.new_empty(_lut_output_shape(indices, lut, axis))


# -- pruning -----------------------------------------------------------------------


@torch.library.custom_op("coreai::sparse_to_dense", mutates_args=())
def sparse_to_dense(nonzero_data: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Pruned weights (see the module's docstring)."""
    if nonzero_data.dim() != 1:
        raise ValueError(
            f"coreai::sparse_to_dense: nonzero_data must be 1-D, got shape "
            f"{list(nonzero_data.shape)}"
        )
    where = mask.bool()
    if not torch.equal(where.to(mask.dtype), mask) or int(where.sum()) != nonzero_data.numel():
        raise ValueError(
            f"coreai::sparse_to_dense: mask must hold only 0 and 1, with one 1 per element "
            f"of nonzero_data ({nonzero_data.numel()}); it has {int(where.sum())} nonzero"
        )
    dense = torch.zeros(mask.shape, dtype=nonzero_data.dtype)
    dense[where] = nonzero_data
    return dense


@sparse_to_dense.register_fake
def _(nonzero_data, mask):
    return nonzero_data.new_empty(mask.shape)


# -- the modules coreai-opt builds --------------------------------------------------


def _register_scales(
    module: torch.nn.Module,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    minval: torch.Tensor | None,
) -> None:
    """The quantization buffers every module below has (``None`` ones included)."""
    module.register_buffer("scale", scale)
    module.register_buffer("zero_point", zero_point)
    module.register_buffer("minval", minval)


def _dequantized(module: torch.nn.Module, data: torch.Tensor) -> torch.Tensor:
    """``constexpr_blockwise_shift_scale`` of ``data`` with a module's scales and dtypes."""
    return torch.ops.coreai.constexpr_blockwise_shift_scale(
        data,
        module.scale,
        zero_point=module.zero_point,
        minval=module.minval,
        input_dtype=module.input_dtype,
        output_dtype=module.output_dtype,
    )


class WeightDequantizeModule(torch.nn.Module):
    """A quantized weight: ``constexpr_blockwise_shift_scale`` of its buffers."""

    def __init__(
        self,
        quantized_data: torch.Tensor,
        scale: torch.Tensor,
        zero_point: torch.Tensor | None = None,
        minval: torch.Tensor | None = None,
        input_dtype: torch.dtype | None = None,
        output_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.register_buffer("quantized_data", quantized_data)
        _register_scales(self, scale, zero_point, minval)
        self.input_dtype = input_dtype
        self.output_dtype = output_dtype

    def forward(self) -> torch.Tensor:
        return _dequantized(self, self.quantized_data)


class PalettizeModule(torch.nn.Module):
    """A palettized weight: ``lut_to_dense`` of its indices and palettes."""

    def __init__(
        self, indices: torch.Tensor, lut: torch.Tensor, vector_axis: int | None = None
    ) -> None:
        super().__init__()
        self.register_buffer("indices", indices)
        self.register_buffer("lut", lut)
        self.vector_axis = vector_axis or 0

    def forward(self) -> torch.Tensor:
        return torch.ops.coreai.lut_to_dense(self.indices, self.lut, self.vector_axis)


class ScaledPalettizeModule(torch.nn.Module):
    """A palettized weight whose palette entries are quantized: lut_to_dense, then dequantized."""

    def __init__(
        self,
        indices: torch.Tensor,
        lut: torch.Tensor,
        scale: torch.Tensor,
        vector_axis: int | None = None,
        zero_point: torch.Tensor | None = None,
        minval: torch.Tensor | None = None,
        input_dtype: torch.dtype | None = None,
        output_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.register_buffer("indices", indices)
        self.register_buffer("lut", lut)
        _register_scales(self, scale, zero_point, minval)
        self.vector_axis = vector_axis or 0
        self.input_dtype = input_dtype
        self.output_dtype = output_dtype

    def forward(self) -> torch.Tensor:
        palettized = torch.ops.coreai.lut_to_dense(self.indices, self.lut, self.vector_axis)
        return _dequantized(self, palettized)


class SparseModule(torch.nn.Module):
    """A pruned weight: ``sparse_to_dense`` of its nonzero elements and mask."""

    def __init__(self, nonzero_data: torch.Tensor, mask: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("nonzero_data", nonzero_data)
        self.register_buffer("mask", mask)

    def forward(self) -> torch.Tensor:
        return torch.ops.coreai.sparse_to_dense(self.nonzero_data, self.mask)


class ActivationQuantizeModule(torch.nn.Module):
    """Quantizes its input with ``coreai::quantize``."""

    def __init__(
        self,
        scale: torch.Tensor,
        output_dtype: torch.dtype,
        zero_point: torch.Tensor | None = None,
        minval: torch.Tensor | None = None,
        axis: int = 0,
    ) -> None:
        super().__init__()
        _register_scales(self, scale, zero_point, minval)
        self.output_dtype = output_dtype
        self.axis = axis

    def forward(self, input_tensor: torch.Tensor) -> torch.Tensor:
        return torch.ops.coreai.quantize(
            input_tensor,
            self.scale,
            self.output_dtype,
            zero_point=self.zero_point,
            minval=self.minval,
            axis=self.axis,
        )


class ActivationDequantizeModule(torch.nn.Module):
    """Dequantizes its input with ``coreai::dequantize``."""

    def __init__(
        self,
        scale: torch.Tensor,
        zero_point: torch.Tensor | None = None,
        minval: torch.Tensor | None = None,
        axis: int = 0,
        input_dtype: torch.dtype | None = None,
        output_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _register_scales(self, scale, zero_point, minval)
        self.axis = axis
        self.input_dtype = input_dtype
        self.output_dtype = output_dtype

    def forward(self, input_tensor: torch.Tensor) -> torch.Tensor:
        return torch.ops.coreai.dequantize(
            input_tensor,
            self.scale,
            zero_point=self.zero_point,
            minval=self.minval,
            axis=self.axis,
            input_dtype=self.input_dtype,
            output_dtype=self.output_dtype,
        )
