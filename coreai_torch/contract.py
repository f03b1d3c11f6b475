"""The kernel contract: specializations and the two Metal renderings of one.

Every piece of code that turns a kernel definition plus the ranks and dtypes of
one call into Metal source lives here; the eager backends and the converter only
ask this module. ``docs/internals.md`` shows both renderings on an example.

- The *Core AI rendering* is what a ``coreai.metal4_kernel`` operation carries:
  tensors are ``tensor_handle`` parameters and scalar values are baked into the
  body as shadowing literals (the Core AI runtime cannot read scalar buffers).
- The *buffer rendering* is what the eager backends compile (Metal on the GPU,
  C++ on the CPU): tensors arrive as ``device T*`` plus one metadata buffer of
  extents and strides, and ``tensor_inline`` views with the user's names are
  declared in front of the body, which is pasted verbatim.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

# torch dtype -> Metal element type (DESIGN.md, "Element types").
METAL_TYPES: dict[torch.dtype, str] = {
    torch.float32: "float",
    torch.float16: "half",
    torch.bfloat16: "bfloat",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.int16: "int16_t",
    torch.uint16: "uint16_t",
    torch.int32: "int",
    torch.uint32: "uint",
    torch.int64: "int64_t",
    torch.uint64: "uint64_t",
    torch.bool: "bool",
}

# Python scalar type of a torch_defn parameter -> Metal type of its parameter.
SCALAR_METAL_TYPES: dict[type, str] = {int: "int", float: "float", bool: "bool"}

# Metal binds at most 31 buffers; Core AI counts every kernel parameter.
PARAMETER_LIMIT = 31

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# Names the buffer rendering adds to the kernel's scope.
META_NAME = "coreai_meta"
BUFFER_PREFIX = "coreai_buf_"

_NAME_PLACEHOLDER = "@KERNEL_NAME@"
_HASH_DIGITS = 10


def metal_type(dtype: torch.dtype, *, kernel: str, what: str) -> str:
    """The Metal element type for ``dtype``; ``TypeError`` naming ``what`` if there is none."""
    try:
        return METAL_TYPES[dtype]
    except KeyError:
        supported = ", ".join(str(d).removeprefix("torch.") for d in METAL_TYPES)
        raise TypeError(
            f"kernel '{kernel}': {what} has dtype {dtype}, which Metal kernels cannot take. "
            f"Supported dtypes: {supported}. Convert it first (for example .to(torch.float32))."
        ) from None


@dataclass(frozen=True)
class TensorArg:
    """A tensor parameter of a specialization: its name, rank and dtype."""

    name: str
    rank: int
    dtype: torch.dtype


@dataclass(frozen=True)
class ScalarArg:
    """A scalar parameter (``int``, ``float`` or ``bool`` in ``torch_defn``)."""

    name: str
    type: type


@dataclass(frozen=True)
class Specialization:
    """What one call fixes: every input (in ``input_names`` order) and every result."""

    inputs: tuple[TensorArg | ScalarArg, ...]
    results: tuple[TensorArg, ...]


@dataclass(frozen=True)
class KernelDefinition:
    """Everything about a kernel that its Metal source depends on. Hashable."""

    name: str
    input_names: tuple[str, ...]
    result_names: tuple[str, ...]
    src: str
    helper_src: str
    metal_params: tuple[tuple[str, str, str], ...]  # (name, type, attribute)
    template_dtypes: tuple[tuple[str, str], ...]  # (input name, placeholder)

    @property
    def parameter_count(self) -> int:
        """Parameters of the Core AI signature: inputs, results, thread attributes."""
        return len(self.input_names) + len(self.result_names) + len(self.metal_params)


def _element_type(arg: TensorArg | ScalarArg, kernel: str, role: str) -> str:
    if isinstance(arg, ScalarArg):
        return SCALAR_METAL_TYPES[arg.type]
    return metal_type(arg.dtype, kernel=kernel, what=f"{role} '{arg.name}'")


def _substitute_templates(defn: KernelDefinition, spec: Specialization) -> tuple[str, str]:
    """Replace each ``template_dtypes`` placeholder in src and helper_src."""
    src, helper = defn.src, defn.helper_src
    by_name = {arg.name: arg for arg in spec.inputs}
    for input_name, placeholder in defn.template_dtypes:
        mtype = _element_type(by_name[input_name], defn.name, "input")
        src = src.replace(placeholder, mtype)
        helper = helper.replace(placeholder, mtype)
    return src, helper


def _attribute_params(defn: KernelDefinition) -> list[str]:
    return [f"{mtype} {name} [[{attr}]]" for name, mtype, attr in defn.metal_params]


def _finish(source_with_placeholder: str, defn: KernelDefinition) -> tuple[str, str]:
    """Name the entry point ``<name>_<hash>`` and substitute it into the source."""
    digest = hashlib.sha256(source_with_placeholder.encode()).hexdigest()[:_HASH_DIGITS]
    entry = f"{defn.name}_{digest}"
    return entry, source_with_placeholder.replace(_NAME_PLACEHOLDER, entry)


def scalar_literal(value: object, scalar_type: type, *, kernel: str, name: str) -> str:
    """The Metal literal for a scalar value baked into the Core AI rendering."""
    if scalar_type is bool:
        return "true" if value else "false"
    if scalar_type is int:
        ivalue = int(value)  # type: ignore[call-overload]
        if not INT32_MIN <= ivalue <= INT32_MAX:
            raise ValueError(
                f"kernel '{kernel}': int scalar '{name}' = {ivalue} does not fit Metal's 32-bit "
                f"int (range {INT32_MIN} .. {INT32_MAX})."
            )
        return str(ivalue)
    fvalue = float(value)  # type: ignore[arg-type]
    if not math.isfinite(fvalue):
        raise ValueError(
            f"kernel '{kernel}': float scalar '{name}' = {fvalue} is not finite; a converted "
            "model bakes scalars as literals, and Metal has no literal for it."
        )
    return f"{fvalue!r}f"


def render_coreai_source(
    defn: KernelDefinition,
    spec: Specialization,
    scalar_values: dict[str, object] | None = None,
) -> tuple[str, str]:
    """The ``coreai.metal4_kernel`` source of ``spec``: returns ``(entry name, source)``.

    ``scalar_values`` maps each scalar input to the value baked into the body.

    >>> import torch
    >>> defn = KernelDefinition("add", ("x", "y"), ("out",), "out[id] = x[id] + y[id];", "",
    ...                         (("id", "uint", "thread_position_in_grid"),), ())
    >>> x = TensorArg("x", 1, torch.float32)
    >>> spec = Specialization((x, TensorArg("y", 1, torch.float32)),
    ...                       (TensorArg("out", 1, torch.float32),))
    >>> entry, source = render_coreai_source(defn, spec)
    >>> entry.startswith("add_"), "tensor_handle> out [[buffer(2)]]" in source
    (True, True)
    """
    scalar_values = scalar_values or {}
    params: list[str] = []
    for role, args in (("input", spec.inputs), ("result", spec.results)):
        for arg in args:
            mtype = _element_type(arg, defn.name, role)
            index = len(params)
            if isinstance(arg, ScalarArg) or arg.rank == 0:
                params.append(f"constant {mtype}& {arg.name} [[buffer({index})]]")
            else:
                params.append(
                    f"tensor<device {mtype}, metal::dextents<int, {arg.rank}>, tensor_handle> "
                    f"{arg.name} [[buffer({index})]]"
                )
    params += _attribute_params(defn)

    src, helper = _substitute_templates(defn, spec)
    locals_ = [
        f"{SCALAR_METAL_TYPES[arg.type]} {arg.name} = "
        f"{scalar_literal(scalar_values[arg.name], arg.type, kernel=defn.name, name=arg.name)};"
        for arg in spec.inputs
        if isinstance(arg, ScalarArg)
    ]
    if locals_:
        # A nested block lets the literals shadow the parameters; the newline
        # before the closing brace survives a trailing // comment in src.
        src = "{\n" + "\n".join(locals_) + "\n" + src + "\n}"
    text = (
        "\n#include <metal_stdlib>\n"
        "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
        "using namespace metal;\n"
        "using namespace mpp::tensor_ops;\n"
        f"{helper}\n"
        f"[[kernel]] void {_NAME_PLACEHOLDER}({', '.join(params)}) {{ {src}\n}}"
    )
    return _finish(text, defn)


def meta_offsets(spec: Specialization) -> dict[str, int]:
    """Offset of each tensor's extents in the metadata buffer (strides follow them)."""
    offsets: dict[str, int] = {}
    cursor = 0
    for arg in (*spec.inputs, *spec.results):
        if isinstance(arg, TensorArg) and arg.rank > 0:
            offsets[arg.name] = cursor
            cursor += 2 * arg.rank
    return offsets


