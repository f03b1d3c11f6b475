"""The kernel contract: specializations and the two Metal renderings of one.

Every piece of code that turns a kernel definition plus the ranks and dtypes of
one call into Metal source lives here; the eager backends and the converter only
ask this module. ``docs/internals.md`` shows both renderings on an example.

- The *Core AI rendering* is what a ``coreai.metal4_kernel`` operation carries:
  tensors are ``tensor_handle`` parameters and scalar values are baked into the
  body as shadowing literals (the Core AI runtime cannot read scalar buffers).
- The *buffer rendering* is what the eager backends compile (Metal on the GPU,
  C++ on the CPU): tensors arrive as ``device T*`` plus one metadata buffer of
  extents and strides, and views with the user's names are declared in front
  of the body, which is pasted verbatim.

The contract's facts (dtype table, limits, option bits, metadata layout, ...)
are defined once, in C++ (``csrc/contract.h``); the names below read them from
``coreai_torch._C.contract``.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from . import _C

_FACTS = _C.contract

OP_NAMESPACE: str = _FACTS.OP_NAMESPACE
COMPILE_ERROR_MARKER: str = _FACTS.COMPILE_ERROR_MARKER
MAX_THREADS_PER_THREADGROUP: int = _FACTS.MAX_THREADS_PER_THREADGROUP
MAX_RANK: int = _FACTS.MAX_RANK
PARAMETER_LIMIT: int = _FACTS.MAX_PARAMETERS
OPTION_DEBUG: int = _FACTS.OPTION_DEBUG
OPTION_FAST_MATH: int = _FACTS.OPTION_FAST_MATH
RETURN_KINDS: tuple[str, ...] = _FACTS.RETURN_KINDS  # index = the code C++ uses
THREAD_ATTRIBUTES: dict[str, tuple[str, ...]] = dict(_FACTS.THREAD_ATTRIBUTES)
EXCLUSIVE_THREAD_ATTRIBUTES: tuple[tuple[str, str], ...] = _FACTS.EXCLUSIVE_THREAD_ATTRIBUTES
INT32_MIN: int = _FACTS.SCALAR_INT_MIN
INT32_MAX: int = _FACTS.SCALAR_INT_MAX
FLOAT32_MAX: float = _FACTS.SCALAR_FLOAT_MAX

# torch dtype -> Metal element type (DESIGN.md, "Element types").
METAL_TYPES: dict[torch.dtype, str] = dict(_FACTS.METAL_TYPES)
# Dtypes MTLTensorDataType lacks: the buffer rendering views them through the
# project's strided view (csrc/msl/coreai_msl/strided_view.h).
STRIDED_VIEW_DTYPES: frozenset[torch.dtype] = _FACTS.STRIDED_VIEW_DTYPES
# What a dtype becomes in a converted program (and in the Core AI rendering).
COREAI_NARROWING: dict[torch.dtype, torch.dtype] = dict(_FACTS.COREAI_NARROWING)

# Python scalar type of a torch_defn parameter -> its argument kind. The Metal
# type of the parameter is spelled like the Python type (int, float, bool).
TENSOR_KIND: str = _FACTS.TENSOR_KIND
SCALAR_KINDS: dict[type, str] = {getattr(builtins, t): k for t, k in _FACTS.SCALAR_KINDS.items()}
SCALAR_METAL_TYPES: dict[type, str] = {t: t.__name__ for t in SCALAR_KINDS}

# Names the renderings add to the kernel's scope.
META_NAME = "coreai_meta"
BUFFER_PREFIX = "coreai_buf_"
VIEW_HEADER = "coreai_msl/strided_view.h"

# A source that names any of these uses MetalPerformancePrimitives (the
# renderings say `using namespace mpp::tensor_ops;`, so its names may appear
# unqualified); only then does the buffer rendering include its header.
_MPP_USE = re.compile(
    r"\b(mpp|MetalPerformancePrimitives|matmul2d\w*|convolution2d\w*|execution_simdgroups?"
    r"|execution_threads?|reduce_rows|reduce_columns|reduction_operation)\b"
)

_NAME_PLACEHOLDER = "@KERNEL_NAME@"
_HASH_DIGITS = 10


def metal_type(dtype: torch.dtype, *, kernel: str, what: str) -> str:
    """The Metal element type for ``dtype``; ``TypeError`` naming ``what`` if there is none."""
    try:
        return METAL_TYPES[dtype]
    except KeyError:
        _FACTS.refuse_dtype(kernel, what, dtype)  # the message every route gives
        raise AssertionError("unreachable") from None


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

    @property
    def user_names(self) -> tuple[str, ...]:
        """Every name the kernel's own code sees as a parameter."""
        return (*self.input_names, *self.result_names, *(n for n, _, _ in self.metal_params))


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


