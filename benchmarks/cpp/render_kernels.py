"""Renders the benchmark kernels ahead of time for the C++ harness.

For each kernel of ``benchmarks/bench_kernels.py`` and the specialization the harness
launches, writes the buffer rendering (by ``coreai_torch.contract``, the code the
eager backends use) to ``<key>.metal`` and the ``register_kernel`` arguments to
``<key>.kernel``, one ``field value...`` line each::

    python benchmarks/cpp/render_kernels.py OUT_DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_kernels as kernels  # from benchmarks/, put on the path above

from coreai_torch import TorchMetalKernel

_F32_1D = torch.empty(0, dtype=torch.float32, device="meta")
_F32_2D = torch.empty(0, 0, dtype=torch.float32, device="meta")

# key -> (kernel, example inputs fixing the specialization, result ranks)
SPECIALIZATIONS: dict[str, tuple[TorchMetalKernel, tuple, list[int]]] = {
    "add": (kernels.add, (_F32_1D, _F32_1D), [1]),
    "tiled_matmul": (kernels.tiled_matmul, (_F32_2D, _F32_2D), [2]),
    "simdgroup_gemm": (kernels.simdgroup_gemm, (_F32_2D, _F32_2D), [2]),
    "barrier_loop": (kernels.barrier_loop, (_F32_1D, 0), [1]),
}
# Copies the harness compiles in fiber mode, beside the group-loop form.
for _key in ("tiled_matmul", "simdgroup_gemm", "barrier_loop"):
    _kernel, _inputs, _ranks = SPECIALIZATIONS[_key]
    SPECIALIZATIONS[_key + "_fibers"] = (kernels.in_fiber_mode(_kernel), _inputs, _ranks)


def registration(kernel: TorchMetalKernel, inputs: tuple, result_ranks: list[int]) -> tuple:
    """The ``register_kernel`` arguments of ``kernel`` called on ``inputs``."""
    outs = kernel.as_result_list(kernel.torch_defn(*inputs))
    spec = kernel.specialization(inputs, result_ranks, [o.dtype for o in outs])
    return kernel.registration(spec)


def _dtype(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def write_all(out_dir: Path) -> list[str]:
    """Writes every specialization to ``out_dir``; returns the keys written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for key, (kernel, inputs, ranks) in SPECIALIZATIONS.items():
        (
            name,
            source,
            entry,
            input_names,
            arg_kinds,
            input_dtypes,
            input_ranks,
            result_names,
            result_dtypes,
            result_ranks,
            thread_attrs,
            _,
        ) = registration(kernel, inputs, ranks)
        (out_dir / f"{key}.metal").write_text(source)
        lines = [
            f"name {name}",
            f"entry {entry}",
            "input_names " + " ".join(input_names),
            f"arg_kinds {arg_kinds}",
            "input_dtypes " + " ".join(map(_dtype, input_dtypes)),
            "input_ranks " + " ".join(map(str, input_ranks)),
            "result_names " + " ".join(result_names),
            "result_dtypes " + " ".join(map(_dtype, result_dtypes)),
            "result_ranks " + " ".join(map(str, result_ranks)),
            "thread_attrs " + " ".join(thread_attrs),
        ]
        (out_dir / f"{key}.kernel").write_text("\n".join(lines) + "\n")
    return list(SPECIALIZATIONS)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory the harness reads (--kernels)")
    args = parser.parse_args(argv)
    keys = write_all(args.out_dir)
    print(f"wrote {', '.join(keys)} to {args.out_dir}")


if __name__ == "__main__":
    main()
