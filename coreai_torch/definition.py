"""Checks on a ``TorchMetalKernel`` definition, run once at construction.

Each function raises the documented exception type with a message that names
the kernel and the offending value, and returns what the kernel keeps.
"""

from __future__ import annotations

import inspect
import keyword
import re
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, get_args, get_origin

import torch

from .contract import (
    BUFFER_PREFIX,
    EXCLUSIVE_THREAD_ATTRIBUTES,
    META_NAME,
    METAL_TYPES,
    OP_NAMESPACE,
    THREAD_ATTRIBUTES,
)

SCALAR_TYPES = (int, float, bool)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Words a parameter of a Metal (C++-based) kernel cannot be called: C++'s
# keywords up to C++20 (the CPU and CUDA backends compile C++23), the
# preprocessor's `defined` (its generated `#undef <name>` is an error), and
# the names the signature is spelled with.
_RESERVED = frozenset(
    """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class co_await co_return co_yield compl concept const consteval
    constexpr constinit const_cast continue decltype default defined delete do double
    dynamic_cast else enum explicit export extern false float for friend goto if inline int long
    mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires return short signed sizeof static static_assert static_cast
    struct
    switch template this thread_local throw true try typedef typeid typename union unsigned
    using virtual void volatile wchar_t while xor xor_eq kernel vertex fragment device constant
    threadgroup thread threadgroup_imageblock ray_data object_data half bfloat uint ushort uchar
    ulong size_t ptrdiff_t metal tensor tensor_inline tensor_handle tensor_offset dextents
    extents array mpp tensor_ops
    """.split()  # noqa: SIM905
)

# Metal's scalar, vector, matrix and packed type names (uint3, half4x4,
# packed_float3, ...) and the fixed-width integer types of the dtype table:
# the generated signature and views spell types with these names.
_TYPE_NAME = re.compile(
    r"(packed_)?(bool|char|uchar|short|ushort|int|uint|long|ulong|half|bfloat|float|double)"
    r"([234](x[234])?)?\Z|u?int(8|16|32|64)_t\Z"
)
_TYPE_NAMES = frozenset(METAL_TYPES.values())

# The keywords of a kernel call and the op's own schema arguments: an input
# named like one of them cannot be passed (torch.compile passes by name).
_CALL_KEYWORDS = ("threads_per_grid", "threads_per_thread_group", "result_shapes")
_SCHEMA_RESULT_PREFIX = "result_shape_"


def _op_namespace_attributes() -> frozenset[str]:
    # torch.ops.<namespace>.<name> is an attribute lookup on a module object:
    # a kernel named like one of its own attributes could never be reached.
    namespace = torch._ops._OpNamespace(OP_NAMESPACE)
    return frozenset(dir(type(namespace))) | frozenset(vars(namespace))


def check_kernel_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"Kernel name must be a non-empty string, got {name!r}.")
    if not _IDENTIFIER.match(name):
        raise ValueError(
            f"Kernel name {name!r} is not a valid identifier: it names a torch op "
            f"({OP_NAMESPACE}::<name>) and a Metal function, so use letters, digits and "
            "underscores, not starting with a digit."
        )
    if keyword.iskeyword(name) or name.startswith("__") or name in _op_namespace_attributes():
        raise ValueError(
            f"Kernel name {name!r} cannot name a torch op: torch.ops.{OP_NAMESPACE}.{name} would "
            "be a Python keyword or an attribute every op namespace already has. Pick another "
            "name."
        )
    return name


