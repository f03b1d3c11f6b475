"""Checking a kernel against its PyTorch reference: :func:`check_kernel`.

A check runs the kernel on generated inputs shaped like an example call the
user gives, for every dtype its templates accept and for sizes that are not
multiples of the threadgroup, on every backend the machine has, and compares
each result with ``torch_defn``. On the CPU each case also runs in debug mode,
whose checks report races, reliance on SIMD-group lockstep, barriers reached by
part of a threadgroup, reads of unwritten threadgroup memory and out-of-bounds
pointers (docs/cpu.md, "Checking kernels").
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from . import _C
from .errors import MetalCompileError

# The dtypes a templated input is tried with, per family of its example's dtype.
_TEMPLATE_DTYPES = {
    "float": (torch.float32, torch.float16, torch.bfloat16),
    "int": (torch.int32, torch.int16, torch.uint8),
}

_COMPILE_ERROR = "MetalCompileError: "

# Findings of debug mode that do not fail a launch (csrc/cpu/access_checker.h).
_WARNING_KINDS = ("SIMD lockstep", "uninitialized read", "SIMD participation")

# Relative and absolute tolerances per result dtype: torch.testing's defaults,
# the rounding error of one or a few operations in that dtype. Integer and
# bool results must match exactly.
_TOLERANCES = {
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}


@dataclasses.dataclass(frozen=True)
class Example:
    """An example call of a kernel: its inputs and launch, as the kernel is called.

    >>> import torch
    >>> ex = Example(torch.ones(8), threads_per_grid=(8, 1, 1),
    ...              threads_per_thread_group=(4, 1, 1), result_shapes=[[8]])
    >>> ex.threads_per_grid
    (8, 1, 1)
    """

    args: tuple[Any, ...]
    threads_per_grid: tuple[int, int, int]
    threads_per_thread_group: tuple[int, int, int]
    result_shapes: tuple[tuple[int, ...], ...]

    def __init__(
        self,
        *args: Any,
        threads_per_grid: Sequence[int],
        threads_per_thread_group: Sequence[int],
        result_shapes: Sequence[Sequence[int]],
    ) -> None:
        object.__setattr__(self, "args", tuple(args))
        object.__setattr__(self, "threads_per_grid", tuple(int(v) for v in threads_per_grid))
        object.__setattr__(
            self, "threads_per_thread_group", tuple(int(v) for v in threads_per_thread_group)
        )
        object.__setattr__(
            self, "result_shapes", tuple(tuple(int(d) for d in s) for s in result_shapes)
        )


@dataclasses.dataclass
class CaseResult:
    """One run of a kernel: backend, input dtypes and shapes, and what came of it."""

    device: str
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    threads_per_grid: tuple[int, ...]
    passed: bool = False
    skipped: str = ""  # why the case did not run (a dtype the kernel does not compile for)
    error: str = ""  # the kernel's error, if it raised
    max_error: float = 0.0
    first_mismatch: str = ""  # "result 'out' at torch index [3, 1]: 2.0 (expected 3.0)"
    findings: list[dict] = dataclasses.field(default_factory=list)  # debug mode's reports

    def describe(self) -> str:
        what = (
            f"{self.device} {'/'.join(self.dtypes) or '-'} shapes "
            f"{[list(s) for s in self.shapes]} grid {list(self.threads_per_grid)}"
        )
        if self.skipped:
            return f"  skipped  {what}: {self.skipped}"
        lines = [
            f"  {'pass' if self.passed else 'FAIL'}     {what}: max error {self.max_error:.3g}"
        ]
        if self.first_mismatch:
            lines.append(f"           first mismatch: {self.first_mismatch}")
        if self.error:
            lines.append(f"           error: {self.error}")
        for f in self.findings:
            # Warnings of debug mode (docs/cpu.md, "Checking kernels").
            note = " (warning)" if f["kind"] in _WARNING_KINDS else ""
            lines.append(f"           {f['kind']}{note}: {f['message']}")
        return "\n".join(lines)


@dataclasses.dataclass
class KernelReport:
    """What :func:`check_kernel` found for one kernel; ``str()`` is the readable report."""

    kernel: str
    cases: list[CaseResult]

    @property
    def passed(self) -> bool:
        ran = [c for c in self.cases if not c.skipped]
        return bool(ran) and all(c.passed for c in ran)

    def __str__(self) -> str:
        ran = [c for c in self.cases if not c.skipped]
        failed = [c for c in ran if not c.passed]
        head = (
            f"kernel '{self.kernel}': {'PASS' if self.passed else 'FAIL'} "
            f"({len(ran) - len(failed)} of {len(ran)} cases passed"
            f"{f', {len(self.cases) - len(ran)} skipped' if len(ran) < len(self.cases) else ''})"
        )
        return "\n".join([head, *(c.describe() for c in self.cases)])


def available_devices() -> list[str]:
    """The backends this machine can run kernels on: ``cpu``, and ``cuda``/``mps`` if present."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def check_kernel(
    kernel: Any,
    example: Example,
    *,
    devices: Sequence[str] | None = None,
    edge_sizes: bool = True,
    all_dtypes: bool = True,
    debug: bool = True,
    seed: int = 0,
) -> KernelReport:
    """Runs ``kernel`` against its ``torch_defn`` on inputs generated from ``example``.

    Cases: the example's shapes, then (``edge_sizes``) the grid axes that span a
    result dimension resized to a size that is not a multiple of the
    threadgroup, each with every dtype the kernel's ``template_dtypes`` inputs
    may take (``all_dtypes``), on each of ``devices`` (default: every backend
    present). Floating-point inputs are random normal values; integer and bool
    inputs keep the example's values (they are often indices or sizes). With
    ``debug``, CPU cases run in debug mode and report what its checks find.

    >>> import torch
    >>> from coreai_torch import TorchMetalKernel, MetalParameter
    >>> def torch_twice(x: torch.Tensor) -> torch.Tensor:
    ...     return 2 * x
    >>> twice = TorchMetalKernel("doc_check_twice", ["x"], ["out"],
    ...     src="if (id < x.get_extent(0)) out[id] = 2 * x[id];", torch_defn=torch_twice,
    ...     metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
    >>> report = check_kernel(twice, Example(torch.ones(64), threads_per_grid=(64, 1, 1),
    ...     threads_per_thread_group=(32, 1, 1), result_shapes=[[64]]), all_dtypes=False)
    >>> report.passed
    True
    """
    generator = torch.Generator().manual_seed(seed)
    cases: list[CaseResult] = []
    for args, grid, shapes in _sizes(kernel, example, edge_sizes, generator):
        for n, variant in enumerate(_dtype_variants(kernel, args, all_dtypes)):
            for device in devices if devices is not None else available_devices():
                case = _run_case(
                    kernel, variant, grid, example.threads_per_thread_group, shapes, device, debug
                )
                # Another dtype than the example's that does not compile is one
                # the kernel's templates do not accept: not a failure.
                if n > 0 and case.error.startswith(_COMPILE_ERROR):
                    case.skipped = (
                        f"does not compile for these dtypes ({case.error.splitlines()[0]})"
                    )
                    case.error = ""
                cases.append(case)
    return KernelReport(kernel.name, cases)


