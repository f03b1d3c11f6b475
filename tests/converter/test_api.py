"""The TorchConverter API: Apple's coreai-torch 0.4 names, options and behaviour."""

from __future__ import annotations

import gc
import inspect

import coreai.authoring  # must precede the dialect import below
import numpy as np
import pytest
import torch
from coreai._compiler.dialects import coreai
from coreai._compiler.ir import Location
from coreai.authoring import CompileUnitScope, DebugInfo, FileInfo
from support.coreai_run import Lambda, run_program
from torch import nn

import coreai_torch
from coreai_torch.converter import TorchConverter, UnsupportedOpsError, get_decomp_table
from coreai_torch.examples import AddModel, custom_add, sincos

# Some tests call run_decompositions as users do; in torch 2.13 it warns from
# inside torch (a deprecated pytree class met while deep-copying).
_TORCH_DEEPCOPY_WARNING = "ignore:`isinstance\\(treespec, LeafSpec\\)`:FutureWarning"


@torch.library.custom_op("converter_api_test::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return x + scale * y


@scaled_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("converter_api_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1, 1, 4))
        self.register_buffer("offset", torch.full((4,), 0.25))

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return torch.relu(x * self.weight + self.offset), x - y


def _small_program() -> torch.export.ExportedProgram:
    return torch.export.export(Small(), (torch.rand(3, 4), torch.rand(3, 4)))


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(3, 4, generator=generator), torch.randn(3, 4, generator=generator)


def test_constructor_takes_no_positional_arguments() -> None:
    with pytest.raises(TypeError):
        TorchConverter("main")  # type: ignore[call-arg]


def test_names_default_to_fx_names_and_can_be_given() -> None:
    x, y = _inputs()
    default = TorchConverter().add_exported_program(_small_program()).to_coreai()
    text = str(default)
    assert 'coreai.name = "x"' in text and 'coreai.name = "y"' in text
    assert 'coreai.name = "relu"' in text and 'coreai.name = "sub"' in text
    named = (
        TorchConverter()
        .add_exported_program(_small_program(), input_names=["a", "b"], output_names=["p", "q"])
        .to_coreai()
    )
    outputs = run_program(named, {"a": x, "b": y})
    expected = Small()(x, y)
    # Parameters become constants; relu/mul/add are exact up to float32 rounding.
    torch.testing.assert_close(outputs["p"], expected[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(outputs["q"], expected[1], rtol=0, atol=0)


def test_wrong_number_of_names_is_an_error() -> None:
    with pytest.raises(ValueError, match="1 input_names"):
        TorchConverter().add_exported_program(_small_program(), input_names=["a"]).to_coreai()


def test_several_entry_points_and_selection() -> None:
    x, _ = _inputs()
    converter = (
        TorchConverter()
        .add_exported_program(_small_program(), entrypoint_name="first")
        .add_exported_program(
            torch.export.export(Lambda(lambda a: a * 3), (x,)), entrypoint_name="second"
        )
    )
    both = converter.to_coreai()
    assert "@first" in str(both) and "@second" in str(both)
    torch.testing.assert_close(run_program(both, {"args_0": x}, "second")["mul"], x * 3)
    only = converter.to_coreai(entrypoints=["second"])
    assert "@first" not in str(only) and "@second" in str(only)
    # Converting again gives the same program.
    assert str(converter.to_coreai()) == str(both)


def test_repeated_entry_point_name_is_an_error() -> None:
    converter = TorchConverter().add_exported_program(_small_program())
    with pytest.raises(ValueError, match="'main'"):
        converter.add_exported_program(_small_program())


def test_to_coreai_without_programs() -> None:
    with pytest.raises(RuntimeError, match="add_exported_program"):
        TorchConverter().to_coreai()


def test_clear_keeps_kernel_registrations() -> None:
    converter = TorchConverter().register_custom_kernels([custom_add])
    x = torch.rand(4)
    converter.add_exported_program(torch.export.export(AddModel(), (x, x)), entrypoint_name="a")
    converter.add_exported_program(_small_program(), entrypoint_name="b")
    converter.clear(entrypoints=["b"])
    assert "@b" not in str(converter.to_coreai())
    converter.clear()
    with pytest.raises(RuntimeError):
        converter.to_coreai()
    converter.add_exported_program(torch.export.export(AddModel(), (x, x)))
    assert "coreai.metal4_kernel" in str(converter.to_coreai())


def test_register_custom_kernels_rules() -> None:
    converter = TorchConverter()
    assert converter.register_custom_kernels([]) is converter
    assert converter.register_custom_kernels((custom_add,)) is converter
    with pytest.raises(ValueError, match="already registered"):
        converter.register_custom_kernels([custom_add])
    with pytest.raises(ValueError, match="already registered"):
        TorchConverter().register_custom_kernels([sincos, sincos])
    other = TorchConverter()
    other.register_torch_lowering("coreai_metal_kernels::sincos.default")(lambda v, n, loc: None)
    with pytest.raises(ValueError, match="already registered"):
        other.register_custom_kernels([sincos])
    with pytest.raises(ValueError, match="already registered"):
        converter.register_torch_lowering("coreai_metal_kernels::vector_add.default")


def test_user_lowering_with_apple_signature() -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.ops.converter_api_test.scaled_add(x, y, 0.5)

    x, y = _inputs()
    converter = TorchConverter().add_exported_program(torch.export.export(Model(), (x, y)))

    @converter.register_torch_lowering("converter_api_test::scaled_add.default")
    def lower(values_map, node, loc):
        a, b = values_map[node.args[0].name], values_map[node.args[1].name]
        scale = coreai.constant(np.float32(node.args[2]))
        return coreai.broadcasting_add(a, coreai.broadcasting_mul(b, scale, loc=loc), loc=loc)

    program = converter.to_coreai()
    assert "converter_api_test" not in str(program)
    out = run_program(program, {"x": x, "y": y})["scaled_add"]
    torch.testing.assert_close(out, x + 0.5 * y, rtol=1e-6, atol=1e-6)


def test_user_lowering_of_attention_reads_the_repeated_key_heads() -> None:
    # The built-in attention reads the key and value before transformers'
    # repeat_kv and leaves the repeat out; a user's lowering of the op gets
    # the repeated tensors it was called with.
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k, v = (t[:, :, None].expand(1, 2, 2, 5, 8).reshape(1, 4, 5, 8) for t in (k, v))
        return nn.functional.scaled_dot_product_attention(q, k, v)

    q, k, v = (torch.randn(1, heads, 5, 8) for heads in (4, 2, 2))
    converter = TorchConverter().add_exported_program(
        torch.export.export(Lambda(attention), (q, k, v))
    )

    @converter.register_torch_lowering("aten::scaled_dot_product_attention", allow_override=True)
    def repeated_value(values_map, node, loc):
        return values_map[node.args[2].name]

    out = run_program(converter.to_coreai(), {"args_0": q, "args_1": k, "args_2": v})
    torch.testing.assert_close(
        next(iter(out.values())), v.repeat_interleave(2, dim=1), rtol=0, atol=0
    )


def test_builtin_lowering_needs_allow_override() -> None:
    converter = TorchConverter()
    with pytest.raises(ValueError, match="already registered"):
        converter.register_torch_lowering("aten::relu.default")
    with pytest.raises(ValueError, match="namespace::op"):
        converter.register_torch_lowering("relu")

    @converter.register_torch_lowering("aten::relu.default", allow_override=True)
    def clamp_at_one(values_map, node, loc):
        x = values_map[node.args[0].name]
        return coreai.broadcasting_minimum(x, coreai.constant(np.float32(1.0)))

    x = torch.tensor([[-2.0, 0.5, 3.0]])
    converter.add_exported_program(torch.export.export(Lambda(torch.relu), (x,)))
    out = run_program(converter.to_coreai(), {"args_0": x})["relu"]
    torch.testing.assert_close(out, torch.tensor([[-2.0, 0.5, 1.0]]))


def test_unsupported_ops_are_listed_with_source_lines() -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = torch.ops.converter_api_test.mystery(x)
            b = torch.ops.converter_api_test.mystery(a)
            return torch.ops.converter_api_test.scaled_add(a, b, 1.0)

    converter = TorchConverter().add_exported_program(
        torch.export.export(Model(), (torch.rand(2),))
    )
    with pytest.raises(UnsupportedOpsError) as info:
        converter.to_coreai()
    message = str(info.value)
    assert "converter_api_test::mystery" in message
    assert "converter_api_test::scaled_add" in message
    assert "test_api.py" in message and "torch.ops.converter_api_test.mystery(a)" in message
    assert "register_torch_lowering" in message
    assert isinstance(info.value, ValueError)


def test_ops_carry_the_users_source_lines() -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.sin(x)
            return torch.cos(y) * 2

    program = TorchConverter().add_exported_program(torch.export.export(Model(), (torch.rand(3),)))
    module = program.to_coreai()._module._mlir_module
    source = inspect.getsourcelines(Model.forward)
    sin_line = source[1] + 1
    ops = {op.name: op for op in module.body.operations[0].regions[0].blocks[0].operations}
    with module.context:
        for name, line in (("coreai.sin", sin_line), ("coreai.cos", sin_line + 1)):
            # What Core AI's authoring facade builds for that line (the rewrite
            # passes then add an op id to each location).
            expected = DebugInfo.file(__file__, line).with_scope(
                CompileUnitScope(file=FileInfo(__file__))
            )
            with expected.activate():
                spelled = str(Location.current)
            assert spelled.startswith(f'#debuginfo.location<loc("{__file__}":{line}:0) in ')
            assert str(ops[name].location).startswith(spelled[:-1] + " metadata = ")


@pytest.mark.filterwarnings(_TORCH_DEEPCOPY_WARNING)
def test_get_decomp_table() -> None:
    assert coreai_torch.get_decomp_table is get_decomp_table
    first, second = get_decomp_table(), get_decomp_table()
    assert first is not second
    assert torch.ops.aten.silu.default not in first
    first.clear()
    assert get_decomp_table()
    x = torch.randn(3, 4)
    program = torch.export.export(Lambda(torch.nn.functional.silu), (x,))
    decomposed = program.run_decompositions(get_decomp_table())
    ops = {n.target for n in decomposed.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.silu.default in ops
    out = run_program(TorchConverter().add_exported_program(decomposed).to_coreai(), {"args_0": x})
    # coreai.silu vs torch: exp-based, a few ulp.
    torch.testing.assert_close(out["silu"], torch.nn.functional.silu(x), rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings(_TORCH_DEEPCOPY_WARNING)
def test_add_pytorch_module() -> None:
    x, y = _inputs()
    program = (
        TorchConverter()
        .add_pytorch_module(
            Small(),
            export_fn=lambda m: torch.export.export(m, (x, y)).run_decompositions(
                get_decomp_table()
            ),
            output_names=["p", "q"],
            entrypoint_name="small",
        )
        .to_coreai()
    )
    out = run_program(program, {"x": x, "y": y}, "small")
    torch.testing.assert_close(out["q"], x - y, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="export"):
        TorchConverter().add_pytorch_module(Small(), export_fn=lambda m: 1 / 0)


def test_cond_runs_both_branches() -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (x,))

    x = torch.ones(3)
    program = TorchConverter().add_exported_program(torch.export.export(Model(), (x,))).to_coreai()
    assert "coreai.if" in str(program)
    for value in (x, -x):
        out = run_program(program, {"x": value})
        torch.testing.assert_close(next(iter(out.values())), Model()(value))


def test_a_conversion_leaves_no_reference_cycle() -> None:
    # A converted program's IR, and Core AI's context with the model's weights,
    # must go when the program does, not at a later garbage collection: the
    # lowering leaves nothing that refers to itself (a torch.cond lowers its
    # branches through the context).
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.linear(x)
            return torch.cond(y.sum() > 0, lambda v: v * 2, lambda v: v - 1, (y,))

    exported = torch.export.export(Model(), (torch.ones(2, 4),))
    gc.collect()
    gc.disable()
    try:
        program = TorchConverter().add_exported_program(exported).to_coreai()
        assert "coreai.if" in str(program)
        del program
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_register_torch_lowering_takes_apples_parameter_names() -> None:
    # Apple's signature: register_torch_lowering(qualified_name, allow_override=False).
    converter = TorchConverter()

    def double(values_map, node, loc):
        x = values_map[node.args[0].name]
        return coreai.broadcasting_mul(x, coreai.constant(np.float32(2.0)))

    converter.register_torch_lowering(
        qualified_name="converter_api_test::mystery.default", allow_override=False
    )(double)
    with pytest.raises(ValueError, match="already registered"):
        converter.register_torch_lowering(qualified_name="converter_api_test::mystery.default")
    converter.register_torch_lowering("converter_api_test::mystery.default", True)(double)
    x = torch.tensor([1.0, -3.0])
    program = torch.export.export(Lambda(torch.ops.converter_api_test.mystery), (x,))
    out = run_program(converter.add_exported_program(program).to_coreai(), {"args_0": x})
    torch.testing.assert_close(out["mystery"], 2 * x, rtol=0, atol=0)
