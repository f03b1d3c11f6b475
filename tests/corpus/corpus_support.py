"""Shared by the corpus of real public kernels (tests/corpus/test_*.py).

Each ported kernel keeps its original Metal code; only its signature is
adapted to the TorchMetalKernel body convention (buffers become tensor views,
launch-time constants become values read from the tensors' extents). Longer
helper code sits in a .metal file next to the test module, with the original
repository, path and function named at its top.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from support.kernel_testing import run_checked

from coreai_torch import TorchMetalKernel
from coreai_torch.contract import render_buffer_source, strided_view_header

HERE = Path(__file__).resolve().parent


# #include lines naming a file of the ported project rather than a Metal header:
# quoted ones, and PyTorch's <c10/...> and <ATen/...>.
_PROJECT_INCLUDES = ('#include "', "#include <c10/", "#include <ATen/")


def helper_source(*relative: str) -> str:
    """The ported helper code: the files concatenated, their repository-relative
    #include lines dropped (the files are given in dependency order)."""
    parts = []
    for name in relative:
        lines = (HERE / name).read_text().splitlines()
        parts.append(
            "\n".join(
                "" if line.startswith(_PROJECT_INCLUDES) or line.strip() == "#pragma once" else line
                for line in lines
            )
        )
    return "\n".join(parts) + "\n"


def launch(
    kernel: TorchMetalKernel,
    *args: Any,
    grid: tuple[int, int, int],
    group: tuple[int, int, int],
    shapes: list[list[int]],
    opcheck: bool = True,
) -> Any:
    """Runs a corpus kernel on CPU tensors (dispatchThreads semantics) and,
    unless told not to, passes its op through torch.library.opcheck."""
    out = run_checked(
        kernel,
        *args,
        opcheck=opcheck,
        threads_per_grid=grid,
        threads_per_thread_group=group,
        result_shapes=shapes,
    )
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    check_metal_rendering(kernel, args, [o.dtype for o in outs], shapes)
    return out


# What the CPU backend's passes and headers add, which the Metal source an
# Apple GPU compiles must not contain: the port has to stay plain Metal.
_CPU_ONLY = ("coreai::", "coreai_threadgroup_", "thread_local", "__attribute__")


def check_metal_rendering(
    kernel: TorchMetalKernel, args: tuple, dtypes: list[torch.dtype], shapes: list[list[int]]
) -> None:
    """The buffer rendering of this call (the source the MPS backend hands to
    Metal's compiler, and the CPU backend to its passes) is plain Metal, with
    nothing of the CPU backend's own in it."""
    spec = kernel.specialization(args, [len(s) for s in shapes], dtypes)
    _, source = render_buffer_source(kernel.definition, spec)
    # The project's strided view (int64, uint64 and bool tensors) is pasted
    # into the rendering on purpose: it is written in plain Metal.
    source = source.replace(strided_view_header(), "").replace("coreai::strided_view<", "")
    for word in _CPU_ONLY:
        assert word not in source, f"kernel '{kernel.name}': its Metal source contains {word!r}"


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)
