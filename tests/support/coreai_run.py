"""Convert modules, run them in Core AI's CPU runtime and compare with PyTorch.

Running a program is ``coreai_torch.runtime.run_program`` (re-exported here for
the tests); this module adds what only tests need: exporting and converting in
one call, and the comparison with eager PyTorch, which checks both forms the
converter accepts (the raw export and its decomposition).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from coreai.authoring import AIProgram
from torch.export import ExportedProgram

from coreai_torch.converter import TorchConverter, get_decomp_table
from coreai_torch.converter.decomp import decompose
from coreai_torch.converter.graph_lowering import all_call_nodes, is_lowerable
from coreai_torch.runtime import run_program

__all__ = ["Lambda", "assert_converted_matches", "convert", "convert_program", "run_program"]

# What a torch result becomes in a converted program (64-bit types are narrowed).
_NARROW = {torch.int64: torch.int32, torch.float64: torch.float32}


def convert_program(program: ExportedProgram) -> tuple[AIProgram, list[str], list[str]]:
    """Convert an exported program with inputs ``in0, in1, ...`` and outputs ``out0, ...``."""
    n_inputs = len(program.graph_signature.user_inputs)
    n_outputs = len(program.graph_signature.user_outputs)
    input_names = [f"in{i}" for i in range(n_inputs)]
    output_names = [f"out{i}" for i in range(n_outputs)]
    converted = (
        TorchConverter()
        .add_exported_program(program, input_names=input_names, output_names=output_names)
        .to_coreai()
    )
    return converted, input_names, output_names


def convert(
    module: torch.nn.Module,
    args: Sequence[torch.Tensor],
    dynamic_shapes: Any = None,
) -> tuple[AIProgram, list[str], list[str]]:
    """Export and convert ``module``; returns the program and its input/output names."""
    program = torch.export.export(module, tuple(args), dynamic_shapes=dynamic_shapes)
    return convert_program(program)


@functools.cache
def _decomp_table() -> dict:
    return get_decomp_table()


def decomposition_differs(program: ExportedProgram) -> bool:
    """Whether the converter lowers this raw program as it is, and decomposing it would not.

    Then the raw graph and its decomposition reach different lowerings, and a
    test must convert both to cover what users may pass.
    """
    nodes = all_call_nodes(program.graph_module)
    if not all(is_lowerable(n.target, {}) for n in nodes):
        return False  # the converter decomposes it itself
    table = _decomp_table()
    return any(n.target in table for n in nodes)


def assert_converted_matches(
    module: torch.nn.Module,
    args: Sequence[torch.Tensor],
    *,
    run_args: Sequence[torch.Tensor] | None = None,
    dynamic_shapes: Any = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Convert ``module`` for ``args`` and compare it with eager PyTorch.

    The raw export is converted, and so is its decomposition with
    ``get_decomp_table()`` when that changes which lowerings run.
    ``run_args`` (other shapes, for dynamic programs) default to ``args``.
    Integer and bool results must match exactly; 64-bit results are compared
    after narrowing, which is what the converted program computes in.
    """
    raw = torch.export.export(module, tuple(args), dynamic_shapes=dynamic_shapes)
    programs = {"raw export": raw}
    if decomposition_differs(raw):
        programs["decomposed"] = decompose(raw)
    run_args = list(run_args if run_args is not None else args)
    expected = pytree.tree_leaves(module(*run_args))
    for form, program in programs.items():
        converted, input_names, output_names = convert_program(program)
        got = run_program(converted, dict(zip(input_names, run_args, strict=True)))
        assert len(expected) == len(output_names)
        for name, want in zip(output_names, expected, strict=True):
            _assert_output_matches(got[name], want, f"{form}, {name}", rtol, atol)


def _assert_output_matches(
    result: torch.Tensor, want: torch.Tensor, what: str, rtol: float | None, atol: float | None
) -> None:
    want = want.to(_NARROW.get(want.dtype, want.dtype))
    if want.dim() == 0 and tuple(result.shape) == (1,):
        # The runtime hands 0-d outputs back as one-element vectors (the IR
        # type is 0-d: the program itself is right).
        result = result.reshape(())
    assert result.dtype == want.dtype, f"{what}: {result.dtype} vs {want.dtype}"
    assert tuple(result.shape) == tuple(want.shape), f"{what}: {result.shape} vs {want.shape}"
    if want.dtype.is_floating_point:
        torch.testing.assert_close(result, want, rtol=rtol, atol=atol, msg=what)
    else:
        torch.testing.assert_close(result, want, rtol=0, atol=0, msg=what)


class Lambda(torch.nn.Module):
    """A module around a function, so that one-line tests can export it."""

    def __init__(self, function: Any) -> None:
        super().__init__()
        self.function = function

    def forward(self, *args: torch.Tensor) -> Any:
        return self.function(*args)
