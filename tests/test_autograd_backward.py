"""Backwards of your own: ``TorchMetalKernel.register_autograd``, backward kernels,
its errors and the redefinition rules it follows."""

from __future__ import annotations

import warnings

import pytest
import torch
from support.gradients import gradcheck_fp32
from support.kernel_testing import run_checked
from support.kernels import AXPY_SRC, axpy_kernel
from torch.autograd.gradcheck import GradcheckError

from coreai_torch import MetalParameter, TorchMetalKernel

ID = [MetalParameter("id", "uint", "thread_position_in_grid")]


def flat(n: int) -> dict:
    return {"threads_per_grid": (n, 1, 1), "threads_per_thread_group": (32, 1, 1)}


def leaf(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).requires_grad_()


def axpy_grads(g: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    return alpha * g, g * 1


# The backward kernel: both input gradients of axpy in one launch.
axpy_grad = TorchMetalKernel(
    "ub_axpy_grad", ["g", "alpha"], ["dx", "dy"],
    "dx[id] = alpha * g[id]; dy[id] = g[id];", axpy_grads, metal_params=ID,
)  # fmt: skip


def make_axpy(name: str, src: str = AXPY_SRC) -> TorchMetalKernel:
    return axpy_kernel(name, src)


def axpy_setup(ctx, inputs, output):
    _, _, alpha = inputs
    ctx.alpha = alpha


def make_axpy_backward(log: list):
    def backward(ctx, grad):
        log.append(tuple(ctx.needs_input_grad))
        dx, dy = axpy_grad(grad, ctx.alpha, **flat(grad.numel()), result_shapes=[grad.shape] * 2)
        return dx, dy, None

    return backward


def test_a_backward_kernel_runs_and_passes_gradcheck():
    kernel = make_axpy("ub_axpy")
    log: list = []
    kernel.register_autograd(make_axpy_backward(log), setup_context=axpy_setup)

    def call(x, y):
        return kernel(x, y, 1.5, **flat(8), result_shapes=[[8]])

    x, y = leaf(8, 1), leaf(8, 2)
    gradcheck_fp32(call, (x, y))
    assert log and all(needs == (True, True, False) for needs in log)

    log.clear()
    call(x, y.detach()).backward(torch.arange(8.0))
    # needs_input_grad has one entry per kernel input (x, y, alpha).
    assert log == [(True, False, False)]
    torch.testing.assert_close(x.grad, 1.5 * torch.arange(8.0))


def test_gradcheck_catches_a_wrong_backward():
    # The fp32 tolerances of gradcheck_fp32 still see a 1% error.
    kernel = make_axpy("ub_axpy_wrong")

    def backward(ctx, grad):
        return 1.01 * ctx.alpha * grad, grad, None

    kernel.register_autograd(backward, setup_context=axpy_setup)
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradcheck_fp32(
            lambda x, y: kernel(x, y, 1.5, **flat(8), result_shapes=[[8]]), (leaf(8), leaf(8, 1))
        )


def test_opcheck_with_a_registered_backward():
    # opcheck's AOT check compares the traced backward (with the backward
    # kernel in it) against the eager one.
    kernel = make_axpy("ub_axpy_opcheck")
    kernel.register_autograd(make_axpy_backward([]), setup_context=axpy_setup)
    x, y = torch.randn(8), torch.randn(8)
    out = run_checked(kernel, x, y, 1.5, **flat(8), result_shapes=[[8]])
    torch.testing.assert_close(out, 1.5 * x + y)


def test_forward_mode_still_differentiates_torch_defn():
    kernel = make_axpy("ub_axpy_jvp")
    kernel.register_autograd(lambda ctx, g: (g, g, None))  # deliberately not axpy's
    x, y = torch.randn(8), torch.randn(8)
    _, tangent = torch.func.jvp(
        lambda a: kernel(a, y, 1.5, **flat(8), result_shapes=[[8]]), (x,), (torch.ones(8),)
    )
    torch.testing.assert_close(tangent, torch.full((8,), 1.5))


def pair(x: torch.Tensor, scale: float) -> list[torch.Tensor]:
    return [x * scale, x + 1]


def test_setup_context_sees_the_inputs_and_the_output_as_the_call_does():
    kernel = TorchMetalKernel(
        "ub_pair", ["x", "scale"], ["a", "b"], "a[id] = x[id] * scale; b[id] = x[id] + 1;",
        pair, metal_params=ID,
    )  # fmt: skip
    seen = {}

    def setup_context(ctx, inputs, output):
        seen["inputs"], seen["output"] = inputs, output
        ctx.save_for_backward(inputs[0])
        ctx.scale = inputs[1]

    def backward(ctx, grad_a, grad_b):
        return grad_a * ctx.scale + grad_b, None

    kernel.register_autograd(backward, setup_context=setup_context)
    x = leaf(4)
    a, b = kernel(x, 3.0, **flat(4), result_shapes=[[4], [4]])
    assert seen["inputs"][0] is x and seen["inputs"][1] == 3.0
    assert type(seen["output"]) is list and len(seen["output"]) == 2
    (a + 2 * b).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 5.0))