def _check_identifier(kernel: str, label: str, value: object) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise ValueError(
            f"kernel '{kernel}': {label} {value!r} is not a valid Metal identifier "
            "(letters, digits and underscores, not starting with a digit)."
        )
    if value in _RESERVED or keyword.iskeyword(value):
        raise ValueError(
            f"kernel '{kernel}': {label} {value!r} is a reserved word in Metal or a name the "
            "generated kernel signature uses; rename it."
        )
    if value in _TYPE_NAMES or _TYPE_NAME.match(value):
        raise ValueError(
            f"kernel '{kernel}': {label} {value!r} is a Metal type name, which the generated "
            "kernel signature spells types with; rename it."
        )
    if "__" in value or re.match(r"_[A-Z]", value):
        raise ValueError(
            f"kernel '{kernel}': {label} {value!r} is reserved for the compiler (C++ reserves "
            "names with a double underscore or an underscore and a capital); rename it."
        )
    if value == META_NAME or value.lower().startswith("coreai"):
        raise ValueError(
            f"kernel '{kernel}': {label} {value!r} is reserved for the names coreai_torch "
            f"generates ({META_NAME!r}, {BUFFER_PREFIX!r}..., coreai::...); rename it."
        )
    return value


def _check_input_name(kernel: str, value: str) -> None:
    if value in _CALL_KEYWORDS or value.startswith(_SCHEMA_RESULT_PREFIX):
        raise ValueError(
            f"kernel '{kernel}': input name {value!r} collides with the kernel call's own "
            f"arguments ({', '.join(_CALL_KEYWORDS)}, {_SCHEMA_RESULT_PREFIX}<result>); "
            "rename it."
        )


def _as_name_list(kernel: str, label: str, names: object) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise TypeError(
            f"kernel '{kernel}': {label} must be a list of strings, got {type(names).__name__} "
            f"{names!r}."
        )
    return tuple(names)


