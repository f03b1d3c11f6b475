"""Small constants (axes, sizes, permutations, slice bounds), built once per block.

Op builders take such operands as numpy arrays and make a ``coreai.constant``
of each, which costs several times the op itself, and a transformer asks for
the same few values hundreds of times (the same head permutation in every
layer). ``small_constant`` builds each distinct value once per IR block,
straight from a dense attribute, and returns it for reuse: builders infer
result types from a constant operand the same way whether it was made from a
numpy array or given as a value, as long as its element type is the one the
op expects (the caller's numpy dtype says which).

Large constants (weights) are made by :func:`weight_attribute`, once per
distinct contents in a conversion.

The caches hold values of the blocks being built by running conversions only:
the converter calls :func:`begin` when a conversion starts and :func:`forget`
when it ends.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from coreai._compiler.dialects._coreai_ops_gen import ConstantOp
from coreai._compiler.ir import (
    Attribute,
    DenseElementsAttr,
    DenseResourceElementsAttr,
    F32Type,
    InsertionPoint,
    IntegerAttr,
    IntegerType,
    Operation,
    RankedTensorType,
    Type,
    Value,
)

from .._compression._intx import pack_bits

# Arrays up to this many elements are cached; larger ones are data, not operands.
_LARGEST = 64

_ELEMENT_TYPES: dict[np.dtype, Callable[[], Type]] = {
    np.dtype(np.int32): lambda: IntegerType.get_signed(32),
    np.dtype(np.uint32): lambda: IntegerType.get_unsigned(32),
    np.dtype(np.float32): F32Type.get,
}

_CACHE: dict[tuple[Any, ...], Value] = {}


def constant_op(attr: Attribute) -> Value:
    """A ``coreai.constant`` of ``attr`` (a typed elements attribute), at the current place.

    The op ``ConstantOp(value=attr)`` builds, created directly with the
    attribute's type as its result type: the generated builder's Python
    (default-location lookup, attribute check) and its result type inference
    cost as much again as the op, and a conversion makes about a hundred.
    """
    return Operation.create(
        ConstantOp.OPERATION_NAME, results=[attr.type], attributes={"value": attr}
    ).result


def small_constant(array: np.ndarray) -> Value | np.ndarray:
    """The constant of ``array`` in the current block: shared, or ``array`` itself if large."""
    element = _ELEMENT_TYPES.get(array.dtype)
    if element is None or array.size > _LARGEST:
        return array
    key = (InsertionPoint.current.block, array.dtype.str, array.shape, array.tobytes())
    found = _CACHE.get(key)
    if found is None:
        kind = RankedTensorType.get(list(array.shape), element())
        found = _CACHE[key] = constant_op(DenseElementsAttr.get(array, type=kind))
    return found


def i32(values: Any) -> Value | np.ndarray:
    """An si32 operand (axes, starts, signed sizes) as a shared constant."""
    return _by_value(values, np.int32)


def u32(values: Any) -> Value | np.ndarray:
    """A ui32 operand (permutations, sizes, windows) as a shared constant."""
    return _by_value(values, np.uint32)


def _by_value(values: Any, element: type) -> Value | np.ndarray:
    """``small_constant`` of ``values`` as ``element``, found by the Python value first.

    Lowerings ask for the same few axes and permutations hundreds of times; a
    dict lookup by the int or flat sequence they pass skips making the array.
    """
    kind = type(values)
    if kind is int:
        key: Any = (InsertionPoint.current.block, element, values)
    elif (kind is list or kind is tuple) and all(type(v) is int for v in values):
        key = (InsertionPoint.current.block, element, kind, *values)
    else:
        return small_constant(np.array(values, dtype=element))
    found = _BY_VALUE.get(key)
    if found is None:
        found = _BY_VALUE[key] = small_constant(np.array(values, dtype=element))
    return found


# i32 and u32 by (block, element type, value): see _by_value.
_BY_VALUE: dict[tuple[Any, ...], Value | np.ndarray] = {}


# Arrays from this size up are stored as resources (as coreai's
# create_elements_attr stores them); smaller ones are written inline.
RESOURCE_BYTES = 1024
# Alignment of a resource's data, as create_elements_attr aligns it.
_ALIGNMENT = 16
# Element types whose bytes a resource holds as they are in numpy (not bool,
# which MLIR packs differently).
_RESOURCE_KINDS = frozenset("fiu")

# Arrays up to this size are also matched by their bytes (hashing costs
# about 0.3 µs per kilobyte): tables, not the weights of a linear layer.
_HASHED_BYTES = 16 * 1024

_RESOURCES: dict[tuple[Any, ...], tuple[np.ndarray, Attribute]] = {}
# The resource of each array by its memory (address, strides, shape, dtype),
# with the array itself: a weight that several entry points read is found
# without comparing its bytes.
_BY_MEMORY: dict[tuple[Any, ...], tuple[np.ndarray, Attribute]] = {}

# Numbers for the names of the resources made next (see begin()).
_names: Iterator[int] = itertools.count()


def weight_attribute(array: np.ndarray, kind: RankedTensorType) -> Attribute | None:
    """A resource attribute holding a copy of ``array``, or ``None`` where it does not apply.

    coreai's ``create_elements_attr`` names each resource by a hash of its
    bytes, which takes about 1 µs per kilobyte: a third of converting a small
    transformer's linear layer. Here a resource is made once per array a
    conversion stores: the same memory, strides and shape (a weight that two
    entry points read), or, up to ``_HASHED_BYTES``, the same bytes (a table
    each entry point computes anew). A match is compared in full before it is
    shared. ``None`` for arrays stored inline (small, or one value repeated)
    and for element types kept as ``create_elements_attr`` writes them.
    """
    if array.nbytes < RESOURCE_BYTES or array.dtype.kind not in _RESOURCE_KINDS:
        return None
    address = array.__array_interface__["data"][0]
    same_memory = (address, array.strides, array.shape, array.dtype.str)
    found = _BY_MEMORY.get(same_memory)
    if found is not None:
        # The array seen first at this address is kept alive by the entry, so
        # the memory was not freed and reused by another array meanwhile; and
        # nothing writes into a program's tensors while it is converted.
        return found[1]
    # One copy, in C order (a linear's transposed weight is laid out here): it
    # is the resource's storage, so later writes to the caller's tensor do not
    # change the program.
    data = np.array(array, order="C", copy=True)
    # The address through the array interface: ``data.ctypes`` costs ten times more.
    if data.__array_interface__["data"][0] % _ALIGNMENT:
        return None
    bits = data.reshape(-1).view(f"u{data.itemsize}")
    if bits[0] == bits[-1] and (bits == bits[0]).all():
        return None  # a splat: an inline constant of one value
    same_bytes = None
    if data.nbytes <= _HASHED_BYTES:
        same_bytes = (data.shape, data.dtype.str, zlib.crc32(bits))
        found = _shared(same_bytes, data)
        if found is not None:
            _BY_MEMORY[same_memory] = (array, found)
            return found
    # A name no resource of the context has: MLIR makes a taken name unique by
    # trying name_1, name_2, ... until one is free, a cost that grows with the
    # resources already made (0.7 ms a weight at 4000 weights).
    name = f"constant_{next(_names)}"
    attr = DenseResourceElementsAttr.get_from_buffer(data, name, kind, alignment=_ALIGNMENT)
    _BY_MEMORY[same_memory] = (array, attr)
    if same_bytes is not None:
        _RESOURCES[same_bytes] = (data, attr)
    return attr


def _shared(key: tuple[Any, ...], array: np.ndarray) -> Attribute | None:
    found = _RESOURCES.get(key)
    if found is not None and np.array_equal(found[0], array):
        return found[1]
    return None


def begin(names: Iterator[int]) -> None:
    """Start a conversion: no cached constants; resources numbered from ``names``.

    ``names`` counts the resources of one IR context, across its conversions:
    the converter keeps one per context.
    """
    global _names
    forget()
    _names = names


def forget() -> None:
    """Drop every cached constant (a conversion ends)."""
    _CACHE.clear()
    _BY_VALUE.clear()
    _RESOURCES.clear()
    _BY_MEMORY.clear()


def packed_constant(values: np.ndarray, element: Type) -> Value:
    """A constant of sub-byte integers (si4, ui1, ...), stored at their size.

    ``values`` holds one element per byte (int8 or uint8); they are packed
    into a little-endian bit stream (``_compression._intx``), the layout Core
    AI reads, and kept as a
    resource, so a 4-bit weight takes half the bytes of an 8-bit one. One
    value repeated is written inline.
    """
    kind = RankedTensorType.get(list(values.shape), element)
    flat = values.reshape(-1)
    if flat.size == 0 or (flat == flat[0]).all():
        fill = int(flat[0]) if flat.size else 0
        return constant_op(DenseElementsAttr.get_splat(kind, IntegerAttr.get(element, fill)))
    packed = pack_bits(flat, IntegerType(element).width)
    # An aligned copy: the resource's storage (see weight_attribute).
    storage = np.empty(packed.size + _ALIGNMENT, dtype=np.uint8)
    start = -storage.__array_interface__["data"][0] % _ALIGNMENT
    data = storage[start : start + packed.size]
    data[:] = packed
    name = f"constant_{next(_names)}"
    attr = DenseResourceElementsAttr.get_from_buffer(data, name, kind, alignment=_ALIGNMENT)
    _RESOURCES[("packed", name)] = (data, attr)
    return constant_op(attr)
