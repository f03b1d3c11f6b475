"""torch.export and torch.compile of models that call kernels."""

import pytest
import torch
from torch import nn

from coreai_torch.examples import (
    AddModel,
    MatmulModel,
    SinCosModel,
    custom_add,
    custom_matmul,
    scale_shift,
    sincos,
)


def kernel_nodes(ep: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    return [
        n
        for n in ep.graph.nodes
        if n.op == "call_function" and str(n.target).startswith("coreai_metal_kernels.")
    ]


def assert_no_lifted_constants(ep: torch.export.ExportedProgram) -> None:
    assert not ep.constants
    assert not ep.graph_signature.lifted_tensor_constants


def export(model: nn.Module, *args: torch.Tensor, **kw) -> torch.export.ExportedProgram:
    ep = torch.export.export(model, args, **kw)
    assert_no_lifted_constants(ep)
    return ep


def test_add_model_is_one_kernel_node():
    ep = export(AddModel(), torch.randn(16), torch.randn(16))
    (node,) = kernel_nodes(ep)
    assert node.target is custom_add.op
    assert node.args[2:] == ([16, 1, 1], [1, 1, 1], [16])
    assert node.meta["val"].shape == (16,) and node.meta["val"].dtype == torch.float32


def test_two_results():
    ep = export(SinCosModel(), torch.randn(8))
    (node,) = kernel_nodes(ep)
    assert node.target is sincos.op
    assert [v.shape for v in node.meta["val"]] == [(8,), (8,)]
    assert [n.target for n in ep.graph.nodes if n.op == "call_function"].count(
        torch.ops.aten.add.Tensor
    ) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matmul_with_template_dtypes(dtype):
    ep = export(MatmulModel(), torch.randn(4, 3, dtype=dtype), torch.randn(3, 5, dtype=dtype))
    (node,) = kernel_nodes(ep)
    assert node.target is custom_matmul.op
    assert node.args[2:] == ([5, 4, 1], [8, 8, 1], [4, 5])
    assert node.meta["val"].dtype == dtype


class Chained(nn.Module):
    def forward(self, x, y):
        z = torch.relu(x) * 2
        n = x.shape[0]
        call = {"threads_per_grid": (n, 1, 1), "threads_per_thread_group": (1, 1, 1)}
        a = custom_add(z, y, **call, result_shapes=[[n]])
        b = custom_add(a, y, **call, result_shapes=[[n]])
        s, c = sincos(b, **call, result_shapes=[[n], [n]])
        return torch.tanh(s + c)


def test_chained_repeated_and_two_kernels():
    ep = export(Chained(), torch.randn(8), torch.randn(8))
    targets = [n.target for n in kernel_nodes(ep)]
    assert targets == [custom_add.op, custom_add.op, sincos.op]
    ops = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert {torch.ops.aten.relu.default, torch.ops.aten.tanh.default} <= ops


class WithCond(nn.Module):
    def forward(self, x, y):
        n = x.shape[0]
        call = {"threads_per_grid": (n, 1, 1), "threads_per_thread_group": (1, 1, 1)}

        def yes(x, y):
            return custom_add(x, y, **call, result_shapes=[[n]])

        def no(x, y):
            return sincos(x, **call, result_shapes=[[n], [n]])[0]

        return torch.cond(x.sum() > 0, yes, no, (x, y))


def test_kernel_inside_cond():
    ep = export(WithCond(), torch.randn(8), torch.randn(8))
    branches = [m for name, m in ep.graph_module.named_children() if name.startswith("true")]
    branches += [m for name, m in ep.graph_module.named_children() if name.startswith("false")]
    targets = {n.target for b in branches for n in b.graph.nodes if n.op == "call_function"}
    assert custom_add.op in targets and sincos.op in targets


class Scalars(nn.Module):
    def forward(self, x):
        n = x.shape[0]
        return scale_shift(
            x,
            3,
            0.5,
            True,
            threads_per_grid=(n, 1, 1),
            threads_per_thread_group=(32, 1, 1),
            result_shapes=[[n]],
        )


def test_scalar_inputs_are_graph_constants():
    ep = export(Scalars(), torch.randn(8))
    (node,) = kernel_nodes(ep)
    assert node.args[1:4] == (3, 0.5, True)


def test_dynamic_shapes_keep_grid_and_result_shapes_symbolic():
    n = torch.export.Dim("n", min=2, max=4096)
    ep = export(AddModel(), torch.randn(16), torch.randn(16), dynamic_shapes=({0: n}, {0: n}))
    (node,) = kernel_nodes(ep)
    grid, group, shape = node.args[2:]
    assert isinstance(grid[0], torch.fx.Node) and grid[1:] == [1, 1]
    assert group == [1, 1, 1]
    assert isinstance(shape[0], torch.fx.Node) and shape[0] is grid[0]
    assert isinstance(node.meta["val"].shape[0], torch.SymInt)


def test_dynamic_matmul_exports():
    m, k = torch.export.Dim("m", min=2, max=64), torch.export.Dim("k", min=2, max=64)
    ep = export(
        MatmulModel(),
        torch.randn(4, 3),
        torch.randn(3, 5),
        dynamic_shapes=({0: m, 1: k}, {0: k}),
    )
    (node,) = kernel_nodes(ep)
    assert isinstance(node.args[2][1], torch.fx.Node)
    assert isinstance(node.args[4][0], torch.fx.Node) and node.args[4][1] == 5


def test_exported_program_runs_the_kernel():
    x, y = torch.randn(16), torch.randn(16)
    ep = export(AddModel(), x, y)
    torch.testing.assert_close(ep.module()(x, y), x + y)


def test_torch_compile_fullgraph():
    x, y = torch.randn(16), torch.randn(16)
    compiled = torch.compile(AddModel(), fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x, y), x + y)
    compiled = torch.compile(AddModel(), fullgraph=True)
    torch.testing.assert_close(compiled(x, y), x + y)