def render_buffer_source(defn: KernelDefinition, spec: Specialization) -> tuple[str, str]:
    """The source both eager backends compile for ``spec``: returns ``(entry, source)``.

    Scalars stay run-time parameters here, so one compiled kernel serves every value.
    """
    params: list[str] = []
    views: list[str] = []
    offsets = meta_offsets(spec)
    for role, args in (("input", spec.inputs), ("result", spec.results)):
        for arg in args:
            mtype = _element_type(arg, defn.name, role)
            index = len(params)
            if isinstance(arg, ScalarArg) or arg.rank == 0:
                params.append(f"constant {mtype}& {arg.name} [[buffer({index})]]")
                continue
            buf = f"{BUFFER_PREFIX}{arg.name}"
            params.append(f"device {mtype}* {buf} [[buffer({index})]]")
            rank, base = arg.rank, offsets[arg.name]
            extents = ", ".join(f"{META_NAME}[{base + d}]" for d in range(rank))
            strides = ", ".join(f"{META_NAME}[{base + rank + d}]" for d in range(rank))
            views.append(
                f"tensor<device {mtype}, dextents<int, {rank}>, tensor_inline> {arg.name}"
                f"({buf}, dextents<int, {rank}>({extents}), array<int, {rank}>{{{strides}}});"
            )
    params.append(f"constant int* {META_NAME} [[buffer({len(params)})]]")
    params += _attribute_params(defn)

    src, helper = _substitute_templates(defn, spec)
    text = (
        "#include <metal_stdlib>\n"
        "#include <metal_tensor>\n"
        "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
        "using namespace metal;\n"
        "using namespace mpp::tensor_ops;\n"
        '#line 1 "helper_src"\n'
        f"{helper}\n"
        '#line 1 "generated_signature"\n'
        f"[[kernel]] void {_NAME_PLACEHOLDER}({', '.join(params)}) {{\n"
        + "".join(v + "\n" for v in views)
        + "{\n"
        '#line 1 "src"\n'
        f"{src}\n"
        "}\n"
        "}\n"
    )
    return _finish(text, defn)


def meta_length(spec: Specialization) -> int:
    """Number of int32 entries of the metadata buffer (at least one)."""
    return max(
        1, sum(2 * a.rank for a in (*spec.inputs, *spec.results) if isinstance(a, TensorArg))
    )
