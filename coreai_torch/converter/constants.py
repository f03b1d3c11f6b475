"""Small constants (axes, sizes, permutations, slice bounds), built once per block.

Op builders take such operands as numpy arrays and make a ``coreai.constant``
of each, which costs several times the op itself, and a transformer asks for
the same few values hundreds of times (the same head permutation in every
layer). ``small_constant`` builds each distinct value once per IR block,
straight from a dense attribute, and returns it for reuse: builders infer
result types from a constant operand the same way whether it was made from a
numpy array or given as a value, as long as its element type is the one the
op expects (the caller's numpy dtype says which).

The cache holds values of the blocks being built by running conversions only:
``GraphLowerer`` calls :func:`forget` when a conversion starts and ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from coreai._compiler.dialects._coreai_ops_gen import ConstantOp
from coreai._compiler.ir import (
    DenseElementsAttr,
    F32Type,
    InsertionPoint,
    IntegerType,
    RankedTensorType,
    Type,
    Value,
)

# Arrays up to this many elements are cached; larger ones are data, not operands.
_LARGEST = 64

_ELEMENT_TYPES: dict[np.dtype, Callable[[], Type]] = {
    np.dtype(np.int32): lambda: IntegerType.get_signed(32),
    np.dtype(np.uint32): lambda: IntegerType.get_unsigned(32),
    np.dtype(np.float32): F32Type.get,
}

_CACHE: dict[tuple[Any, ...], Value] = {}


def small_constant(array: np.ndarray) -> Value | np.ndarray:
    """The constant of ``array`` in the current block: shared, or ``array`` itself if large."""
    element = _ELEMENT_TYPES.get(array.dtype)
    if element is None or array.size > _LARGEST:
        return array
    key = (InsertionPoint.current.block, array.dtype.str, array.shape, array.tobytes())
    found = _CACHE.get(key)
    if found is None:
        kind = RankedTensorType.get(list(array.shape), element())
        found = _CACHE[key] = ConstantOp(value=DenseElementsAttr.get(array, type=kind)).result
    return found


def i32(values: Any) -> Value | np.ndarray:
    """An si32 operand (axes, starts, signed sizes) as a shared constant."""
    return small_constant(np.array(values, dtype=np.int32))


def u32(values: Any) -> Value | np.ndarray:
    """A ui32 operand (permutations, sizes, windows) as a shared constant."""
    return small_constant(np.array(values, dtype=np.uint32))


def forget() -> None:
    """Drop every cached constant (a conversion starts or ends)."""
    _CACHE.clear()
