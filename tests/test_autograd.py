"""Kernels are differentiable: the forward runs the kernel, the backward
differentiates ``torch_defn`` at the call's inputs unless a backward is
registered, and forward mode differentiates ``torch_defn``.

Before this, a gradient through a kernel raised (issue 9, 2.7); before that, it
was silently left out.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from support.gradients import assert_grads_match_float64, gradcheck_fp32

from coreai_torch import MetalParameter, TorchMetalKernel
from coreai_torch.examples import (
    custom_add,
    custom_matmul,
    rms_norm,
    scale_shift,
    sincos,
    torch_matmul,
    torch_scale_shift,
    torch_sincos,
)

ID = [MetalParameter("id", "uint", "thread_position_in_grid")]


def flat(n: int) -> dict:
    """Launch arguments of an elementwise kernel over n elements."""
    return {"threads_per_grid": (n, 1, 1), "threads_per_thread_group": (32, 1, 1)}


def leaf(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_()


# ------------------------------------------------------------- seed kernels


def test_gradcheck_vector_add():
    def call(x, y):
        return custom_add(x, y, **flat(8), result_shapes=[[8]])

    x, y = leaf(8, seed=1), leaf(8, seed=2)
    gradcheck_fp32(call, (x, y))
    assert_grads_match_float64(call, torch.add, (x, y))


def test_gradcheck_sincos_two_results():
    def call(x):
        return sincos(x, **flat(16), result_shapes=[[16], [16]])

    x = leaf(16)
    gradcheck_fp32(call, (x,))
    assert_grads_match_float64(call, torch_sincos, (x,))


def test_gradcheck_matmul():
    def call(a, b):
        m, n = a.shape[0], b.shape[1]
        return custom_matmul(
            a, b, threads_per_grid=(n, m, 1), threads_per_thread_group=(4, 4, 1),
            result_shapes=[[m, n]],
        )  # fmt: skip

    a, b = leaf(5, 3, seed=1), leaf(3, 4, seed=2)
    gradcheck_fp32(call, (a, b))
    assert_grads_match_float64(call, torch_matmul, (a, b))


def test_gradcheck_scale_shift_with_int_float_and_bool_scalars():
    for n, scale, negate in ((3, 0.5, True), (-2, 1.75, False)):

        def call(x, n=n, scale=scale, negate=negate):
            return scale_shift(x, n, scale, negate, **flat(12), result_shapes=[[12]])

        x = leaf(12)
        gradcheck_fp32(call, (x,))
        # Scalars get no gradient: only x is differentiated.
        (grad,) = torch.autograd.grad(call(x).sum(), x)
        torch.testing.assert_close(grad, torch.full((12,), -scale if negate else scale))
        assert_grads_match_float64(
            call, lambda t, n=n, scale=scale, negate=negate: torch_scale_shift(t, n, scale, negate),
            (x,),
        )  # fmt: skip


def rms_call(rows: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return rms_norm(
        rows, weight, eps, threads_per_grid=(32 * rows.shape[0], 1, 1),
        threads_per_thread_group=(32, 1, 1), result_shapes=[list(rows.shape)],
    )  # fmt: skip


def test_gradcheck_rms_norm_against_torch_rms_norm_in_float64():
    rows, weight = leaf(3, 40, seed=1), leaf(40, seed=2)
    gradcheck_fp32(rms_call, (rows, weight))
    # PyTorch's own RMSNorm, in float64, as the independent reference.
    assert_grads_match_float64(
        rms_call,
        lambda r, w: torch.nn.functional.rms_norm(r, (40,), w, 1e-6),
        (rows, weight),
    )


def test_only_inputs_that_require_grad_get_one():
    x, y = torch.randn(8), leaf(8)
    out = custom_add(x, y, **flat(8), result_shapes=[[8]])
    out.backward(torch.arange(8.0))
    assert x.grad is None
    torch.testing.assert_close(y.grad, torch.arange(8.0))


def test_the_backward_keeps_the_inputs_and_nothing_else():
    # torch_defn is recomputed in the backward: the graph holds the call's
    # inputs, not its results or any intermediate value of torch_defn.
    rows, weight = leaf(2, 40) * 1, leaf(40, seed=3)  # rows: an activation
    out = rms_call(rows, weight)
    saved = out.grad_fn.saved_tensors
    assert len(saved) == 2 and saved[0] is rows and saved[1] is weight


def test_the_op_itself_is_differentiable():
    # As an exported program or a compiled graph calls it.
    x = leaf(16)
    out_sin, out_cos = sincos.op(x, [16, 1, 1], [16, 1, 1], [16], [16])
    (out_sin * 2 + out_cos).sum().backward()
    torch.testing.assert_close(x.grad, 2 * torch.cos(x.detach()) - torch.sin(x.detach()))


def test_second_derivatives():
    # The default backward is itself differentiable (torch_defn's ops are).
    def call(x):
        return sincos(x, **flat(8), result_shapes=[[8], [8]])

    gradcheck_fp32(call, (leaf(8),), second_order=True)


def test_func_grad_vjp_and_jacrev():
    x = torch.randn(8)

    def first(t):
        return sincos(t, **flat(8), result_shapes=[[8], [8]])[0]

    torch.testing.assert_close(torch.func.grad(lambda t: first(t).sum())(x), torch.cos(x))
    out, pullback = torch.func.vjp(first, x)
    torch.testing.assert_close(out, torch.sin(x))
    torch.testing.assert_close(pullback(torch.ones(8))[0], torch.cos(x))
    torch.testing.assert_close(torch.func.jacrev(first)(x), torch.diag(torch.cos(x)))


# ---------------------------------------------------------------- forward mode


def test_forward_mode_differentiates_torch_defn():
    x, tangent = torch.randn(16), torch.randn(16)

    def call(t):
        return sincos(t, **flat(16), result_shapes=[[16], [16]])

    (s, _), (ds, dc) = torch.func.jvp(call, (x,), (tangent,))
    torch.testing.assert_close(s, torch.sin(x))
    torch.testing.assert_close(ds, torch.cos(x) * tangent)
    torch.testing.assert_close(dc, -torch.sin(x) * tangent)
    with fwAD.dual_level():
        s, _ = call(fwAD.make_dual(x, tangent))
        torch.testing.assert_close(fwAD.unpack_dual(s).tangent, torch.cos(x) * tangent)


def test_the_fast_path_does_not_drop_a_tangent():
    # A dual tensor looks like a plain tensor; the C++ fast path used to launch
    # it and return a result without its tangent.
    x = torch.randn(8)
    with fwAD.dual_level():
        for _ in range(2):  # the second call finds the specialization registered
            out = custom_add(fwAD.make_dual(x, torch.ones(8)), x, **flat(8), result_shapes=[[8]])
            torch.testing.assert_close(fwAD.unpack_dual(out).tangent, torch.ones(8))


# ------------------------------------------------- results without a gradient


def value_and_sign(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x * 3, (x > 0).to(torch.int32)


with_int_result = TorchMetalKernel(
    "grad_value_and_sign", ["x"], ["value", "positive"],
    "value[id] = x[id] * 3; positive[id] = x[id] > 0 ? 1 : 0;", value_and_sign, metal_params=ID,
)  # fmt: skip


def test_integer_results_are_not_differentiable():
    x = leaf(8)
    value, positive = with_int_result(x, **flat(8), result_shapes=[[8], [8]])
    assert value.requires_grad and not positive.requires_grad
    torch.testing.assert_close(positive, (x.detach() > 0).int())
    value.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((8,), 3.0))
    _, (dv, _) = torch.func.jvp(
        lambda t: with_int_result(t, **flat(8), result_shapes=[[8], [8]]),
        (x.detach(),),
        (torch.ones(8),),
    )
    torch.testing.assert_close(dv, torch.full((8,), 3.0))


def as_list(x: torch.Tensor) -> list[torch.Tensor]:
    return [x * 2, x + 1]


listed = TorchMetalKernel(
    "grad_list", ["x"], ["a", "b"], "a[id] = x[id] * 2; b[id] = x[id] + 1;", as_list,
    metal_params=ID,
)  # fmt: skip


def test_list_results_keep_their_type_and_are_differentiable():
    x = leaf(4)
    out = listed(x, **flat(4), result_shapes=[[4], [4]])
    assert type(out) is list
    (out[0] * 5 + out[1]).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 11.0))


# -------------------------------------------------- kernel and reference differ


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_forward_runs_the_kernel_and_backward_differentiates_torch_defn():
    # Documented: when the two disagree, the values are the kernel's and the
    # gradient is torch_defn's.
    triple = TorchMetalKernel(
        "grad_mismatch", ["x"], ["out"], "out[id] = x[id] * 3;", double, metal_params=ID
    )
    x = leaf(4)
    out = triple(x, **flat(4), result_shapes=[[4]])
    torch.testing.assert_close(out, x.detach() * 3)
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 2.0))


def test_calls_without_gradients_are_unaffected():
    x = leaf(4)
    call = {**flat(4), "result_shapes": [[4]]}
    kernel = TorchMetalKernel(
        "grad_plain", ["x"], ["out"], "out[id] = x[id] * 2;", double, metal_params=ID
    )
    with torch.no_grad():
        out = kernel(x, **call)
    assert not out.requires_grad
    torch.testing.assert_close(out, x.detach() * 2)
    plain = torch.randn(4)
    assert not kernel(plain, **call).requires_grad
    w = leaf(4)
    (w * kernel(plain, **call)).sum().backward()
    torch.testing.assert_close(w.grad, plain * 2)


def test_reference_mode_is_differentiable_too():
    kernel = TorchMetalKernel(
        "grad_reference", ["x"], ["out"], "out[id] = x[id] * 2;", double, metal_params=ID
    )
    kernel.execution_mode = "reference"
    x = leaf(4)
    kernel(x, **flat(4), result_shapes=[[4]]).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 2.0))


def test_a_torch_defn_that_cannot_be_differentiated_says_so():
    def zeta(x: torch.Tensor) -> torch.Tensor:
        return torch.special.zeta(x, 2.0)  # torch has no derivative in x

    kernel = TorchMetalKernel(
        "grad_opaque", ["x"], ["out"], "out[id] = x[id];", zeta, metal_params=ID
    )
    out = kernel(leaf(4) + 3, **flat(4), result_shapes=[[4]])
    with pytest.raises(
        RuntimeError, match=r"kernel 'grad_opaque': the backward differentiates torch_defn.*"
        r"register a backward with kernel.register_autograd"
    ):  # fmt: skip
        out.sum().backward()


# -------------------------------------------------------- the raw launch op


def _add_handle(x: torch.Tensor, y: torch.Tensor) -> int:
    custom_add(x.detach(), y.detach(), **flat(8), result_shapes=[[8]])  # registers it
    return custom_add.table.find_or_register(custom_add, custom_add.options, (x, y), [[8]])


def test_the_launch_op_refuses_inputs_that_require_grad():
    # coreai_torch::launch has no derivative: a call that autograd would record
    # is refused up front (torch's fallback would run it and leave the
    # gradient out at backward, with a warning).
    x, y = leaf(8, seed=1), torch.randn(8)
    handle = _add_handle(x, y)
    with pytest.raises(
        RuntimeError,
        match=r"kernel 'vector_add': coreai_torch::launch has no "
        r"derivative, but tensor argument 0 requires grad",
    ):
        torch.ops.coreai_torch.launch.default(handle, [x, y], [], [8, 1, 1], [32, 1, 1], [8])
    with fwAD.dual_level():
        dual = fwAD.make_dual(y, torch.ones(8))
        with pytest.raises(RuntimeError, match="tensor argument 1 requires grad"):
            torch.ops.coreai_torch.launch.default(
                handle, [x.detach(), dual], [], [8, 1, 1], [32, 1, 1], [8]
            )
    with torch.no_grad():
        (out,) = torch.ops.coreai_torch.launch.default(
            handle, [x, y], [], [8, 1, 1], [32, 1, 1], [8]
        )
    torch.testing.assert_close(out, x.detach() + y, rtol=0, atol=0)
    assert not out.requires_grad
