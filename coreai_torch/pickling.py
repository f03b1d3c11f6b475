"""Pickling a ``TorchMetalKernel`` by its definition.

A kernel object stands for its op, as a function does, but unlike a function it
is often held by a model (``self.norm = rms_norm``) that ``torch.save`` pickles,
or passed to ``torch.multiprocessing.spawn``. It pickles as the arguments of
its constructor. Unpickled in a process whose kernel of that name has the same
definition and ``torch_defn``, it is that kernel (so a model saved and loaded
in one process shares its kernels, as ``copy.deepcopy`` does); otherwise the
kernel is constructed, which defines its op in that process. What is set
after construction (``execution_mode``, ``debug``, ``fast_math``, a backward
from ``register_autograd``) is not carried: the module that defines the kernel
sets it, when the unpickling process imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def kernel_definition(kernel: Any) -> tuple[Any, tuple[Any, ...]]:
    """``kernel.__reduce__()``: :func:`kernel_from_definition` and its arguments."""
    d = kernel.definition
    return (
        kernel_from_definition,
        (
            d.name,
            list(d.input_names),
            list(d.result_names),
            d.src,
            kernel.torch_defn,
            [tuple(p) for p in d.metal_params],
            d.helper_src,
            dict(d.template_dtypes),
        ),
    )


def kernel_from_definition(
    name: str,
    input_names: list[str],
    result_names: list[str],
    src: str,
    torch_defn: Callable[..., Any],
    metal_params: list[tuple[str, str, str]],
    helper_src: str,
    template_dtypes: dict[str, str],
) -> Any:
    """The kernel of this definition: the process's own if it has it, else a new one."""
    from . import MetalParameter
    from .kernel import TorchMetalKernel
    from .kernel_op import ACTIVE

    active = ACTIVE.get(name)
    if active is not None and active.torch_defn is torch_defn:
        d = active.definition
        same = (
            list(d.input_names) == input_names
            and list(d.result_names) == result_names
            and d.src == src
            and d.helper_src == helper_src
            and [tuple(p) for p in d.metal_params] == metal_params
            and dict(d.template_dtypes) == template_dtypes
        )
        if same:
            return active
    return TorchMetalKernel(
        name,
        input_names,
        result_names,
        src,
        torch_defn,
        metal_params=[MetalParameter(*p) for p in metal_params],
        helper_src=helper_src or None,
        template_dtypes=template_dtypes or None,
    )
