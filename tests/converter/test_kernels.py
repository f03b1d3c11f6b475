"""Kernel calls as coreai.metal4_kernel operations.

Core AI's runtime cannot execute metal4_kernel on Linux, so these programs are
checked structurally (op counts, names, source text, types) and must verify
and save as .aimodel assets.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from support.coreai_run import run_program
from torch import nn
from torch.export import Dim

from coreai_torch import MetalCompileError, MetalParameter, TorchMetalKernel
from coreai_torch.contract import ScalarArg, Specialization, TensorArg, render_coreai_source
from coreai_torch.converter import TorchConverter
from coreai_torch.converter.decomp import decompose
from coreai_torch.examples import AddModel, SinCosModel, custom_add, sincos

ID = [MetalParameter("id", "uint", "thread_position_in_grid")]


def _scale(x: torch.Tensor, factor: float, times: int, negate: bool) -> torch.Tensor:
    return x * factor * times * (-1 if negate else 1)


scale = TorchMetalKernel(
    "converter_scale",
    ["x", "factor", "times", "negate"],
    ["output"],
    src="output[id] = x[id] * factor * times * (negate ? -1.0f : 1.0f);",
    torch_defn=_scale,
    metal_params=ID,
)


def _index_double(i: torch.Tensor) -> torch.Tensor:
    return i * 2


index_double = TorchMetalKernel(
    "converter_index_double",
    ["i"],
    ["output"],
    src="output[id] = i[id] * 2;",
    torch_defn=_index_double,
    metal_params=ID,
)


def _split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + 1, x - 1


split_pair = TorchMetalKernel(
    "converter_split_pair",
    ["x"],
    ["plus", "minus"],
    src="plus[id] = x[id] + 1; minus[id] = x[id] - 1;",
    torch_defn=_split,
    metal_params=ID,
)


def _call(kernel: TorchMetalKernel, *args, shapes):
    n = args[0].shape[0]
    return kernel(
        *args,
        threads_per_grid=(n, 1, 1),
        threads_per_thread_group=(1, 1, 1),
        result_shapes=shapes,
    )


def _convert(module: nn.Module, args, kernels, dynamic_shapes=None) -> str:
    program = torch.export.export(module, tuple(args), dynamic_shapes=dynamic_shapes)
    converted = TorchConverter().register_custom_kernels(kernels).add_exported_program(program)
    return str(converted.to_coreai())


def _kernel_ops(text: str) -> list[str]:
    return [line for line in text.splitlines() if "coreai.metal4_kernel" in line]


def _kernel_names(text: str) -> list[str]:
    return re.findall(r'kernel_name = "([^"]+)"', text)


def test_vector_add_is_one_metal4_kernel_with_copies(tmp_path: Path) -> None:
    x = torch.rand(8)
    program = torch.export.export(AddModel(), (x, torch.rand(8)))
    converted = TorchConverter().register_custom_kernels([custom_add]).add_exported_program(program)
    coreai_program = converted.to_coreai()
    text = str(coreai_program)
    assert len(_kernel_ops(text)) == 1
    assert text.count("coreaix.copy_with_constraints") == 2
    assert text.count("coreaix.copy_discarding_constraints") == 1
    spec = Specialization(
        (TensorArg("x", 1, torch.float32), TensorArg("y", 1, torch.float32)),
        (TensorArg("output", 1, torch.float32),),
    )
    entry, _ = render_coreai_source(custom_add.definition, spec)
    assert _kernel_names(text) == [entry]
    assert "tensor_handle> x [[buffer(0)]]" in text
    assert "threads_per_grid %" in _kernel_ops(text)[0]
    assert "tensor<3xui32>, tensor<3xui32>, tensor<1xui32>) -> tensor<8xf32" in text
    asset = coreai_program.save_asset(tmp_path / "add.aimodel")
    assert (tmp_path / "add.aimodel").is_dir() and asset is not None


class ScaleModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = _call(scale, x, 0.5, 3, True, shapes=[list(x.shape)])
        b = _call(scale, x, 0.5, 3, True, shapes=[list(x.shape)])
        c = _call(scale, x, 2.0, 1, False, shapes=[list(x.shape)])
        return a + b + c


def test_scalars_are_baked_and_equal_specializations_share_a_source() -> None:
    text = _convert(ScaleModel(), [torch.rand(4)], [scale])
    names = _kernel_names(text)
    assert len(_kernel_ops(text)) == 3
    # Two calls with the same values share one source; the third differs.
    assert names[0] == names[1] != names[2]
    assert "float factor = 0.5f;" in text and "int times = 3;" in text
    assert "bool negate = true;" in text and "bool negate = false;" in text
    # bool travels as ui8 (the verifier rejects i1); the source keeps `bool`.
    assert "constant bool& negate" in text
    assert "tensor<ui8>" in text and "tensor<si32>" in text
    spec = Specialization(
        (
            TensorArg("x", 1, torch.float32),
            ScalarArg("factor", float),
            ScalarArg("times", int),
            ScalarArg("negate", bool),
        ),
        (TensorArg("output", 1, torch.float32),),
    )
    entry, _ = render_coreai_source(
        scale.definition, spec, scalar_values={"factor": 2.0, "times": 1, "negate": False}
    )
    assert names[2] == entry


class PairModel(nn.Module):
    def forward(self, x: torch.Tensor):
        plus, minus = _call(split_pair, x, shapes=[list(x.shape), list(x.shape)])
        sin, cos = _call(sincos, x, shapes=[list(x.shape), list(x.shape)])
        return plus * minus, sin + cos


def test_several_kernels_and_tuple_and_list_results() -> None:
    text = _convert(PairModel(), [torch.rand(6)], [split_pair, sincos])
    assert len(_kernel_ops(text)) == 2
    assert text.count("coreaix.copy_discarding_constraints") == 4
    assert any(name.startswith("converter_split_pair_") for name in _kernel_names(text))
    assert any(name.startswith("sincos_") for name in _kernel_names(text))


def test_dynamic_grid_and_result_shape_are_computed() -> None:
    n = Dim("n", min=2, max=1024)
    text = _convert(AddModel(), [torch.rand(8), torch.rand(8)], [custom_add], ({0: n}, {0: n}))
    kernel = _kernel_ops(text)[0]
    assert "tensor<?xf32>" in text
    assert "coreai.get_shape" in text
    # The grid is not a constant: it is concatenated from the input's size.
    grid = re.search(r"threads_per_grid (%\d+)", kernel).group(1)
    assert re.search(rf"{grid} = coreai.cast", text), text


def test_int64_tensors_reach_the_kernel_as_int32() -> None:
    # metal4_kernel takes no 64-bit element types: the whole program, kernel
    # included, computes int64 tensors as int32.
    class Model(nn.Module):
        def forward(self, i: torch.Tensor) -> torch.Tensor:
            return _call(index_double, i, shapes=[list(i.shape)])

    text = _convert(Model(), [torch.arange(5)], [index_double])
    assert "(%arg0: tensor<5xsi32>" in text
    assert "tensor<device int, metal::dextents<int, 1>, tensor_handle> i" in text
    assert "si64" not in text and "int64_t" not in text


class CondModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def double(v: torch.Tensor) -> torch.Tensor:
            return _call(custom_add, v, v, shapes=[list(v.shape)])

        def shifted(v: torch.Tensor) -> torch.Tensor:
            return _call(split_pair, v, shapes=[list(v.shape), list(v.shape)])[0]

        return torch.cond(x.sum() > 0, double, shifted, (x,))


def test_kernels_inside_cond_branches() -> None:
    text = _convert(CondModel(), [torch.rand(4)], [custom_add, split_pair])
    assert "coreai.if" in text
    assert len(_kernel_ops(text)) == 2


def test_kernel_without_registration_names_it() -> None:
    program = torch.export.export(SinCosModel(), (torch.rand(4),))
    with pytest.raises(ValueError, match="'sincos'.*register_custom_kernels"):
        TorchConverter().add_exported_program(program).to_coreai()


def test_kernel_registered_after_the_program_is_added() -> None:
    program = torch.export.export(SinCosModel(), (torch.rand(4),))
    converter = TorchConverter().add_exported_program(program)
    converter.register_custom_kernels([sincos])
    assert len(_kernel_ops(str(converter.to_coreai()))) == 1


def test_symbolic_scalar_is_refused_with_the_kernel_and_argument() -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _call(scale, x, 1.0, x.shape[0], False, shapes=[list(x.shape)])

    program = torch.export.export(Model(), (torch.rand(4),), dynamic_shapes=({0: Dim("n")},))
    converter = TorchConverter().register_custom_kernels([scale]).add_exported_program(program)
    with pytest.raises(ValueError, match="'converter_scale'.*'times'"):
        converter.to_coreai()


class UnusedCallsModel(nn.Module):
    """A kernel call whose only result is unused, and a two-result call of which one is."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _call(custom_add, x, x, shapes=[list(x.shape)])
        plus, _minus = _call(split_pair, x, shapes=[list(x.shape), list(x.shape)])
        _sin, _cos = _call(sincos, x, shapes=[list(x.shape), list(x.shape)])
        return plus * 3


