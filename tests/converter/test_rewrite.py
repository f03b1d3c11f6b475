"""Core AI's pre-compilation rewrite, as ``to_coreai`` runs it (``converter._rewrite``).

The converter runs coreai-core's rewrite pipeline with its module verified
before and after the passes rather than after each one. These tests check
that the result is the IR coreai-core's own entry point gives, that the
program still computes what PyTorch does, and that IR the verifier rejects is
reported at the model's source line.
"""

from __future__ import annotations

import inspect

import coreai.authoring  # must precede the dialect import below
import pytest
import torch
import torch.nn.functional as F
from coreai._compiler._mlir_libs._coreaiIR._bindings.compiler import (
    run_pre_compilation_rewrite,
)
from coreai._compiler.dialects import coreai
from coreai._compiler.passmanager import PassManager
from coreai.authoring import Context
from support.coreai_run import run_program

from coreai_torch import TorchConverter
from coreai_torch.converter import converter as converter_module

from .test_state import PROMPT, Decoder


class _Block(torch.nn.Module):
    """Ops that several of the rewrite's passes act on.

    A convolution followed by a batch norm, GELU, transposes around reshapes,
    attention and a layer norm.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1)
        self.norm = torch.nn.BatchNorm1d(8)
        self.heads = torch.nn.Linear(8, 24)
        self.out = torch.nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.conv(x.transpose(1, 2))).transpose(1, 2)
        x = F.gelu(x, approximate="tanh")
        q, k, v = self.heads(x).reshape(x.shape[0], x.shape[1], 3, 2, 4).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.out(x + y.transpose(1, 2).reshape(x.shape))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = _Block().eval()
    with torch.no_grad():  # a batch norm that is not the identity
        model.norm.running_mean.uniform_(-0.5, 0.5)
        model.norm.running_var.uniform_(0.5, 2.0)
    return model


def _with_coreai_core_rewrite(module, propagate_types: bool = True) -> None:
    run_pre_compilation_rewrite(module=module)
    module.operation.verify()


def test_the_rewrite_gives_the_ir_of_coreai_cores_own_entry_point(monkeypatch) -> None:
    model = _model()
    x = torch.randn(2, 6, 8)
    program = torch.export.export(model, (x,))

    ours = TorchConverter().add_exported_program(program, input_names=["x"]).to_coreai()
    monkeypatch.setattr(converter_module, "_rewrite", _with_coreai_core_rewrite)
    theirs = TorchConverter().add_exported_program(program, input_names=["x"]).to_coreai()

    text = str(ours)
    # The passes ran: the batch norm's rsqrt of constants was folded away (the
    # layer norm's stays), and so were the lowering's expand_dims/shrink_dims.
    assert text.count("coreai.rsqrt") == 1
    assert "coreai.expand_dims" not in text and "coreai.shrink_dims" not in text
    assert text == str(theirs)
    (got,) = run_program(ours, {"x": x}).values()
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)


class _AddMixed(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.add.Tensor(x, y)


def test_an_op_the_verifier_rejects_is_reported_at_the_models_line() -> None:
    program = torch.export.export(_AddMixed(), (torch.randn(3), torch.arange(3, dtype=torch.int32)))
    converter = TorchConverter()

    @converter.register_torch_lowering("aten::add.Tensor", allow_override=True)
    def add_without_a_cast(values_map, node, loc):
        # float32 + int32 with no cast: Core AI wants equal element types.
        x, y = (values_map[a.name] for a in node.args[:2])
        return coreai.broadcasting_add(x, y, loc=loc)

    line = inspect.getsourcelines(_AddMixed.forward)[1] + 1
    with pytest.raises(RuntimeError) as caught:
        converter.add_exported_program(program).to_coreai()
    message = str(caught.value)
    assert "the converted program does not verify: a lowering built an op" in message
    assert f"{__file__}:{line}: 'coreai.decomposable.broadcasting_add' op" in message
    assert "element type" in message


def test_the_rewrite_gives_the_same_ir_with_and_without_threads(monkeypatch) -> None:
    model = _model()
    programs = {
        name: torch.export.export(model, (torch.randn(batch, 6, 8),))
        for name, batch in (("one", 1), ("two", 2))
    }

    def convert() -> str:
        converter = TorchConverter()
        for name, program in programs.items():
            converter.add_exported_program(program, input_names=["x"], entrypoint_name=name)
        return str(converter.to_coreai())

    calls = []
    worth_threads = converter_module._worth_threads
    monkeypatch.setattr(
        converter_module, "_worth_threads", lambda m: calls.append(worth_threads(m)) or calls[-1]
    )
    alone = convert()
    monkeypatch.setattr(converter_module, "_THREADED_GRAPHS", 2)
    monkeypatch.setattr(converter_module, "_THREADED_OPS", 1)
    threaded = convert()
    assert calls == [False, True]
    assert threaded == alone


def _passes(pipeline: str) -> list[str]:
    """The top-level passes of a parsed pipeline, as MLIR prints them."""
    with Context() as context:
        text = str(PassManager.parse(pipeline, context=context._mlir_context))
    body = text[len("builtin.module(") : -1]
    passes, depth, start = [], 0, 0
    for index, char in enumerate(body):
        depth += char in "({"
        depth -= char in ")}"
        if char == "," and depth == 0:
            passes.append(body[start:index])
            start = index + 1
    return [*passes, body[start:]]


def test_the_pipeline_is_coreai_cores_less_the_skipped_passes() -> None:
    theirs = _passes(converter_module.COREAI_REWRITE_PIPELINE)
    skipped = _passes(f"builtin.module({','.join(converter_module.SKIPPED_PASSES)})")
    assert set(skipped) <= set(theirs)
    assert _passes(converter_module._REWRITE_PIPELINE) == [p for p in theirs if p not in skipped]
    static = [p for p in theirs if p not in skipped and p != "type-propagation"]
    assert _passes(converter_module._STATIC_REWRITE_PIPELINE) == static


def _converted_text(programs: dict[str, torch.export.ExportedProgram]) -> str:
    """The converted program's IR, locations included (the rewrite adds some)."""
    converter = TorchConverter()
    for name, program in programs.items():
        converter.add_exported_program(program, entrypoint_name=name)
    module = converter.to_coreai()._module._mlir_module
    return module.operation.get_asm(enable_debug_info=True)


