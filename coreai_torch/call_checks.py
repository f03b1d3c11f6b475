"""Checks on the arguments of one kernel call, for calls the C++ fast path declines.

Each function raises the documented exception type with a message that names
the kernel and the offending argument, and returns what the op is called with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .contract import (
    FLOAT32_MAX,
    INT32_MAX,
    INT32_MIN,
    MAX_RANK,
    MAX_THREADS_PER_THREADGROUP,
    fits_float32,
    metal_type,
)

_GRID_MAX = 2**32 - 1  # Metal counts threads per grid dimension in 32 bits


def dispatch_triple(kernel: str, label: str, value: Any, *, minimum: int) -> list[Any]:
    """``threads_per_grid`` (minimum 0) or ``threads_per_thread_group`` (minimum 1) as a list."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"kernel '{kernel}': {label} must be a 3-tuple of ints, got {value!r}.")
    if len(value) != 3:
        raise ValueError(
            f"kernel '{kernel}': {label} must be a 3-tuple, got {len(value)} elements: {value!r}."
        )
    dims = list(value)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, torch.SymInt)):
            raise ValueError(f"kernel '{kernel}': {label} must hold ints, got {value!r}.")
        if isinstance(d, int) and not minimum <= d <= _GRID_MAX:
            raise ValueError(
                f"kernel '{kernel}': {label} entries must be in [{minimum}, 2^32 - 1] (Metal "
                f"counts threads in 32 bits), got {tuple(value)}."
            )
    if minimum == 1 and all(isinstance(d, int) for d in dims):
        threads = math.prod(dims)
        if threads > MAX_THREADS_PER_THREADGROUP:
            raise ValueError(
                f"kernel '{kernel}': {label} {tuple(value)} has {threads} threads; a "
                f"threadgroup holds at most {MAX_THREADS_PER_THREADGROUP}."
            )
    return dims


def result_shapes(kernel: str, names: Sequence[str], value: Any) -> list[list[Any]]:
    """One list of non-negative sizes per result (``[]`` is a rank-0 result)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(
            f"kernel '{kernel}': result_shapes must be a list with one shape per result "
            f"{list(names)}, got {value!r}."
        )
    if len(value) != len(names):
        raise ValueError(
            f"kernel '{kernel}': result_shapes must contain one shape per result name; "
            f"expected {len(names)} (for {list(names)}), got {len(value)}."
        )
    shapes = []
    for rname, shape in zip(names, value):
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
            raise ValueError(
                f"kernel '{kernel}': result_shapes entry for '{rname}' must be a list of "
                f"ints, got {shape!r}."
            )
        dims = list(shape)
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, (int, torch.SymInt)):
                raise ValueError(
                    f"kernel '{kernel}': result_shapes entry for '{rname}' must hold "
                    f"ints, got {shape!r}."
                )
            if isinstance(d, int) and d < 0:
                raise ValueError(
                    f"kernel '{kernel}': result '{rname}' has a negative dimension in shape {dims}."
                )
        if len(dims) > MAX_RANK:
            raise ValueError(
                f"kernel '{kernel}': result '{rname}' has rank {len(dims)} (shape {dims}); "
                f"Metal tensors have rank {MAX_RANK} at most."
            )
        shapes.append(dims)
    return shapes


def inputs(
    kernel: str, names: Sequence[str], scalar_types: dict[str, type], args: tuple[Any, ...]
) -> None:
    """Each input against ``torch_defn``'s annotation; tensors on one device, of Metal dtypes."""
    if len(args) != len(names):
        raise TypeError(
            f"kernel '{kernel}' takes {len(names)} inputs {list(names)}, got {len(args)}."
        )
    device = None
    for name, value in zip(names, args):
        if name in scalar_types:
            scalar(kernel, name, scalar_types[name], value)
            continue
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"kernel '{kernel}': input '{name}' is declared torch.Tensor in "
                f"torch_defn, got {type(value).__name__} {value!r}."
            )
        _strided(kernel, name, value)
        if device is None:
            device, first = value.device, name
        elif value.device != device:
            raise ValueError(
                f"kernel '{kernel}': all tensors must be on one device; input '{first}' "
                f"is on {device} but '{name}' is on {value.device}."
            )
        metal_type(value.dtype, kernel=kernel, what=f"input '{name}'")
        if value.dim() > MAX_RANK:
            raise ValueError(
                f"kernel '{kernel}': input '{name}' has rank {value.dim()}; Metal tensors have "
                f"rank {MAX_RANK} at most. Reshape it first."
            )


def _strided(kernel: str, name: str, value: torch.Tensor) -> None:
    """A kernel reads a tensor's elements through its sizes and strides: refuse the rest."""
    if value.is_nested:
        raise TypeError(
            f"kernel '{kernel}': input '{name}' is a nested tensor, which has no one shape a "
            "kernel can index; call the kernel on each component (tensor.unbind()) or on a "
            "padded tensor (torch.nested.to_padded_tensor)."
        )
    if value.layout != torch.strided:
        raise TypeError(
            f"kernel '{kernel}': input '{name}' has layout {value.layout}, but kernels read "
            "dense strided tensors; pass tensor.to_dense()."
        )


def scalar(kernel: str, name: str, expected: type, value: Any) -> None:
    """A scalar input: the annotated Python type, within what Metal's type holds."""
    if isinstance(value, torch.Tensor):
        raise TypeError(
            f"kernel '{kernel}': input '{name}' is declared {expected.__name__} in torch_defn, "
            f"got a tensor; pass a Python {expected.__name__}."
        )
    symbolic = {int: torch.SymInt, float: torch.SymFloat, bool: torch.SymBool}[expected]
    if isinstance(value, symbolic):
        return
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise TypeError(
            f"kernel '{kernel}': input '{name}' is declared {expected.__name__} in torch_defn, "
            f"got {type(value).__name__} {value!r}."
        )
    if expected is int and not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(
            f"kernel '{kernel}': int input '{name}' = {value} does not fit Metal's 32-bit int "
            f"({INT32_MIN} .. {INT32_MAX})."
        )
    if expected is float and not fits_float32(value):
        infinite = isinstance(value, float) and not math.isfinite(value)
        what = "is not finite" if infinite else "does not fit Metal's 32-bit float"
        raise ValueError(
            f"kernel '{kernel}': float input '{name}' = {value} {what} (|value| <= "
            f"{FLOAT32_MAX}); converted models bake scalars as literals, which cannot be inf "
            "or nan."
        )


def shapes_agree(
    kernel: str, names: Sequence[str], outs: Sequence[torch.Tensor], shapes: Sequence[Sequence]
) -> None:
    """``result_shapes`` against the shapes ``torch_defn`` returns."""
    for rname, out, shape in zip(names, outs, shapes):
        ref = list(out.shape)
        if len(ref) != len(shape) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(ref, shape)
        ):
            raise ValueError(
                f"kernel '{kernel}': result_shapes gives {list(shape)} for result '{rname}', "
                f"but torch_defn returns shape {ref}."
            )