# ---------------------------------------------------------------- cases


def _generated(arg: Any, shape: Sequence[int], generator: torch.Generator) -> Any:
    """An input like the example's ``arg``, of ``shape``."""
    if not isinstance(arg, torch.Tensor):
        return arg
    if arg.is_floating_point():
        return torch.randn(tuple(shape), generator=generator).to(arg.dtype)
    if tuple(shape) == tuple(arg.shape):
        return arg.clone()
    # Integer inputs keep the example's values: cut to the new shape, or tiled.
    flat = arg.reshape(-1)
    count = math.prod(shape)
    reps = -(-count // max(flat.numel(), 1))
    return flat.repeat(reps)[:count].reshape(tuple(shape)).clone() if flat.numel() else arg


def _edge(size: int, group: int) -> int | None:
    """A size near ``size`` that is not a multiple of ``group`` (None if every size is)."""
    if group <= 1:
        return None
    for candidate in (size - 1, size + 1, size + group // 2 + 1):
        if candidate >= 1 and candidate % group != 0:
            return candidate
    return None


def _sizes(
    kernel: Any, example: Example, edge_sizes: bool, generator: torch.Generator
) -> list[tuple[tuple, tuple[int, ...], tuple[tuple[int, ...], ...]]]:
    """(inputs, grid, result shapes) of each size case: the example's, then the edge case."""
    base = tuple(_generated(a, getattr(a, "shape", ()), generator) for a in example.args)
    out = [(base, example.threads_per_grid, example.result_shapes)]
    if not edge_sizes or not example.result_shapes:
        return out
    first = example.result_shapes[0]
    grid = list(example.threads_per_grid)
    resized: dict[int, int] = {}  # an old dimension size -> its edge size
    for axis in range(3):
        # Grid axis x spans the innermost (last) torch dimension, y the one before.
        if axis >= len(first) or grid[axis] != first[-1 - axis] or grid[axis] <= 1:
            continue
        new = _edge(grid[axis], example.threads_per_thread_group[axis])
        if new is not None and grid[axis] not in resized:
            resized[grid[axis]] = new
    if not resized:
        return out
    grid = [resized.get(g, g) for g in grid]
    args = tuple(
        _generated(a, [resized.get(d, d) for d in a.shape], generator)
        if isinstance(a, torch.Tensor)
        else a
        for a in example.args
    )
    try:
        reference = kernel.as_result_list(kernel.torch_defn(*args))
    except Exception:  # the resized inputs do not fit the reference: no edge case
        return out
    return [*out, (args, tuple(grid), tuple(tuple(r.shape) for r in reference))]


def _dtype_variants(kernel: Any, args: tuple, all_dtypes: bool) -> list[tuple]:
    """``args`` with every dtype combination its templated inputs are tried with."""
    variants = [args]
    templated = [kernel.input_names.index(n) for n in kernel.template_dtypes]
    if not all_dtypes or not templated:
        return variants
    # Inputs of one family change together (x and y of one template type T).
    families: dict[str, list[int]] = {}
    for i in templated:
        a = args[i]
        if isinstance(a, torch.Tensor):
            family = "float" if a.is_floating_point() else "int"
            if a.dtype in _TEMPLATE_DTYPES[family]:
                families.setdefault(family, []).append(i)
    for family, positions in families.items():
        for dtype in _TEMPLATE_DTYPES[family]:
            if all(args[i].dtype == dtype for i in positions):
                continue
            changed = list(args)
            for i in positions:
                changed[i] = args[i].to(dtype)
            variants.append(tuple(changed))
    return variants


def _first_mismatch(name: str, out: torch.Tensor, ref: torch.Tensor) -> tuple[float, str]:
    """The largest absolute error and the first mismatching element of one result."""
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return math.inf, (
            f"result '{name}' is {out.dtype} {list(out.shape)}, torch_defn gives {ref.dtype} "
            f"{list(ref.shape)}"
        )
    if out.numel() == 0:
        return 0.0, ""
    a, b = out.double(), ref.double()
    rtol, atol = _TOLERANCES.get(out.dtype, (0.0, 0.0))
    close = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    error = (a - b).abs().nan_to_num(nan=0.0, posinf=math.inf)
    error[torch.isnan(a) != torch.isnan(b)] = math.inf
    max_error = float(error.max())
    if bool(close.all()):
        return max_error, ""
    index = [int(i) for i in torch.nonzero(~close)[0]]
    return max_error, (
        f"result '{name}' at torch index {index}: {out[tuple(index)].item()} "
        f"(expected {ref[tuple(index)].item()})"
    )


def _run_case(
    kernel: Any,
    args: tuple,
    grid: Sequence[int],
    group: Sequence[int],
    shapes: Sequence[Sequence[int]],
    device: str,
    debug: bool,
) -> CaseResult:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    case = CaseResult(
        device=device,
        dtypes=tuple(str(a.dtype).removeprefix("torch.") for a in tensors),
        shapes=tuple(tuple(a.shape) for a in tensors),
        threads_per_grid=tuple(grid),
    )
    try:
        reference = kernel.as_result_list(kernel.torch_defn(*args))
    except Exception as exc:  # the reference itself cannot take these inputs
        case.skipped = f"torch_defn raised {type(exc).__name__}: {exc}"
        return case
    on_device = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    checked = debug and device == "cpu"
    saved = kernel.debug
    kernel.debug = checked
    try:
        with warnings.catch_warnings():
            # Debug mode's warnings go to stderr; the report lists them.
            warnings.simplefilter("ignore")
            outs = kernel.as_result_list(_launch(kernel, on_device, grid, group, shapes))
        case.findings = list(_C._last_debug_findings()) if checked else []
    except MetalCompileError as exc:
        case.error = _COMPILE_ERROR + str(exc)
        return case
    except RuntimeError as exc:
        case.error = str(exc)
        case.findings = list(_C._last_debug_findings()) if checked else []
        return case
    finally:
        kernel.debug = saved
    max_error, first = 0.0, ""
    for name, out, ref in zip(kernel.result_names, outs, reference):
        error, mismatch = _first_mismatch(name, out.cpu(), ref)
        max_error = max(max_error, error)
        first = first or mismatch
    case.max_error, case.first_mismatch = max_error, first
    case.passed = not first
    return case


def _launch(
    kernel: Any,
    args: tuple,
    grid: Sequence[int],
    group: Sequence[int],
    shapes: Sequence[Sequence[int]],
) -> Any:
    return kernel(
        *args,
        threads_per_grid=tuple(grid),
        threads_per_thread_group=tuple(group),
        result_shapes=[list(s) for s in shapes],
    )