def _with_the_full_pipeline(monkeypatch) -> None:
    full = converter_module.COREAI_REWRITE_PIPELINE
    monkeypatch.setattr(converter_module, "_REWRITE_PIPELINE", full)
    monkeypatch.setattr(converter_module, "_STATIC_REWRITE_PIPELINE", full)


def test_the_skipped_passes_change_nothing_in_a_stateful_program(monkeypatch) -> None:
    torch.manual_seed(0)
    model = Decoder().eval()
    programs = {
        name: torch.export.export(model, (torch.zeros(1, n, dtype=torch.long), torch.arange(n)))
        for name, n in (("prefill", PROMPT), ("decode", 1))
    }
    ours = _converted_text(programs)
    _with_the_full_pipeline(monkeypatch)
    assert "coreai.read_handle" in ours
    assert ours == _converted_text(programs)


def test_type_propagation_runs_where_a_size_is_dynamic(monkeypatch) -> None:
    model = _model()
    length = torch.export.Dim("length", min=2, max=32)
    program = torch.export.export(model, (torch.randn(2, 6, 8),), dynamic_shapes=({1: length},))
    pipelines = []
    rewrite = converter_module._rewrite

    def noting(module, propagate_types: bool = True) -> None:
        pipelines.append(propagate_types)
        rewrite(module, propagate_types=propagate_types)

    monkeypatch.setattr(converter_module, "_rewrite", noting)
    ours = _converted_text({"main": program})
    _converted_text({"main": torch.export.export(model, (torch.randn(2, 6, 8),))})  # static
    assert pipelines == [True, False]
    _with_the_full_pipeline(monkeypatch)
    assert ours == _converted_text({"main": program})
