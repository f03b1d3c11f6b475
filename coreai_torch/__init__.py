"""coreai_torch: custom Metal kernels as real PyTorch operators.

A kernel runs its Metal source eagerly (Apple GPUs through the MPS stream; any
CPU by compiling the same source as C++; NVIDIA GPUs by compiling it for the
GPU with the same headers), traces through ``torch.export``, and
converts with :class:`TorchConverter` into a Core AI program in which it is a
``coreai.metal4_kernel`` operation.

The public API is that of Apple's ``coreai-torch`` package::

    from coreai_torch import TorchMetalKernel, MetalParameter, TorchConverter
"""

from __future__ import annotations

import importlib
from typing import Any

from .__version__ import __version__
from .errors import MetalCompileError
from .kernel import TorchMetalKernel
from .modes import get_execution_mode, set_execution_mode
from .testing import Example, KernelReport, check_kernel

__all__ = [
    "Example",
    "ExternalizeSpec",
    "KernelReport",
    "MetalCompileError",
    "MetalParameter",
    "TorchConverter",
    "TorchMetalKernel",
    "__version__",
    "_patch_model_for_externalization",
    "_subexport_and_restore",
    "check_kernel",
    "generate_composite_decl",
    "get_decomp_table",
    "get_execution_mode",
    "set_execution_mode",
]


def __getattr__(name: str) -> Any:
    # coreai-core's authoring package takes a noticeable time to import; load it
    # (and the converter, which needs it) only when asked for.
    if name == "MetalParameter":
        try:
            from coreai.authoring import MetalParameter
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] != "coreai":
                raise
            # Eager kernels need nothing from Core AI (metal_parameter.py says why).
            from .metal_parameter import MetalParameter

        return MetalParameter
    if name in ("TorchConverter", "get_decomp_table"):
        from . import converter

        return getattr(converter, name)
    if name in ("ExternalizeSpec", "_patch_model_for_externalization", "_subexport_and_restore"):
        from . import externalize

        return getattr(externalize, name)
    if name == "generate_composite_decl":
        from ._composite_declaration import generate_composite_decl

        return generate_composite_decl
    if name == "composite_ops":
        # import_module, not `from . import`: that would ask this function again.
        return importlib.import_module(f"{__name__}.composite_ops")
    raise AttributeError(f"module 'coreai_torch' has no attribute {name!r}")
