"""``python -m coreai_torch demo``: the whole flow on the documented seed kernels.

1. Runs each seed kernel's Metal source eagerly on the CPU backend and, when
   torch sees a CUDA GPU or an Apple GPU that runs Metal 4 kernels, on the CUDA
   or MPS backend, and compares it with its ``torch_defn``; runs a transformer
   block whose RMSNorm is a kernel on each.
2. Trains that block for a few steps (the kernel runs forward, gradients come
   from its ``torch_defn``) next to the same block with PyTorch's RMSNorm, and
   compares their loss curves and gradients; on each GPU too.
3. Exports a model that calls a kernel with ``torch.export``.
4. Converts it with ``TorchConverter`` into a Core AI program holding a
   ``coreai.metal4_kernel`` and saves it as an ``.aimodel`` asset.
5. Does the same for the transformer block, and runs the kernel-free version
   of that block in Core AI's CPU runtime. Steps 3 to 5 need coreai-core.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import examples
from .examples import AddModel, torch_rms_norm, torch_sincos
from .kernel import TorchMetalKernel


def make_kernels() -> dict[str, TorchMetalKernel]:
    """The seed kernels (:mod:`coreai_torch.examples`) by kernel name."""
    kernels = (examples.custom_add, examples.sincos, examples.custom_matmul, examples.rms_norm)
    return {k.name: k for k in kernels}


# ------------------------------------------------------------------ models


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension, through the kernel or PyTorch's ``F.rms_norm``."""

    def __init__(self, dim: int, kernel: TorchMetalKernel | None, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.kernel, self.eps = kernel, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is None:
            return nn.functional.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        rows = x.reshape(-1, x.shape[-1])
        out = self.kernel(
            rows,
            self.weight,
            self.eps,
            threads_per_grid=(32 * rows.shape[0], 1, 1),
            threads_per_thread_group=(32, 1, 1),
            result_shapes=[list(rows.shape)],
        )
        return out.reshape(x.shape)


class TransformerBlock(nn.Module):
    """Pre-norm attention + MLP block, small enough for the demo."""

    def __init__(self, dim: int = 64, heads: int = 4, kernel: TorchMetalKernel | None = None):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(dim, kernel), RMSNorm(dim, kernel)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.silu(self.up(self.norm2(x))))


# ---------------------------------------------------------------- training

# The two blocks differ only in how RMSNorm sums its squares: the kernel's
# simd_sum over 32 lanes and torch's mean add in another order, a few float32
# ulps (~1e-7 relative) per row. Through the block and a few SGD steps that
# stays well below these bounds (measured: ~1e-7 on losses, ~1e-6 on gradients).
LOSS_RTOL = 1e-5
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6


@dataclass
class TrainingRun:
    """One block's training: the loss and the parameters' gradients at each step."""

    losses: list[float]
    gradients: list[dict[str, torch.Tensor]]


def train_twins(
    kernel: TorchMetalKernel, *, steps: int = 6, device: str = "cpu", seed: int = 0
) -> tuple[TrainingRun, TrainingRun]:
    """Trains a block whose RMSNorm is ``kernel`` and its twin with PyTorch's RMSNorm.

    Both start from the same weights and fit the same batch (SGD with
    momentum, mean squared error to fixed random targets); returns
    (kernel run, twin run).
    """
    torch.manual_seed(seed)
    block = TransformerBlock(kernel=kernel).to(device)
    twin = TransformerBlock(kernel=None).to(device)
    twin.load_state_dict(block.state_dict())
    generator = torch.Generator().manual_seed(seed)
    x, target = (torch.randn(4, 8, 64, generator=generator).to(device) for _ in range(2))
    return _train(block, x, target, steps), _train(twin, x, target, steps)


def _train(block: nn.Module, x: torch.Tensor, target: torch.Tensor, steps: int) -> TrainingRun:
    optimizer = torch.optim.SGD(block.parameters(), lr=0.05, momentum=0.9)
    losses, gradients = [], []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(block(x), target)
        loss.backward()
        gradients.append({n: p.grad.detach().cpu().clone() for n, p in block.named_parameters()})
        optimizer.step()
        losses.append(loss.item())
    return TrainingRun(losses, gradients)


