"""What C++ asks Python about a kernel's new specialization, once.

A kernel's specializations are C++'s (``csrc/python/kernel_table.h``): its
table matches a call to a registered specialization, or registers the new one
in one step that calls :func:`describe` here for what only Python knows:
``torch_defn``'s result dtypes, and the contract's rendering. The result
shapes a call gives are checked against ``torch_defn``'s here too, which is
the one check that needs the reference (and, while tracing, symbolic shapes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .contract import Registration, metal_type


def describe(
    kernel: Any, inputs: Sequence[Any], shapes: Sequence[Sequence[int]], options: int
) -> Registration:
    """The registration of the specialization of ``kernel`` (a TorchMetalKernel) these
    inputs and result shapes select, with the option bits ``options``."""
    dtypes = result_dtypes(kernel, inputs, shapes)
    spec = kernel.specialization(inputs, [len(s) for s in shapes], dtypes)
    return kernel.registration(spec, options=options)


def shapes_agree(
    kernel: str, names: Sequence[str], outs: Sequence[torch.Tensor], shapes: Sequence[Sequence]
) -> None:
    """``result_shapes`` against the shapes ``torch_defn`` returns (symbolic sizes match any)."""
    for rname, out, shape in zip(names, outs, shapes):
        ref = list(out.shape)
        if len(ref) != len(shape) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(ref, shape)
        ):
            raise ValueError(
                f"kernel '{kernel}': result_shapes gives {list(shape)} for result '{rname}', "
                f"but torch_defn returns shape {ref}."
            )


# Inputs on a GPU with at most this many elements in all have their result
# dtypes learnt from ``torch_defn`` on CPU stand-ins (``result_dtypes``).
CPU_STAND_IN_ELEMENTS = 1 << 16


def result_dtypes(
    kernel: Any, inputs: Sequence[Any], shapes: Sequence[Sequence[int]]
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
    shapes_agree(kernel.name, kernel.result_names, outs, shapes)
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


def _on_cpu_stand_ins(kernel: Any, inputs: Sequence[Any], shapes: Sequence[Sequence[int]]) -> Any:
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