def test_without_setup_context_nothing_is_saved():
    kernel = make_axpy("ub_axpy_nosetup")
    kernel.register_autograd(lambda ctx, grad: (2.5 * grad, grad, None))
    x = leaf(8)
    out = kernel(x, torch.randn(8), 2.5, **flat(8), result_shapes=[[8]])
    assert out.grad_fn.saved_tensors == ()
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((8,), 2.5))


# -------------------------------------------------------------------- errors


WRONG_RESULTS = {
    "count": (
        lambda g: (g, g),
        r"returned 2 gradient\(s\); it must return one per input \['x', 'y', 'alpha'\]",
    ),
    "scalar": (
        lambda g: (g, g, g),
        r"returned a gradient for the scalar input 'alpha'; return None",
    ),
    "shape": (
        lambda g: (g[:3], g, None),
        r"returned a gradient of shape \[3\] for input 'x' of shape \[8\]",
    ),
    "type": (
        lambda g: (g, 1.0, None),
        r"returned float as the gradient of input 'y'; expected a tensor",
    ),
}


@pytest.mark.parametrize("returned, message", WRONG_RESULTS.values(), ids=WRONG_RESULTS.keys())
def test_a_wrong_backward_result_names_kernel_and_input(returned, message):
    kernel = make_axpy("ub_axpy_bad")
    kernel.register_autograd(lambda ctx, grad: returned(grad))
    out = kernel(leaf(8), leaf(8, 1), 1.0, **flat(8), result_shapes=[[8]])
    with pytest.raises(
        RuntimeError, match=f"kernel 'ub_axpy_bad': the registered backward {message}"
    ):
        out.sum().backward()


def test_registration_checks_what_it_is_given():
    kernel = make_axpy("ub_axpy_checks")
    with pytest.raises(
        TypeError, match="kernel 'ub_axpy_checks': register_autograd's backward must be a function"
    ):
        kernel.register_autograd("backward")  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=r"backward is called as backward\(ctx, grad_out\), but .* takes \(ctx, a, b\)",
    ):
        kernel.register_autograd(lambda ctx, a, b: None)
    with pytest.raises(
        TypeError, match=r"setup_context is called as setup_context\(ctx, inputs, output\)"
    ):
        kernel.register_autograd(lambda ctx, g: None, setup_context=lambda ctx: None)
    assert kernel.backward_slot.registered is None  # nothing half-registered
    # *grads takes any number of results.
    kernel.register_autograd(lambda ctx, *grads: (grads[0], grads[0], None))


# -------------------------------------------------------------- redefinition


def plain(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def make_doubler(src: str = "out[id] = x[id] * 2;") -> TorchMetalKernel:
    return TorchMetalKernel("ub_redef", ["x"], ["out"], src, plain, metal_params=ID)


def grad_of(kernel: TorchMetalKernel) -> torch.Tensor:
    x = leaf(4)
    kernel(x, **flat(4), result_shapes=[[4]]).sum().backward()
    return x.grad


def test_redefinition_rules_hold_for_backward_registrations():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a redefinition of what an earlier run left
        first = make_doubler()
    first.register_autograd(lambda ctx, g: g * 7)
    torch.testing.assert_close(grad_of(first), torch.full((4,), 7.0))

    # An identical redefinition (a re-run cell) keeps the op and its backward,
    # silently; a registration through either object holds for both.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = make_doubler()
    assert second.op is first.op
    torch.testing.assert_close(grad_of(second), torch.full((4,), 7.0))
    backward = lambda ctx, g: g * 5  # noqa: E731
    with pytest.warns(UserWarning, match="Replacing the backward of kernel 'ub_redef'"):
        first.register_autograd(backward)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second.register_autograd(backward)  # the same one again, through the twin: no warning
    torch.testing.assert_close(grad_of(second), torch.full((4,), 5.0))
    torch.testing.assert_close(grad_of(first), torch.full((4,), 5.0))
    with pytest.warns(UserWarning, match="Replacing the backward"):
        second.register_autograd(lambda ctx, g: g * 3)

    # A graph recorded before a registration keeps the backward of its forward.
    x = leaf(4)
    recorded = second(x, **flat(4), result_shapes=[[4]])
    with pytest.warns(UserWarning, match="Replacing the backward"):
        second.register_autograd(lambda ctx, g: g * 11)
    recorded.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 3.0))

    # A changed definition replaces kernel and backward: the new object
    # differentiates torch_defn until a backward is registered on it, and the
    # old objects refuse to run or to take a backward.
    with pytest.warns(
        UserWarning, match="backward registered for the old definition does not carry over"
    ):
        third = make_doubler("out[id] = 2.0f * x[id];")
    torch.testing.assert_close(grad_of(third), torch.full((4,), 2.0))
    for old in (first, second):
        with pytest.raises(RuntimeError, match="redefined with a different definition"):
            old(leaf(4), **flat(4), result_shapes=[[4]])
        with pytest.raises(RuntimeError, match="register the backward on the new TorchMetalKernel"):
            old.register_autograd(lambda ctx, g: g)
    third.register_autograd(lambda ctx, g: g * 13)
    torch.testing.assert_close(grad_of(third), torch.full((4,), 13.0))
