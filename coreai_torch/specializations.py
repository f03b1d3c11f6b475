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


def result_dtypes(
    kernel: TorchMetalKernel, inputs: Sequence[Any], shapes: Sequence[Sequence[int]]
) -> list[torch.dtype]:
    """Result dtypes of a new specialization, from ``torch_defn`` run once.

    The reference runs on the real inputs first: the first meta computation in a
    process imports torch's compiler stack (over a second), which would dominate
    a warm start, while one reference call per specialization is cheap next to
    compiling the kernel. A reference that cannot run on these inputs (an op
    torch lacks for the device or dtype) runs on meta copies. It also checks
    ``result_shapes`` against the reference on the first call.
    """
    with torch.no_grad():
        try:
            outs = kernel.torch_defn(*inputs)
        except Exception as real_failure:
            meta = [
                torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
                if isinstance(v, torch.Tensor)
                else v
                for v in inputs
            ]
            try:
                outs = kernel.torch_defn(*meta)
            except Exception:
                raise real_failure from None
    outs = kernel.as_result_list(outs)
    call_checks.shapes_agree(kernel.name, kernel.result_names, outs, shapes)
    for rname, out in zip(kernel.result_names, outs):
        metal_type(out.dtype, kernel=kernel.name, what=f"result '{rname}'")
    return [o.dtype for o in outs]
