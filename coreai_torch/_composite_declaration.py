"""Core AI composite declarations: the attribute that makes a graph a composite op.

A ``coreai.graph`` with a ``composite_decl`` stands for one op of that name
(``rms_norm``, ``sdpa``, ...) that a backend may run as a whole; its body is
the op's reference computation. The declaration names the op, its arguments
and results, and holds the op's attributes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

from coreai._compiler.ir import (
    ArrayAttr,
    Attribute,
    BoolAttr,
    Context,
    DictAttr,
    F32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    Location,
    StringAttr,
)


def generate_composite_decl(
    context: Context,
    composite_name: str,
    input_names: Sequence[str],
    output_names: Sequence[str],
    op_attributes: dict,
    version: int = 1,
) -> Attribute:
    """The ``#coreai.composite_declaration`` attribute of a composite op.

    ``op_attributes`` become the declaration's ``op_attrs`` with ``version``
    added: booleans, integers (64-bit signed), floats (32-bit), strings, enums
    (their value) and lists or dicts of these. ``op_attributes`` itself is
    left as it is. ``context`` is the IR context the attribute belongs to (an
    MLIR context with Core AI's dialect, or a ``coreai.authoring.Context``).

    >>> from coreai.authoring import Context
    >>> decl = generate_composite_decl(
    ...     Context(), "rms_norm", ["input", "scale"], ["output"], {"eps": 1e-6}
    ... )
    >>> print(decl)  # doctest: +NORMALIZE_WHITESPACE
    #coreai.composite_declaration<"rms_norm" = {input_names = ["input", "scale"],
    op_attrs = {eps = 9.99999997E-7 : f32, version = 1 : si64}, output_names = ["output"]}>
    """
    for what, names in (("input_names", input_names), ("output_names", output_names)):
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise TypeError(
                f"composite {composite_name!r}: {what} must be a sequence of strings, got {names!r}"
            )
    attributes = {**op_attributes, "version": version}
    context = getattr(context, "_mlir_context", context)
    # FloatAttr.get asks for a location (of no use in an attribute).
    with context, Location.unknown(context):
        declaration = _dict(
            {
                "input_names": list(input_names),
                "output_names": list(output_names),
                "op_attrs": attributes,
            },
            composite_name,
        )
        return Attribute.parse(f'#coreai.composite_declaration<"{composite_name}" = {declaration}>')


def _attribute(value: Any, composite: str, key: str) -> Attribute:
    if isinstance(value, enum.Enum):
        value = value.value
    # bool before int: True is an int to Python.
    if isinstance(value, bool):
        return BoolAttr.get(value)
    if isinstance(value, int):
        return IntegerAttr.get(IntegerType.get_signed(64), value)
    if isinstance(value, float):
        return FloatAttr.get(F32Type.get(), value)
    if isinstance(value, str):
        return StringAttr.get(value)
    if isinstance(value, Mapping):
        return _dict(value, composite)
    if isinstance(value, list | tuple):
        return ArrayAttr.get([_attribute(v, composite, key) for v in value])
    raise TypeError(
        f"composite {composite!r}: attribute {key!r} is {value!r} ({type(value).__name__}); "
        "a composite declaration holds bools, ints, floats, strings and lists or dicts of "
        "them. Convert the value, or leave the attribute out."
    )


def _dict(values: Mapping[str, Any], composite: str) -> DictAttr:
    return DictAttr.get({k: _attribute(v, composite, k) for k, v in values.items()})