def check_io_names(
    kernel: str, input_names: object, result_names: object
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    inputs = _as_name_list(kernel, "input_names", input_names)
    results = _as_name_list(kernel, "result_names", result_names)
    if not results:
        raise ValueError(f"kernel '{kernel}': result_names must contain at least one entry.")
    for label, names in (("input", inputs), ("result", results)):
        for n in names:
            _check_identifier(kernel, f"{label} name", n)
        duplicates = sorted(n for n, c in Counter(names).items() if c > 1)
        if duplicates:
            raise ValueError(f"kernel '{kernel}': duplicate {label} names {duplicates}.")
    for n in inputs:
        _check_input_name(kernel, n)
    overlap = sorted(set(inputs) & set(results))
    if overlap:
        raise ValueError(
            f"kernel '{kernel}': names {overlap} appear in both input_names and result_names."
        )
    return inputs, results


def check_metal_params(
    kernel: str, metal_params: object, taken: Sequence[str]
) -> tuple[tuple[str, str, str], ...]:
    if metal_params is None:
        return ()
    if isinstance(metal_params, str) or not isinstance(metal_params, Sequence):
        raise TypeError(
            f"kernel '{kernel}': metal_params must be a list of MetalParameter, got "
            f"{type(metal_params).__name__}."
        )
    params: list[tuple[str, str, str]] = []
    seen = set(taken)
    for p in metal_params:
        fields = tuple(getattr(p, f, None) for f in ("name", "dtype", "attr"))
        if not all(isinstance(f, str) for f in fields):
            raise TypeError(
                f"kernel '{kernel}': metal_params entries must be MetalParameter(name, dtype, "
                f"attr), got {p!r}."
            )
        name, dtype, attr = fields
        _check_identifier(kernel, "metal parameter name", name)
        if name in seen:
            raise ValueError(
                f"kernel '{kernel}': metal parameter name {name!r} is already used by an input, "
                "a result or another metal parameter."
            )
        seen.add(name)
        allowed = THREAD_ATTRIBUTES.get(attr)
        if allowed is None:
            known = ", ".join(sorted(THREAD_ATTRIBUTES))
            raise ValueError(
                f"kernel '{kernel}': metal parameter {name!r} has attribute {attr!r}, which is "
                f"not a compute-kernel thread attribute. Known attributes: {known}."
            )
        if dtype not in allowed:
            raise ValueError(
                f"kernel '{kernel}': metal parameter {name!r} [[{attr}]] has type {dtype!r}; "
                f"Metal allows {sorted(allowed)}."
            )
        params.append((name, dtype, attr))
    attrs = {attr for _, _, attr in params}
    for first, second in EXCLUSIVE_THREAD_ATTRIBUTES:
        if first in attrs and second in attrs:
            raise ValueError(
                f"kernel '{kernel}': metal_params declare both [[{first}]] and [[{second}]], "
                "which Metal does not allow in one kernel; keep one (they hold the same value)."
            )
    return tuple(params)


def check_template_dtypes(
    kernel: str, template_dtypes: object, input_names: Sequence[str]
) -> tuple[tuple[str, str], ...]:
    if template_dtypes is None:
        return ()
    if not isinstance(template_dtypes, dict):
        raise TypeError(
            f"kernel '{kernel}': template_dtypes must be a dict of input name -> placeholder, "
            f"got {type(template_dtypes).__name__}."
        )
    missing = sorted(str(k) for k in template_dtypes if k not in input_names)
    if missing:
        raise ValueError(
            f"kernel '{kernel}': template_dtypes keys {missing} are not input names "
            f"{list(input_names)}."
        )
    for key, placeholder in template_dtypes.items():
        if not isinstance(placeholder, str) or not placeholder:
            raise ValueError(
                f"kernel '{kernel}': template_dtypes[{key!r}] must be a non-empty placeholder "
                f"string, got {placeholder!r}."
            )
    repeated = sorted(p for p, c in Counter(template_dtypes.values()).items() if c > 1)
    if repeated:
        raise ValueError(
            f"kernel '{kernel}': template_dtypes placeholders {repeated} are used for more than "
            "one input; each placeholder must be unique."
        )
    # Replaced in input order, as Apple's package does (which matters when one
    # placeholder is part of another, or of a type name put in before it).
    return tuple(sorted(template_dtypes.items(), key=lambda item: input_names.index(item[0])))


# Comments and string or character literals: a placeholder there is replaced
# too, but changes no code.
_NOT_CODE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_IDENTIFIER_CHARACTER = re.compile(r"\w", re.A)


def warn_placeholders_in_identifiers(definition: Any) -> None:
    """Warns of each identifier that a ``template_dtypes`` placeholder is part of.

    Placeholders are replaced wherever their text occurs, as Apple documents
    and does: with placeholder ``T``, ``INFINITY`` becomes ``INFINIfloatY``.
    That is kept, so sources written for Apple's package render the same; the
    warning names each longer identifier, so an unintended one is found at
    construction instead of as a compile error.
    """
    for input_name, placeholder in definition.template_dtypes:
        for label, text in (("src", definition.src), ("helper_src", definition.helper_src)):
            found = _identifiers_containing(placeholder, _NOT_CODE.sub(_blank, text))
            if found:
                shown = ", ".join(f"'{word}' (line {line})" for word, line in found)
                warnings.warn(
                    f"kernel '{definition.name}': the template_dtypes placeholder "
                    f"'{placeholder}' of input '{input_name}' is part of the longer identifiers "
                    f"{shown} in {label}, where it is replaced too (as in Apple's package: "
                    f"'{found[0][0]}' becomes "
                    f"'{found[0][0].replace(placeholder, '<type>')}'). If that is not meant, "
                    "give the placeholder a name no identifier contains (such as "
                    f"'{placeholder}_{input_name.upper()}').",
                    stacklevel=3,
                )


def _blank(match: re.Match[str]) -> str:
    # Keeps the line breaks, so line numbers stay right.
    return re.sub(r"[^\n]", " ", match.group(0))


def _identifiers_containing(placeholder: str, code: str) -> list[tuple[str, int]]:
    """The identifiers of ``code`` that contain ``placeholder`` and are longer; with lines."""
    found: dict[str, int] = {}
    start = code.find(placeholder)
    while start >= 0:
        end = start + len(placeholder)
        begin, stop = start, end
        if _IDENTIFIER_CHARACTER.match(placeholder[0]):
            while begin > 0 and _IDENTIFIER_CHARACTER.match(code[begin - 1]):
                begin -= 1
        if _IDENTIFIER_CHARACTER.match(placeholder[-1]):
            while stop < len(code) and _IDENTIFIER_CHARACTER.match(code[stop]):
                stop += 1
        if (begin, stop) != (start, end):
            found.setdefault(code[begin:stop], code.count("\n", 0, start) + 1)
        start = code.find(placeholder, end)
    return list(found.items())


def check_source(kernel: str, label: str, value: object, *, optional: bool) -> str:
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"kernel '{kernel}': {label} must be a string, got {type(value).__name__}.")
    return value