def test_kernel_calls_with_unused_results_are_dropped() -> None:
    x = torch.rand(5)
    raw = torch.export.export(UnusedCallsModel(), (x,))
    called = {str(n.target) for n in raw.graph.nodes if n.op == "call_function"}
    # The raw export keeps the unused calls; decomposition removes them itself.
    kernels = "coreai_metal_kernels"
    assert {f"{kernels}.vector_add.default", f"{kernels}.sincos.default"} <= called
    decomposed = decompose(raw)
    for program in (raw, decomposed):
        converter = TorchConverter().register_custom_kernels([custom_add, split_pair, sincos])
        text = str(converter.add_exported_program(program).to_coreai())
        assert [name.split("_")[1] for name in _kernel_names(text)] == ["split"], text
        assert text.count("coreaix.copy_with_constraints") == 1


class OnlyUnusedModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _call(custom_add, x, x, shapes=[list(x.shape)])
        return x - 1


def test_program_whose_kernel_call_is_unused_runs_without_it() -> None:
    # With the call gone the program has no metal4_kernel, so the Linux runtime
    # can run it: the result is the model's.
    x = torch.linspace(-1, 1, 6)
    raw = torch.export.export(OnlyUnusedModel(), (x,))
    for program in (raw, decompose(raw)):
        converted = (
            TorchConverter()
            .register_custom_kernels([custom_add])
            .add_exported_program(program, input_names=["x"], output_names=["y"])
            .to_coreai()
        )
        assert "metal4_kernel" not in str(converted)
        # x - 1 in float32 on both sides: exact.
        torch.testing.assert_close(run_program(converted, {"x": x})["y"], x - 1, rtol=0, atol=0)


def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


# `double`, which the Metal compiler refuses: exporting runs only torch_defn.
non_metal = TorchMetalKernel(
    "converter_non_metal",
    ["x"],
    ["output"],
    src="double d = x[id];\noutput[id] = float(2 * d);",
    torch_defn=_twice,
    metal_params=ID,
)


class NonMetalModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _call(non_metal, x, shapes=[list(x.shape)])


def test_a_kernel_metal_refuses_is_not_written_into_an_asset(monkeypatch) -> None:
    refused = (
        r"(?s)kernel 'converter_non_metal' uses what the Metal compiler refuses.*not written "
        r"into a Core AI asset \(set COREAI_TORCH_METAL_FIDELITY=0 to convert it anyway\).*"
        r"src:1:1: error: 'double': Metal has no double-precision type"
    )
    with pytest.raises(MetalCompileError, match=refused):
        _convert(NonMetalModel(), [torch.rand(4)], [non_metal])
    monkeypatch.setenv("COREAI_TORCH_METAL_FIDELITY", "0")
    text = _convert(NonMetalModel(), [torch.rand(4)], [non_metal])
    assert len(_kernel_ops(text)) == 1
    assert "double d = x[id];" in text
