"""Launching hand-rendered kernels through torch.ops.coreai_torch directly.

These helpers write the buffer rendering of docs/internals.md §1 themselves,
so the tests of the C++ op and the CPU backend do not depend on the front end.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import coreai_torch._C  # noqa: F401  (registers torch.ops.coreai_torch)
import torch

from coreai_torch.contract import METAL_TYPES

# tests/, for kernel_testing, also when a child process imports this file alone.
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parents[1]))
from kernel_testing import LAUNCHED_KERNELS, cross_check

METAL_TYPE = METAL_TYPES  # the dtype table of DESIGN.md
SCALAR_KIND = {"int": "i", "float": "f", "bool": "b"}


@dataclass(frozen=True)
class Tensor:
    """A tensor parameter: name, dtype and rank (rank 0 is bound as ``constant T&``)."""

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
    debug: bool = False

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
                [len(s) for s in shapes],
                [r.dtype for r in self.results],
            )

        # In device mode the launch also runs on the test device (kernel_testing);
        # these tests check the device's results themselves, and some of their
        # kernels leave results unwritten on purpose, so only inputs are compared.
        out = cross_check(self.name, launch, args, self.debug, results=False)
        LAUNCHED_KERNELS.append((self.name, self.handle))
        return out


def render(
    entry: str,
    inputs: list[Tensor | Scalar],
    results: list[Tensor],
    body: str,
    attrs: list[tuple[str, str, str]],
    helper: str = "",
) -> str:
    """The buffer rendering of docs/internals.md §1."""
    params, views = [], []
    meta = 0
    for arg in (*inputs, *results):
        index = len(params)
        if isinstance(arg, Scalar):
            params.append(f"constant {arg.type}& {arg.name} [[buffer({index})]]")
            continue
        mtype = METAL_TYPE[arg.dtype]
        if arg.rank == 0:
            params.append(f"constant {mtype}& {arg.name} [[buffer({index})]]")
            continue
        params.append(f"device {mtype}* coreai_buf_{arg.name} [[buffer({index})]]")
        r = arg.rank
        extents = ", ".join(f"coreai_meta[{meta + d}]" for d in range(r))
        strides = ", ".join(f"coreai_meta[{meta + r + d}]" for d in range(r))
        views.append(
            f"tensor<device {mtype}, dextents<int, {r}>, tensor_inline> {arg.name}"
            f"(coreai_buf_{arg.name}, dextents<int, {r}>({extents}), array<int, {r}>{{{strides}}});"
        )
        meta += 2 * r
    params.append(f"constant int* coreai_meta [[buffer({len(params)})]]")
    params += [f"{mtype} {name} [[{attr}]]" for name, mtype, attr in attrs]
    return (
        "#include <metal_stdlib>\n"
        "#include <metal_tensor>\n"
        "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
        "using namespace metal;\n"
        "using namespace mpp::tensor_ops;\n"
        '#line 1 "helper_src"\n'
        f"{helper}\n"
        '#line 1 "generated_signature"\n'
        f"[[kernel]] void {entry}({', '.join(params)}) {{\n"
        + "".join(v + "\n" for v in views)
        + "{\n"
        '#line 1 "src"\n'
        f"{body}\n"
        "}\n"
        "}\n"
    )


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
    entry = f"{name}_0123456789"
    source = render(entry, inputs, results, body, attrs, helper)
    kinds = "".join("t" if isinstance(a, Tensor) else SCALAR_KIND[a.type] for a in inputs)
    names = [a.name for a in inputs if isinstance(a, Tensor)] + [r.name for r in results]
    handle = torch.ops.coreai_torch.register_kernel(
        name, source, entry, kinds, names, [a[2] for a in attrs], 1 if debug else 0
    )
    return Kernel(name, handle, tuple(results), source, debug)
