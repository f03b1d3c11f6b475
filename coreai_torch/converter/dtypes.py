"""Element types: torch dtypes as Core AI IR types.

Core AI programs run on GPUs and neural engines that compute in 32 bits at
most, so 64-bit torch types are narrowed when they enter the IR: ``int64``
becomes ``si32`` and ``float64`` becomes ``f32``. Graph inputs, constants and
every intermediate value follow the same rule, which is also what Apple's
converter emits, so a converted program takes ``int32`` arrays where the torch
model took ``int64`` ones. (The Linux CPU runtime would accept ``si64``, but a
program using it would not run on the devices Core AI targets.)
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import torch
from coreai._compiler.dialects.coreai.constant import create_elements_attr
from coreai._compiler.ir import (
    BF16Type,
    F16Type,
    F32Type,
    IntegerType,
    Location,
    RankedTensorType,
    ShapedType,
    Type,
    Value,
)

from ..contract import COREAI_NARROWING
from .constants import constant_op, weight_attribute

# What a torch dtype becomes inside the IR (after narrowing): the contract's table.
NARROWED: dict[torch.dtype, torch.dtype] = COREAI_NARROWING

_ELEMENT_TYPES: dict[torch.dtype, Callable[[], Type]] = {
    torch.float32: F32Type.get,
    torch.float16: F16Type.get,
    torch.bfloat16: BF16Type.get,
    torch.bool: lambda: IntegerType.get_signless(1),
    torch.int8: lambda: IntegerType.get_signed(8),
    torch.int16: lambda: IntegerType.get_signed(16),
    torch.int32: lambda: IntegerType.get_signed(32),
    torch.uint8: lambda: IntegerType.get_unsigned(8),
    torch.uint16: lambda: IntegerType.get_unsigned(16),
    torch.uint32: lambda: IntegerType.get_unsigned(32),
}

_NUMPY_TYPES: dict[torch.dtype, type] = {
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.bfloat16: ml_dtypes.bfloat16,
    torch.bool: np.bool_,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.uint8: np.uint8,
    torch.uint16: np.uint16,
    torch.uint32: np.uint32,
}

# The size of a dimension the IR does not know statically.
_DYNAMIC = ShapedType.get_dynamic_size()

# IR element type spelling -> torch dtype, for values built by lowerings.
_FROM_IR: dict[str, torch.dtype] = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i1": torch.bool,
    "si8": torch.int8,
    "si16": torch.int16,
    "si32": torch.int32,
    "si64": torch.int64,
    "ui8": torch.uint8,
    "ui16": torch.uint16,
    "ui32": torch.uint32,
    "f64": torch.float64,
}


def narrow(dtype: torch.dtype) -> torch.dtype:
    """The dtype a torch dtype has inside the IR."""
    return NARROWED.get(dtype, dtype)


def is_supported(dtype: torch.dtype) -> bool:
    return narrow(dtype) in _ELEMENT_TYPES


def element_type(dtype: torch.dtype) -> Type:
    """The IR element type of ``dtype`` (narrowed). Needs an active IR context."""
    narrowed = narrow(dtype)
    if narrowed not in _ELEMENT_TYPES:
        raise TypeError(
            f"dtype {dtype} has no Core AI element type; supported: "
            + ", ".join(str(d) for d in (*_ELEMENT_TYPES, *NARROWED))
        )
    return _ELEMENT_TYPES[narrowed]()


def numpy_type(dtype: torch.dtype) -> type:
    """The numpy scalar type that holds constants of ``dtype`` (narrowed)."""
    narrowed = narrow(dtype)
    if narrowed not in _NUMPY_TYPES:
        raise TypeError(f"dtype {dtype} cannot be stored in a Core AI constant")
    return _NUMPY_TYPES[narrowed]


def torch_dtype_of(ir_type: Type) -> torch.dtype:
    """The torch dtype of an IR element type or of a ranked tensor's elements."""
    if isinstance(ir_type, RankedTensorType):
        ir_type = ir_type.element_type
    spelling = str(ir_type)
    if spelling not in _FROM_IR:
        raise TypeError(f"IR element type {spelling} has no torch dtype")
    return _FROM_IR[spelling]


def ir_dims(fake: torch.Tensor) -> list[int]:
    """The IR sizes of a (fake) tensor: symbolic sizes become dynamic dims."""
    return [_DYNAMIC if isinstance(size, torch.SymInt) else int(size) for size in fake.shape]


def tensor_type(fake: torch.Tensor) -> RankedTensorType:
    """The IR tensor type of a (fake) tensor; symbolic sizes become dynamic dims."""
    return RankedTensorType.get(ir_dims(fake), element_type(fake.dtype))


def constant(value: object, dtype: torch.dtype) -> Value:
    """A Core AI constant of torch ``dtype`` (narrowed) from a number, array or tensor."""
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu()
        if data.dtype == torch.bfloat16:
            array = data.float().numpy().astype(numpy_type(dtype))
        else:
            narrowed = narrow(dtype)
            array = (data if data.dtype == narrowed else data.to(narrowed)).numpy()
    else:
        array = np.array(value, dtype=numpy_type(dtype))
    # The attribute coreai.constant would build from ``array``, made directly:
    # its generic path copies the data twice and analyses the type again, which
    # took half the time of converting a small transformer's weights.
    kind = RankedTensorType.get(list(array.shape), element_type(dtype))
    attr = weight_attribute(array, kind)
    if attr is None:
        data = np.ascontiguousarray(array.reshape(1) if array.ndim == 0 else array)
        attr = create_elements_attr(Location.unknown(), kind, data)
    return constant_op(attr)
