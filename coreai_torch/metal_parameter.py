"""``MetalParameter`` for machines without ``coreai-core``.

``coreai_torch.MetalParameter`` is Core AI's own class (``coreai.authoring``)
whenever ``coreai-core`` is installed, so kernels written for Apple's package
get exactly its type. Running kernels eagerly needs nothing from Core AI,
though, and a GPU server that trains with Metal kernels may lack that package;
there ``coreai_torch.MetalParameter`` is this record with the same fields.
Converting a model still needs ``coreai-core``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class MetalParameter:
    """A thread attribute a kernel declares.

    ``MetalParameter("id", "uint", "thread_position_in_grid")`` declares
    ``uint id [[thread_position_in_grid]]``.

    name: the parameter's name in the kernel body.
    dtype: its Metal type (``uint``, ``uint2``, ``ushort3`` ...).
    attr: the compute-kernel attribute it receives (``thread_position_in_grid`` ...).
    """

    name: str
    dtype: str
    attr: str
