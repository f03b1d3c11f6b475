"""Scalar types of compressed data, named as coreai-opt names them (``"int4"``, ``"fp16"``).

coreai-opt's IR passes look a dtype name up with :func:`string_to_builtin`
and ask the type for its width (``get_bitwidth()``) and signedness
(``is_unsigned()``), and for the numpy type that holds its values
(:func:`nptype_from_builtin`: sub-byte integers are held one per byte).

>>> int4 = string_to_builtin("int4")
>>> int4.get_bitwidth(), int4.is_unsigned(), is_int(int4), builtin_to_string(int4)
(4, False, True, 'int4')
>>> nptype_from_builtin(string_to_builtin("uint2"))
dtype('uint8')
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Holds a sub-byte type's values in numpy, one per byte; read by numpy_type_to_builtin_type.
SUB_BYTE_DTYPE_METADATA_KEY = "true_dtype"


class _Scalar:
    """Base of the scalar types; the types are classes, used without instances."""

    name: str = ""
    bits: int = 0
    numpy_type: Any = None

    @classmethod
    def get_bitwidth(cls) -> int:
        return cls.bits

    @classmethod
    def __type_info__(cls) -> str:
        return cls.name


class _Int(_Scalar):
    unsigned: bool = False

    @classmethod
    def is_unsigned(cls) -> bool:
        return cls.unsigned


class _Float(_Scalar):
    pass


def _int(bits: int, unsigned: bool) -> type[_Int]:
    name = f"{'u' if unsigned else ''}int{bits}"
    kind = type(name, (_Int,), {"name": name, "bits": bits, "unsigned": unsigned})
    if bits in (8, 16, 32, 64):
        kind.numpy_type = np.dtype(name).type
    else:
        # One value per byte, the dtype marked with the type it holds.
        base = np.uint8 if unsigned else np.int8
        kind.numpy_type = np.dtype(base, metadata={SUB_BYTE_DTYPE_METADATA_KEY: kind})
    return kind


def _float(name: str, bits: int, numpy_type: Any) -> type[_Float]:
    return type(name, (_Float,), {"name": name, "bits": bits, "numpy_type": numpy_type})


class types_bool(_Scalar):  # coreai-opt's name
    name, bits, numpy_type = "bool", 1, np.bool_


_INTS = {
    (bits, unsigned): _int(bits, unsigned)
    for bits in (1, 2, 3, 4, 6, 8, 16, 32, 64)
    for unsigned in (False, True)
    if unsigned or bits >= 2
}
_FLOATS = [
    _float("fp16", 16, np.float16),
    _float("fp32", 32, np.float32),
    _float("fp64", 64, np.float64),
]
_BY_NAME: dict[str, type[_Scalar]] = {
    **{kind.name: kind for kind in _INTS.values()},
    **{kind.name: kind for kind in _FLOATS},
    "bool": types_bool,
}


def string_to_builtin(name: str) -> type[_Scalar]:
    """The scalar type named ``name`` (``"int4"``, ``"uint1"``, ``"fp16"``)."""
    try:
        return _BY_NAME[str(name)]
    except KeyError:
        raise KeyError(
            f"no compression scalar type named {name!r}; known: {sorted(_BY_NAME)}"
        ) from None


def builtin_to_string(kind: Any) -> str:
    """The name of a scalar type (``"int4"``)."""
    return kind.name if isinstance(kind, type) and issubclass(kind, _Scalar) else str(kind)


def is_int(kind: Any) -> bool:
    """Whether ``kind`` is one of the integer types."""
    return isinstance(kind, type) and issubclass(kind, _Int)


def is_float(kind: Any) -> bool:
    """Whether ``kind`` is one of the floating-point types."""
    return isinstance(kind, type) and issubclass(kind, _Float)


def nptype_from_builtin(kind: Any) -> Any:
    """The numpy type that holds values of ``kind`` (sub-byte integers: one per byte)."""
    if not (isinstance(kind, type) and issubclass(kind, _Scalar)):
        raise TypeError(f"expected a compression scalar type, got {kind!r}")
    return kind.numpy_type


def numpy_type_to_builtin_type(numpy_type: Any) -> type[_Scalar]:
    """The scalar type of a numpy dtype (a marked sub-byte holder gives its sub-byte type)."""
    dtype = np.dtype(numpy_type)
    marked = (dtype.metadata or {}).get(SUB_BYTE_DTYPE_METADATA_KEY)
    if marked is not None:
        return marked
    if dtype.kind == "b":
        return types_bool
    if dtype.kind in "iu":
        return _INTS[(dtype.itemsize * 8, dtype.kind == "u")]
    if dtype.kind == "f":
        return _BY_NAME[f"fp{dtype.itemsize * 8}"]
    raise TypeError(f"no compression scalar type for numpy dtype {dtype}")
