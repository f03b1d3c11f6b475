"""Training through kernels: the demo's transformer block against PyTorch's
RMSNorm, compiled training steps (fullgraph=True), exported training graphs,
and conversion of a model exported while it trains."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._dynamo.backends.common import aot_autograd

from coreai_torch import MetalParameter, TorchMetalKernel
from coreai_torch.demo import RMSNorm, TransformerBlock, compare_training, train_twins
from coreai_torch.examples import rms_norm

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_the_demo_block_trains_like_the_block_with_torch_rms_norm(device):
    # Loss curve and every step's gradients, within the demo's stated bounds
    # (coreai_torch.demo: LOSS_RTOL, GRAD_RTOL, GRAD_ATOL).
    kernel_run, torch_run = train_twins(rms_norm, steps=4, device=device)
    assert kernel_run.losses[-1] < kernel_run.losses[0]  # it does learn
    compare_training(kernel_run, torch_run)


class GraphCapture:
    """An AOTAutograd backend that keeps the forward and backward graphs it compiles."""

    def __init__(self) -> None:
        self.forward: list[torch.fx.GraphModule] = []
        self.backward: list[torch.fx.GraphModule] = []
        self.backend = aot_autograd(
            fw_compiler=self._keep(self.forward), bw_compiler=self._keep(self.backward)
        )

    @staticmethod
    def _keep(into: list):
        def compiler(gm: torch.fx.GraphModule, _example_inputs):
            into.append(gm)
            return gm.forward

        return compiler


def targets(graphs: list[torch.fx.GraphModule]) -> list[str]:
    return [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]


def grads_of(model: nn.Module, x: torch.Tensor, forward=None) -> dict[str, torch.Tensor]:
    model.zero_grad()
    (model if forward is None else forward)(x).pow(2).mean().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_a_compiled_block_differentiates_torch_defn_in_its_backward_graph():
    torch.manual_seed(0)
    block = TransformerBlock(dim=32, kernel=rms_norm)
    x = torch.randn(2, 8, 32)
    capture = GraphCapture()
    compiled = torch.compile(block, fullgraph=True, backend=capture.backend)
    got = grads_of(block, x, compiled)
    want = grads_of(block, x)
    for name in want:
        # The same kernel and the same recomputed torch_defn, eager or compiled.
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-7)
    assert targets(capture.forward).count("coreai_metal_kernels.rms_norm.default") == 2
    backward = targets(capture.backward)
    assert "coreai_metal_kernels.rms_norm.default" not in backward
    assert backward.count("aten.rsqrt.default") == 2  # torch_defn, once per norm


def test_a_compiled_training_step_with_fullgraph():
    # The whole step in one graph: forward, gradients and the SGD update.
    torch.manual_seed(0)
    block = TransformerBlock(dim=32, kernel=rms_norm)
    twin = TransformerBlock(dim=32, kernel=None)
    twin.load_state_dict(block.state_dict())
    x, target = torch.randn(2, 8, 32), torch.randn(2, 8, 32)

    def make_step(model: nn.Module):
        params = list(model.parameters())

        def step(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            loss = nn.functional.mse_loss(model(x), target)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(0.1 * g)
            return loss.detach()

        return step

    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(make_step(block), fullgraph=True)
        losses = [compiled(x, target).item() for _ in range(3)]
    eager = make_step(twin)
    want = [eager(x, target).item() for _ in range(3)]
    assert losses[-1] < losses[0]
    # Against PyTorch's RMSNorm, eager: float32 sums in other orders (kernel,
    # inductor's fused code), a few ulps per step.
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(want), rtol=1e-5, atol=0)
    for p, q in zip(block.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


ID = [MetalParameter("id", "uint", "thread_position_in_grid")]


def cube(x: torch.Tensor) -> torch.Tensor:
    return x * x * x


def cube_grad_ref(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return 3 * g * x * x


cube_kernel = TorchMetalKernel("tr_cube", ["x"], ["out"], "out[id] = x[id] * x[id] * x[id];",
                               cube, metal_params=ID)  # fmt: skip
cube_grad = TorchMetalKernel("tr_cube_grad", ["g", "x"], ["dx"],
                             "dx[id] = 3.0f * g[id] * x[id] * x[id];", cube_grad_ref,
                             metal_params=ID)  # fmt: skip


def _cube_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _cube_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    n = x.shape[0]
    return cube_grad(
        grad, x, threads_per_grid=(n, 1, 1), threads_per_thread_group=(32, 1, 1),
        result_shapes=[[n]],
    )  # fmt: skip


cube_kernel.register_autograd(_cube_backward, setup_context=_cube_setup)


def test_a_backward_kernel_is_in_the_compiled_backward_graph():
    def f(x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        return cube_kernel(
            x, threads_per_grid=(n, 1, 1), threads_per_thread_group=(32, 1, 1),
            result_shapes=[[n]],
        ).sum()  # fmt: skip

    capture = GraphCapture()
    compiled = torch.compile(f, fullgraph=True, backend=capture.backend)
    x = torch.randn(20, requires_grad=True)
    (grad,) = torch.autograd.grad(compiled(x), x)
    torch.testing.assert_close(grad, 3 * x.detach() ** 2)
    assert "coreai_metal_kernels.tr_cube.default" in targets(capture.forward)
    assert targets(capture.backward).count("coreai_metal_kernels.tr_cube_grad.default") == 1


class NormMLP(nn.Module):
    """Linear, RMSNorm (the kernel), Linear, and a loss: a training graph to export."""

    def __init__(self, kernel: TorchMetalKernel | None) -> None:
        super().__init__()
        self.inp, self.norm, self.out = nn.Linear(16, 32), RMSNorm(32, kernel), nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.out(self.norm(self.inp(x))).pow(2).mean(),)


def test_an_exported_training_graph_computes_the_gradients():
    from torch.export.experimental import _export_forward_backward

    torch.manual_seed(0)
    model = NormMLP(rms_norm)
    x = torch.randn(6, 16)
    joint = _export_forward_backward(torch.export.export(model, (x,)))
    signature = joint.graph_signature
    params = [
        joint.state_dict[s.target] for s in signature.input_specs if s.kind.name == "PARAMETER"
    ]
    loss, *grads = joint.graph_module(*params, x)
    names = [s.target for s in signature.output_specs if s.kind.name == "GRADIENT_TO_PARAMETER"]
    nodes = targets([joint.graph_module])
    assert nodes.count("coreai_metal_kernels.rms_norm.default") == 1  # the forward
    assert "aten.rsqrt.default" in nodes  # torch_defn, differentiated

    twin = NormMLP(None)
    twin.load_state_dict(model.state_dict())
    (want_loss,) = twin(x)
    want_loss.backward()
    torch.testing.assert_close(loss, want_loss.detach(), rtol=1e-6, atol=0)
    want = dict(twin.named_parameters())
    assert sorted(names) == sorted(want)
    for name, grad in zip(names, grads):
        torch.testing.assert_close(grad, want[name].grad, rtol=1e-5, atol=1e-7, msg=name)


def test_the_converter_takes_a_model_exported_while_it_trains():
    # Parameters that require grad, grad mode on: the export holds the kernel
    # op as before, and the converter lowers it to coreai.metal4_kernel.
    from coreai_torch import TorchConverter

    model = NormMLP(rms_norm).train()
    x = torch.randn(6, 16)
    exported = torch.export.export(model, (x,))
    program = (
        TorchConverter()
        .register_custom_kernels([rms_norm])
        .add_exported_program(exported, input_names=["x"], output_names=["loss"])
        .to_coreai()
    )
    assert str(program).count("coreai.metal4_kernel") == 1