def _user_text(text: str) -> str:
    # The user's text ends with a blank line: a trailing `\` then continues
    # into that line instead of swallowing the generated line after it.
    return f"{text}\n\n"


def _undefine_user_names(defn: KernelDefinition) -> str:
    # A parameter named like a macro of Metal's headers or of the C++ the CPU
    # backend compiles (NAN, assert, ...) would be expanded; from here on the
    # name means the parameter.
    return "".join(f"#undef {name}\n" for name in defn.user_names)


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
    if not fits_float32(fvalue):
        raise ValueError(
            f"kernel '{kernel}': float scalar '{name}' = {fvalue} is not finite as Metal's "
            "32-bit float; a converted model bakes scalars as literals, and Metal has no "
            "literal for it."
        )
    return f"{fvalue!r}f"


def fits_float32(value: float) -> bool:
    """Whether ``value`` is finite as Metal's 32-bit ``float`` (false for inf, nan, 1e39).

    >>> fits_float32(3.0e38), fits_float32(1e39), fits_float32(float("nan"))
    (True, False, False)
    """
    return abs(value) <= FLOAT32_MAX


def render_coreai_source(
    defn: KernelDefinition,
    spec: Specialization,
    scalar_values: dict[str, object] | None = None,
) -> tuple[str, str]:
    """The ``coreai.metal4_kernel`` source of ``spec``: returns ``(entry name, source)``.

    ``scalar_values`` maps each scalar input to the value baked into the body.
    A 0-d tensor input is a one-element rank-1 tensor parameter (the converter
    reshapes its operand) read into a local of the input's name, so the body
    sees a value, as it does eagerly; a rank-0 result is a rank-0 tensor.

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
    locals_: list[str] = []
    for role, args in (("input", spec.inputs), ("result", spec.results)):
        for arg in args:
            mtype = _element_type(arg, defn.name, role)
            index = len(params)
            if isinstance(arg, ScalarArg):
                params.append(f"constant {mtype}& {arg.name} [[buffer({index})]]")
                literal = scalar_literal(
                    scalar_values[arg.name], arg.type, kernel=defn.name, name=arg.name
                )
                locals_.append(f"{mtype} {arg.name} = {literal};")
            elif arg.rank == 0 and role == "input":
                buf = f"{BUFFER_PREFIX}{arg.name}"
                params.append(
                    f"tensor<device {mtype}, metal::dextents<int, 1>, tensor_handle> {buf} "
                    f"[[buffer({index})]]"
                )
                locals_.append(f"const {mtype} {arg.name} = {buf}[0];")
            else:
                params.append(
                    f"tensor<device {mtype}, metal::dextents<int, {arg.rank}>, tensor_handle> "
                    f"{arg.name} [[buffer({index})]]"
                )
    params += _attribute_params(defn)

    src, helper = _substitute_templates(defn, spec)
    body = _user_text(src)
    if locals_:
        # A nested block lets the locals shadow the parameters.
        body = "{\n" + "\n".join(locals_) + "\n" + body + "}"
    text = (
        "\n#include <metal_stdlib>\n"
        "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
        "using namespace metal;\n"
        "using namespace mpp::tensor_ops;\n"
        f"{_user_text(helper)}"
        f"{_undefine_user_names(defn)}"
        f"[[kernel]] void {_NAME_PLACEHOLDER}({', '.join(params)}) {{ {body}\n}}"
    )
    return _finish(text, defn)


def meta_offsets(spec: Specialization) -> dict[str, int]:
    """Offset of each rank >= 1 tensor's extents in the metadata buffer (strides follow)."""
    tensors = [a for a in (*spec.inputs, *spec.results) if isinstance(a, TensorArg)]
    offsets, _ = _FACTS.meta_layout([a.rank for a in tensors])
    return {a.name: o for a, o in zip(tensors, offsets) if o >= 0}


def meta_length(spec: Specialization) -> int:
    """Number of int32 entries of the metadata buffer (at least one)."""
    ranks = [a.rank for a in (*spec.inputs, *spec.results) if isinstance(a, TensorArg)]
    return _FACTS.meta_layout(ranks)[1]


@functools.cache
def strided_view_header() -> str:
    """The text of the project's strided view (``csrc/msl/coreai_msl/strided_view.h``).

    The buffer rendering pastes it for the GPU, whose compiler sees only the
    source; the CPU backend's prelude has already included it, and its include
    guard makes the pasted copy expand to nothing there.
    """
    return (Path(_C._msl_directory()) / VIEW_HEADER).read_text()


def _uses_strided_view(arg: TensorArg) -> bool:
    return arg.rank == 0 or arg.dtype in STRIDED_VIEW_DTYPES


