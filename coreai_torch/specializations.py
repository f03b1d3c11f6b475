"""A kernel's eager specializations: registered with C++ on first use, kept in C++.

The table itself is C++'s (``csrc/specialization_table.cpp``): it matches a
call to a registered specialization and launches it, and it gives its handles
back (``coreai_torch::release_kernel``) when the kernel object is collected, so
what the backends compiled for them is unloaded. This module does what C++
cannot: learn a new specialization's result dtypes from ``torch_defn``, render
its source and register it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from . import _C, call_checks
from .contract import RETURN_KINDS, metal_type

if TYPE_CHECKING:
    from .kernel import TorchMetalKernel


class Specializations:
    """The C++ table of one kernel's registered specializations."""

    def __init__(self, arg_kinds: str, n_results: int, return_kind: str) -> None:
        self.table = _C._specializations_new(arg_kinds, n_results, RETURN_KINDS.index(return_kind))

    def handle(
        self,
        kernel: TorchMetalKernel,
        inputs: Sequence[Any],
        shapes: Sequence[Sequence[int]],
        options: int,
    ) -> int:
        """The handle of the specialization of this call; registers it on first use."""
        ranks = [len(s) for s in shapes]
        found = _C._specializations_handle(self.table, options, tuple(inputs), ranks)
        if found is not None:
            return found
        dtypes = result_dtypes(kernel, inputs, shapes)
        spec = kernel.specialization(inputs, ranks, dtypes)
        handle = torch.ops.coreai_torch.register_kernel.default(
            *kernel.registration(spec, options=options)
        )
        _C._specializations_add(self.table, handle, options)
        return handle


# Inputs on a GPU with at most this many elements in all have their result
# dtypes learnt from ``torch_defn`` on CPU stand-ins (``result_dtypes``).
CPU_STAND_IN_ELEMENTS = 1 << 16


def result_dtypes(
    kernel: TorchMetalKernel, inputs: Sequence[Any], shapes: Sequence[Sequence[int]]
) -> list[torch.dtype]:
    """Result dtypes of a new specialization, from ``torch_defn`` run once.

    The reference runs on the real inputs, except that small inputs on a GPU
    are first given to it as CPU zeros of the same shapes and dtypes: torch loads
    a GPU kernel on its first use in a process (about 16 ms for ``torch.add`` on
    an H200), which would be most of a warm start, and result dtypes and shapes
    do not depend on the device. Meta tensors are no way round it: the first
    meta computation in a process imports torch's compiler stack (over a
    second). A reference that cannot run on the stand-ins (one that mixes in a
    tensor of its own on the GPU, say) runs on the real inputs, and one that
    cannot run on those (an op torch lacks for the device or dtype) on meta
    copies. It also checks ``result_shapes`` against the reference on the first
    call.
    """
    with torch.no_grad():
        outs = _on_cpu_stand_ins(kernel, inputs, shapes)
        if outs is None:
            try:
                outs = kernel.torch_defn(*inputs)
            except Exception as real_failure:
                try:
                    outs = kernel.torch_defn(*_stand_ins(inputs, "meta"))
                except Exception:
                    raise real_failure from None
    outs = kernel.as_result_list(outs)
    call_checks.shapes_agree(kernel.name, kernel.result_names, outs, shapes)
    for rname, out in zip(kernel.result_names, outs):
        metal_type(out.dtype, kernel=kernel.name, what=f"result '{rname}'")
    return [o.dtype for o in outs]


def _stand_ins(inputs: Sequence[Any], device: str) -> list[Any]:
    """Zeros (meta: empty tensors) like each tensor input on `device`; scalars as given."""
    make = torch.empty if device == "meta" else torch.zeros
    return [
        make(v.shape, dtype=v.dtype, device=device) if isinstance(v, torch.Tensor) else v
        for v in inputs
    ]


def _on_cpu_stand_ins(
    kernel: TorchMetalKernel, inputs: Sequence[Any], shapes: Sequence[Sequence[int]]
) -> Any:
    """``torch_defn`` on CPU zeros for small GPU inputs, if it runs there and its
    result shapes are ``shapes`` (a reference whose shapes depend on the values
    is left to the real inputs); None otherwise."""
    tensors = [v for v in inputs if isinstance(v, torch.Tensor)]
    if not tensors or all(v.device.type == "cpu" for v in tensors):
        return None
    if sum(v.numel() for v in tensors) > CPU_STAND_IN_ELEMENTS:
        return None
    try:
        outs = kernel.torch_defn(*_stand_ins(inputs, "cpu"))
        listed = kernel.as_result_list(outs)
    except Exception:
        return None
    if len(listed) != len(shapes) or any(list(o.shape) != list(s) for o, s in zip(listed, shapes)):
        return None
    return outs