def compare_training(kernel_run: TrainingRun, torch_run: TrainingRun) -> tuple[float, float]:
    """Checks two runs agree within LOSS_RTOL and GRAD_RTOL/GRAD_ATOL at every step;
    returns the largest relative loss difference and the largest gradient difference."""
    losses = torch.tensor(kernel_run.losses), torch.tensor(torch_run.losses)
    torch.testing.assert_close(*losses, rtol=LOSS_RTOL, atol=0)
    grad_err = 0.0
    for step, (got, want) in enumerate(zip(kernel_run.gradients, torch_run.gradients)):
        for name, grad in got.items():
            torch.testing.assert_close(
                grad, want[name], rtol=GRAD_RTOL, atol=GRAD_ATOL, msg=f"step {step}: {name}"
            )
            grad_err = max(grad_err, (grad - want[name]).abs().max().item())
    loss_err = ((losses[0] - losses[1]).abs() / losses[1].abs()).max().item()
    return loss_err, grad_err


# -------------------------------------------------------------------- demo


def _step(title: str) -> None:
    print(f"\n== {title}")


def _compare(label: str, got: object, want: object, *, rtol: float, atol: float) -> float:
    gots = got if isinstance(got, (list, tuple)) else [got]
    wants = want if isinstance(want, (list, tuple)) else [want]
    err = max((g.float() - w.float()).abs().max().item() for g, w in zip(gots, wants))
    for g, w in zip(gots, wants):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol)
    print(f"   {label:<44} max |kernel - torch_defn| = {err:.3g}")
    return err


def _timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


_BACKENDS = {
    "cpu": "the CPU backend (the Metal source compiled as C++)",
    "cuda": "the CUDA backend (the Metal source compiled for the GPU)",
    "mps": "the MPS backend (the Metal source on the Apple GPU, in PyTorch's MPS stream)",
}


def mps_unavailable() -> str:
    """Why Metal 4 kernels cannot run on the MPS device in this process; empty when they can."""
    if not torch.backends.mps.is_available():
        return "torch sees no MPS device"
    # The op exists in macOS builds only; it names what is missing, if anything.
    why_not = getattr(torch.ops.coreai_torch, "mps_unavailable_reason", None)
    return why_not() if why_not is not None else "this build of coreai_torch has no MPS backend"


def devices() -> list[str]:
    """The devices the demo runs kernels on: the CPU, and each GPU whose backend can run here."""
    found = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if torch.backends.mps.is_available():
        reason = mps_unavailable()
        if reason:
            print(f"MPS skipped: {reason}")
        else:
            found.append("mps")
    return found


def _synchronized(fn: Callable[[], object], device: str) -> Callable[[], object]:
    def run() -> object:
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        elif device == "mps":
            torch.mps.synchronize()
        return out

    return run


def run_kernels(kernels: dict[str, TorchMetalKernel], device: str = "cpu") -> None:
    """Runs every seed kernel on ``device`` ("cpu", "cuda" or "mps") against its torch_defn."""
    _step(f"Eager on {device}: each kernel's Metal source runs on {_BACKENDS[device]}")
    torch.manual_seed(0)
    x, y = torch.randn(16, device=device), torch.randn(16, device=device)
    call = {"threads_per_grid": (16, 1, 1), "threads_per_thread_group": (1, 1, 1)}
    add = _synchronized(lambda: kernels["vector_add"](x, y, **call, result_shapes=[[16]]), device)
    out, secs = _timed(add)
    print(f"   vector_add: first call {secs * 1e3:.0f} ms (compiles the Metal source)")
    _, secs = _timed(add)
    print(f"   vector_add: second call {secs * 1e6:.0f} us (cached)")
    _compare("vector_add, float32[16]", out, x + y, rtol=0, atol=0)

    out = kernels["sincos"](x, **call, result_shapes=[[16], [16]])
    _compare("sincos, float32[16], two results", out, torch_sincos(x), rtol=1e-5, atol=1e-6)

    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 1e-2)):
        a = torch.randn(24, 16, dtype=dtype, device=device)
        b = torch.randn(16, 20, dtype=dtype, device=device)
        out = kernels["matmul"](
            a,
            b,
            threads_per_grid=(20, 24, 1),
            threads_per_thread_group=(8, 8, 1),
            result_shapes=[[24, 20]],
        )
        want = (a.float() @ b.float()).to(dtype)
        _compare(f"matmul (template_dtypes), {dtype}", out, want, rtol=tol, atol=tol)

    rows, weight = torch.randn(6, 100, device=device), torch.randn(100, device=device)
    out = kernels["rms_norm"](
        rows,
        weight,
        1e-6,
        threads_per_grid=(32 * 6, 1, 1),
        threads_per_thread_group=(32, 1, 1),
        result_shapes=[[6, 100]],
    )
    want = torch_rms_norm(rows, weight, 1e-6)
    _compare("rms_norm (simd_sum), float32[6, 100]", out, want, rtol=1e-5, atol=1e-5)