def render_buffer_source(defn: KernelDefinition, spec: Specialization) -> tuple[str, str]:
    """The source both eager backends compile for ``spec``: returns ``(entry, source)``.

    Scalars stay run-time parameters here, so one compiled kernel serves every value.
    The body sits at function scope beside the views, as it does beside the
    parameters in Apple's rendering: its ``threadgroup`` arrays are then
    declared where Metal certainly takes them, and a local that redeclares a
    tensor's name is the same error on every backend.
    """
    params: list[str] = []
    views: list[str] = []
    offsets = meta_offsets(spec)
    strided = False
    for role, args in (("input", spec.inputs), ("result", spec.results)):
        for arg in args:
            mtype = _element_type(arg, defn.name, role)
            index = len(params)
            if isinstance(arg, ScalarArg) or (arg.rank == 0 and role == "input"):
                params.append(f"constant {mtype}& {arg.name} [[buffer({index})]]")
                continue
            buf = f"{BUFFER_PREFIX}{arg.name}"
            params.append(f"device {mtype}* {buf} [[buffer({index})]]")
            rank = arg.rank
            if _uses_strided_view(arg):
                strided = True
                meta = f", {META_NAME} + {offsets[arg.name]}" if rank else ""
                views.append(f"coreai::strided_view<{mtype}, {rank}> {arg.name}({buf}{meta});")
                continue
            base = offsets[arg.name]
            extents = ", ".join(f"{META_NAME}[{base + d}]" for d in range(rank))
            strides = ", ".join(f"{META_NAME}[{base + rank + d}]" for d in range(rank))
            tensor = f"metal::tensor<device {mtype}, metal::dextents<int, {rank}>"
            views.append(
                f"{tensor}, metal::tensor_inline> "
                f"{arg.name}({buf}, metal::dextents<int, {rank}>({extents}), "
                f"metal::array<int, {rank}>{{{strides}}});"
            )
    params.append(f"constant int* {META_NAME} [[buffer({len(params)})]]")
    params += _attribute_params(defn)

    src, helper = _substitute_templates(defn, spec)
    mpp = _MPP_USE.search(src) or _MPP_USE.search(helper)
    text = (
        "#include <metal_stdlib>\n"
        "#include <metal_tensor>\n"
        + ("#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n" if mpp else "")
        + "using namespace metal;\n"
        + ("using namespace mpp::tensor_ops;\n" if mpp else "")
        + (strided_view_header() if strided else "")
        + '#line 1 "helper_src"\n'
        f"{_user_text(helper)}"
        f"{_undefine_user_names(defn)}"
        '#line 1 "generated_signature"\n'
        f"[[kernel]] void {_NAME_PLACEHOLDER}({', '.join(params)}) {{\n"
        + "".join(v + "\n" for v in views)
        + '#line 1 "src"\n'
        f"{_user_text(src)}"
        "}\n"
    )
    return _finish(text, defn)


class Registration(NamedTuple):
    """Everything ``torch.ops.coreai_torch.register_kernel`` takes, by name and in its order.

    It unpacks into the op's arguments (``register_kernel(*registration)``);
    the table of a kernel reads it by field name (docs/internals.md §2).
    """

    name: str
    source: str  # the buffer rendering
    entry: str
    input_names: list[str]
    arg_kinds: str
    input_dtypes: list[torch.dtype]  # of the tensor inputs, in order
    input_ranks: list[int]
    result_names: list[str]
    result_dtypes: list[torch.dtype]
    result_ranks: list[int]
    thread_attrs: list[str]
    options: int


def registration(defn: KernelDefinition, spec: Specialization, options: int) -> Registration:
    """The registration of ``spec`` of the kernel ``defn`` with the option bits ``options``."""
    entry, source = render_buffer_source(defn, spec)
    tensors = [a for a in spec.inputs if isinstance(a, TensorArg)]
    kinds = "".join(
        TENSOR_KIND if isinstance(a, TensorArg) else SCALAR_KINDS[a.type] for a in spec.inputs
    )
    return Registration(
        name=defn.name,
        source=source,
        entry=entry,
        input_names=[a.name for a in spec.inputs],
        arg_kinds=kinds,
        input_dtypes=[a.dtype for a in tensors],
        input_ranks=[a.rank for a in tensors],
        result_names=[r.name for r in spec.results],
        result_dtypes=[r.dtype for r in spec.results],
        result_ranks=[r.rank for r in spec.results],
        thread_attrs=[attr for _, _, attr in defn.metal_params],
        options=options,
    )
    return (
        defn.name,
        source,
        entry,
        [a.name for a in spec.inputs],
        kinds,
        [a.dtype for a in tensors],
        [a.rank for a in tensors],
        [r.name for r in spec.results],
        [r.dtype for r in spec.results],
        [r.rank for r in spec.results],
        [attr for _, _, attr in defn.metal_params],
        options,
    )
