"""Registering and launching kernel specializations through torch.ops.coreai_torch directly.

The tests of the C++ op and the CPU backend describe a specialization here
(names, dtypes, ranks, a body) and skip the TorchMetalKernel front end; the
source is the contract module's buffer rendering, as the front end's is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from coreai_torch import contract
from coreai_torch.contract import (
    METAL_TYPES,
    OPTION_DEBUG,
    SCALAR_KINDS,
    KernelDefinition,
    ScalarArg,
    Specialization,
    TensorArg,
)
from support.kernel_testing import cross_check, record_launch

METAL_TYPE = METAL_TYPES  # the dtype table of DESIGN.md
_SCALAR_TYPES = {t.__name__: t for t in SCALAR_KINDS}  # "int" -> int


@dataclass(frozen=True)
class Tensor:
    """A tensor parameter: name, dtype and rank (a rank-0 input is bound as ``constant T&``)."""

    name: str
    dtype: torch.dtype = torch.float32
    rank: int = 1


@dataclass(frozen=True)
class Scalar:
    """A scalar parameter: ``int``, ``float`` or ``bool``."""

    name: str
    type: str


@dataclass(frozen=True)
class Kernel:
    name: str
    handle: int
    results: tuple[Tensor, ...]
    source: str
    registration: tuple  # the register_kernel arguments

    def __call__(
        self,
        *args: object,
        grid: tuple[int, int, int],
        group: tuple[int, int, int],
        shapes: list[list[int]],
    ) -> list[torch.Tensor]:
        def launch(values: tuple) -> list[torch.Tensor]:
            return torch.ops.coreai_torch.launch(
                self.handle,
                [a for a in values if isinstance(a, torch.Tensor)],
                [a for a in values if not isinstance(a, torch.Tensor)],
                list(grid),
                list(group),
                [d for s in shapes for d in s],
            )

        # In device mode the launch also runs on the test device (kernel_testing);
        # these tests check the device's results themselves, and some of their
        # kernels leave results unwritten on purpose, so only inputs are compared.
        debug = bool(self.registration[-1] & OPTION_DEBUG)
        out = cross_check(self.name, launch, args, debug, results=False)
        record_launch(self.name, self.registration, group)
        return out


def registration(
    name: str,
    inputs: list[Tensor | Scalar],
    results: list[Tensor],
    body: str,
    attrs: list[tuple[str, str, str]],
    helper: str = "",
    options: int = 0,
) -> tuple:
    """The ``register_kernel`` arguments of a kernel rendered by the contract module."""
    args = tuple(
        TensorArg(a.name, a.rank, a.dtype)
        if isinstance(a, Tensor)
        else ScalarArg(a.name, _SCALAR_TYPES[a.type])
        for a in inputs
    )
    spec = Specialization(args, tuple(TensorArg(r.name, r.rank, r.dtype) for r in results))
    names = (tuple(a.name for a in inputs), tuple(r.name for r in results))
    definition = KernelDefinition(name, *names, body, helper, tuple(attrs), ())
    return contract.registration(definition, spec, options)


def kernel(
    name: str,
    inputs: list[Tensor | Scalar],
    results: list[Tensor],
    body: str,
    attrs: list[tuple[str, str, str]],
    helper: str = "",
    debug: bool = False,
) -> Kernel:
    """Renders and registers a kernel; ``attrs`` are (name, type, attribute) triples."""
    args = registration(name, inputs, results, body, attrs, helper, 1 if debug else 0)
    handle = torch.ops.coreai_torch.register_kernel(*args)
    return Kernel(name, handle, tuple(results), args[1], args)