def run_block(kernels: dict[str, TorchMetalKernel], device: str = "cpu") -> None:
    """A transformer block whose RMSNorm is the kernel, against the same block in ATen ops."""
    torch.manual_seed(0)
    block = TransformerBlock(kernel=kernels["rms_norm"]).eval().to(device)
    reference = TransformerBlock(kernel=None).eval().to(device)
    reference.load_state_dict(block.state_dict())
    x = torch.randn(2, 8, 64, device=device)
    with torch.no_grad():
        _compare(
            f"block on {device}: RMSNorm kernel vs torch RMSNorm",
            block(x),
            reference(x),
            rtol=1e-4,
            atol=1e-4,
        )


def run_conversion(kernels: dict[str, TorchMetalKernel], out_dir: Path) -> None:
    from .converter import TorchConverter
    from .runtime import run_program

    _step("Export the seed AddModel")
    model = AddModel().eval()
    example = (torch.randn(16), torch.randn(16))
    exported = torch.export.export(model, example)
    nodes = [n for n in exported.graph.nodes if n.op == "call_function"]
    print(f"   graph: {', '.join(str(n.target) for n in nodes)}")

    _step("Convert AddModel to Core AI")
    converter = TorchConverter().register_custom_kernels([kernels["vector_add"]])
    converter.add_exported_program(exported, input_names=["x", "y"], output_names=["result"])
    program = converter.to_coreai()
    text = str(program)
    print(f"   coreai.metal4_kernel operations: {text.count('coreai.metal4_kernel')}")
    path = out_dir / "add_model.aimodel"
    program.save_asset(path)
    print(f"   saved {path}")

    _step("Convert a transformer block whose RMSNorm is a Metal kernel")
    torch.manual_seed(0)
    block = TransformerBlock(kernel=kernels["rms_norm"]).eval()
    reference = TransformerBlock(kernel=None).eval()
    reference.load_state_dict(block.state_dict())
    x = torch.randn(2, 8, 64)
    with torch.no_grad():
        exported = torch.export.export(block, (x,))
        converter = TorchConverter().register_custom_kernels([kernels["rms_norm"]])
        converter.add_exported_program(exported, input_names=["x"], output_names=["y"])
        program = converter.to_coreai()
        print(f"   converted: {str(program).count('coreai.metal4_kernel')} metal4_kernel ops")
        path = out_dir / "transformer_block.aimodel"
        program.save_asset(path)
        print(f"   saved {path}")

        _step("The kernel-free block in Core AI's CPU runtime")
        exported = torch.export.export(reference, (x,))
        program = (
            TorchConverter()
            .add_exported_program(exported, input_names=["x"], output_names=["y"])
            .to_coreai()
        )
        path = out_dir / "transformer_block_aten.aimodel"
        program.save_asset(path)
        got = run_program(program, {"x": x})["y"]
        err = (got - reference(x)).abs().max().item()
        torch.testing.assert_close(got, reference(x), rtol=1e-4, atol=1e-4)
        print(f"   coreai.runtime vs PyTorch: max abs error {err:.3g}; saved {path}")


def run_training(kernels: dict[str, TorchMetalKernel], on: list[str]) -> None:
    _step("Train the block: the kernel runs forward, its torch_defn gives the gradients")
    for device in on:
        kernel_run, torch_run = train_twins(kernels["rms_norm"], device=device)
        print(f"   {device}: step   loss (RMSNorm kernel)   loss (torch RMSNorm)")
        for step, (a, b) in enumerate(zip(kernel_run.losses, torch_run.losses)):
            print(f"   {device}: {step:4d}   {a:20.7f}   {b:20.7f}")
        loss_err, grad_err = compare_training(kernel_run, torch_run)
        print(
            f"   {device}: max relative loss difference {loss_err:.2g} (bound {LOSS_RTOL:g}), "
            f"max gradient difference {grad_err:.2g} (bound {GRAD_ATOL:g} + {GRAD_RTOL:g}·|g|)"
        )


def main(out_dir: str | None = None) -> int:
    """Runs the demo; assets go to ``out_dir`` (a new temporary directory if None)."""
    target = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="coreai_torch_demo_"))
    target.mkdir(parents=True, exist_ok=True)
    kernels = make_kernels()
    on = devices()
    for device in on:
        run_kernels(kernels, device)
    _step("Eager: a transformer block whose RMSNorm is a Metal kernel, on " + " and ".join(on))
    for device in on:
        run_block(kernels, device)
    run_training(kernels, on)
    if importlib.util.find_spec("coreai") is None:
        print(
            "\nConversion skipped: it needs coreai-core (`pip install coreai-core`), which is "
            "not installed here. Everything above ran without it."
        )
        return 0
    run_conversion(kernels, target)
    print(f"\nDemo complete. Assets in {target}")
    return 0