def torch_defn_signature(
    kernel: str, torch_defn: Callable[..., Any], input_names: Sequence[str]
) -> tuple[dict[str, type], str]:
    """Checks ``torch_defn`` and returns (scalar input types, return kind).

    The return kind is ``"tensor"``, ``"tuple"`` or ``"list"``.
    """
    if not callable(torch_defn):
        raise TypeError(f"kernel '{kernel}': torch_defn must be callable, got {torch_defn!r}.")
    try:
        # eval_str resolves the string annotations of `from __future__ import annotations`.
        sig = inspect.signature(torch_defn, eval_str=True)
    except (NameError, SyntaxError) as exc:
        raise TypeError(
            f"kernel '{kernel}': the annotations of torch_defn cannot be resolved ({exc})."
        ) from exc
    params = list(sig.parameters.values())
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(
                f"kernel '{kernel}': torch_defn parameter '{p.name}' is {p.kind.description}; "
                "custom kernels take a fixed list of parameters, no *args / **kwargs."
            )
        if p.kind is p.KEYWORD_ONLY:
            raise TypeError(
                f"kernel '{kernel}': torch_defn parameter '{p.name}' is keyword-only; kernel "
                "inputs are passed positionally."
            )
        if p.annotation is not torch.Tensor and p.annotation not in SCALAR_TYPES:
            shown = (
                "has no annotation" if p.annotation is p.empty else f"is annotated {p.annotation!r}"
            )
            raise TypeError(
                f"kernel '{kernel}': torch_defn parameter '{p.name}' {shown}; "
                "custom kernels only support `torch.Tensor`, `int`, `float` and `bool` inputs."
            )
    if len(params) != len(input_names):
        raise ValueError(
            f"kernel '{kernel}': torch_defn has {len(params)} parameters but input_names has "
            f"{len(input_names)} entries {list(input_names)}; they must match one to one."
        )
    scalar_types = {
        name: p.annotation
        for name, p in zip(input_names, params)
        if p.annotation is not torch.Tensor
    }
    return scalar_types, _return_kind(kernel, sig.return_annotation)


def _return_kind(kernel: str, annotation: Any) -> str:
    if annotation is torch.Tensor:
        return "tensor"
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (tuple, list) and args and all(a is torch.Tensor for a in args):
        return origin.__name__
    raise TypeError(
        f"kernel '{kernel}': torch_defn returns {annotation!r}; metal kernels only support "
        "`torch.Tensor`, `list[torch.Tensor]` or `tuple[torch.Tensor, ...]` with a concrete "
        "number of members."
    )


def check_return_count(
    kernel: str, torch_defn: Callable[..., Any], result_names: Sequence[str], kind: str
) -> None:
    annotation = inspect.signature(torch_defn, eval_str=True).return_annotation
    if kind == "tensor" and len(result_names) != 1:
        raise ValueError(
            f"kernel '{kernel}': torch_defn returns a single torch.Tensor but result_names has "
            f"{len(result_names)} entries {list(result_names)}."
        )
    if kind == "tuple":
        count = len(get_args(annotation))
        if count != len(result_names):
            raise ValueError(
                f"kernel '{kernel}': torch_defn returns a tuple of {count} tensors but "
                f"result_names has {len(result_names)} entries {list(result_names)}."
            )
