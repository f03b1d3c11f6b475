"""Helpers for tests that run kernels: call, compare, and opcheck in one go.

``COREAI_TORCH_TEST_DEVICE=cuda`` (or any torch device) turns on *device mode*
for the whole test session (tests/conftest.py): every plain eager kernel call
of every test also runs on that device. The inputs are copied there, the kernel
runs on the CPU backend and on the device, both results (and any input the
kernel wrote to) must agree within the tolerances of ``assert_backends_agree``,
and the test goes on with the device's results, so its own checks against
``torch_defn`` and hand-computed values judge the device's backend. ``run_checked``
then opchecks the op on the device too. That is how the eager test suite runs
on the CUDA backend (docs/cuda.md).

Every session also compiles each specialization whose first CPU launch
succeeded for NVIDIA GPUs (``support/ptx_check.py``), so that a kernel the GPU
target cannot take fails the test that launched it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from coreai_torch import _C, TorchMetalKernel
from coreai_torch.contract import OPTION_DEBUG
from coreai_torch.launches import Launch, set_launch_hook
from support import ptx_check

TEST_DEVICE = os.environ.get("COREAI_TORCH_TEST_DEVICE", "")

# Largest difference allowed between two backends, per floating dtype. Both
# compute every float operation in IEEE single precision with the same
# operation order (sums included); they differ only in the math library
# (glibc vs libdevice, each within 2 ulp for the functions Metal has), so
# float32 results agree to a few ulp; half and bfloat results are float results
# rounded once, which a few-ulp float difference moves by at most one ulp of
# the narrow type (2^-10, 2^-7).
BACKEND_TOLERANCE = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-6},
    torch.float16: {"rtol": 2e-3, "atol": 1e-5},
    torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-5},
}
# Kernels that multiply simdgroup matrices: with half or bfloat operands the
# GPU's tensor cores sum the products of each 8x8x8 step in their own order,
# so float results are sums of the same terms in another order, which moves
# them by a few float ulps of the sum of the terms' magnitudes (the tolerance
# the corpus tests use for such sums against torch). Narrow results are within
# BACKEND_TOLERANCE already: one rounding of such a float.
REORDERED_SUM_TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-4}}
# Results whose values each backend chooses (which thread owns which element
# of a cooperative tensor): compared by the test's own checks, not across
# backends. See backend_defined_results().
_BACKEND_DEFINED: set[int] = set()


# Set while a test runs in the debug pass of tests/conftest.py's
# default_and_debug_mode: run_checked leaves opcheck to the default pass.
DEBUG_PASS = False


def run_checked(kernel: TorchMetalKernel, *args: Any, opcheck: bool = True, **call: Any) -> Any:
    """Calls ``kernel`` and, unless told not to, passes its op through torch.library.opcheck.

    opcheck checks the schema, the fake (Meta) implementation against the real
    one, and that the op traces under AOT dispatch with dynamic shapes. When
    the kernel takes and returns floating-point tensors it runs a second time
    with those inputs requiring grad, which checks the op's autograd
    registration and compares the gradients of the traced op with eager ones.
    (opcheck adds up all results in the first one's dtype, so it cannot take
    integer results there.) In device mode both run on the test device.
    """
    out = kernel(*args, **call)
    if opcheck and not DEBUG_PASS:
        grid = list(call["threads_per_grid"])
        group = list(call["threads_per_thread_group"])
        shapes = [list(s) for s in call["result_shapes"]]
        op_args = to_device(args, TEST_DEVICE) if TEST_DEVICE else args
        torch.library.opcheck(kernel.op, (*op_args, grid, group, *shapes))
        results = [out] if isinstance(out, torch.Tensor) else list(out)
        if any(map(_floating, op_args)) and all(map(_floating, results)):
            differentiable = [a.detach().requires_grad_() if _floating(a) else a for a in op_args]
            torch.library.opcheck(kernel.op, (*differentiable, grid, group, *shapes))
    return out


def _floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def to_device(value: Any, device: str) -> Any:
    """``value`` with every tensor (in lists and tuples too) copied to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device, copy=True)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


@contextlib.contextmanager
def backend_defined_results(*indices: int) -> Iterator[None]:
    """Within it, device mode leaves the results at ``indices`` out of the comparison.

    For values that Metal leaves to the implementation (each backend's own
    choice); the test's own checks still judge the device's values.
    """
    _BACKEND_DEFINED.update(indices)
    try:
        yield
    finally:
        _BACKEND_DEFINED.difference_update(indices)


def assert_backends_agree(
    kernel: str, expected: Any, got: Any, what: str, reordered_sums: bool = False
) -> None:
    """``got`` (on any device) equals ``expected`` (CPU): exactly, or within BACKEND_TOLERANCE.

    ``reordered_sums``: float results may be sums in another order (REORDERED_SUM_TOLERANCE).
    """
    if isinstance(expected, (list, tuple)):
        assert len(expected) == len(got), (
            f"{kernel}: {what}: {len(got)} values, not {len(expected)}"
        )
        for i, (e, g) in enumerate(zip(expected, got)):
            if what == "results" and i in _BACKEND_DEFINED:
                continue
            assert_backends_agree(kernel, e, g, f"{what}[{i}]", reordered_sums)
        return
    if not isinstance(expected, torch.Tensor):
        return
    tolerance = BACKEND_TOLERANCE.get(expected.dtype, {"rtol": 0, "atol": 0})
    if reordered_sums:
        tolerance = REORDERED_SUM_TOLERANCE.get(expected.dtype, tolerance)
    torch.testing.assert_close(
        got.cpu(),
        expected,
        equal_nan=True,
        **tolerance,
        msg=lambda m: (
            f"kernel '{kernel}', {what}: the {TEST_DEVICE} backend differs from the "
            f"CPU backend: {m}"
        ),
    )


def _plain_cpu_call(args: tuple) -> bool:
    """True for an eager call with real CPU tensors, nothing tracing it."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack():
        return False
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(
        type(t) is torch.Tensor and t.device.type == "cpu" and not t.requires_grad for t in tensors
    )


def cross_check(
    kernel: str,
    launch: Callable[[tuple], Any],
    args: tuple,
    debug: bool,
    *,
    results: bool = True,
    reordered_sums: bool = False,
) -> Any:
    """``launch(args)``; in device mode also on the test device, which must agree.

    Returns the test device's results (on the CPU) in device mode. The inputs
    after the call (kernels may write to them) are compared, and the results
    too unless ``results`` is False (for kernels that leave some of their
    uninitialised results unwritten on purpose). Debug-mode launches (a
    CPU-backend feature) and traced calls run as they are.
    """
    if not TEST_DEVICE or debug or not _plain_cpu_call(args):
        return launch(args)
    moved = to_device(args, TEST_DEVICE)
    expected = launch(args)  # raises what the test expects, if anything
    got = launch(moved)
    if results:
        assert_backends_agree(kernel, expected, got, "results", reordered_sums)
    assert_backends_agree(kernel, list(args), list(moved), "inputs after the call")
    return to_device(got, "cpu")


def _observe(launch: Launch) -> Any:
    """The session's launch hook (``coreai_torch.launches``): every eager launch, whatever
    route its call took, is recorded for the GPU compile check and, in device
    mode, also run on TEST_DEVICE."""
    kernel = launch.kernel
    if launch.device != "cpu":
        return launch.run()
    if not TEST_DEVICE:
        out = launch.run()
    else:
        # Calls autograd records arrive here with inputs that require grad: the
        # comparison runs on detached views (the same storage, so writes show).
        args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in launch.inputs)
        kwargs = {
            "threads_per_grid": launch.threads_per_grid,
            "threads_per_thread_group": launch.threads_per_thread_group,
            "result_shapes": launch.result_shapes,
        }
        calls = iter([lambda values: launch.run()])  # the CPU launch itself, first

        def on(values: tuple) -> Any:
            return next(calls, lambda v: kernel(*v, **kwargs))(values)

        multiplies = "simdgroup_multiply" in f"{kernel.src}\n{kernel.helper_src}"
        out = cross_check(kernel.name, on, args, kernel.debug, reordered_sums=multiplies)
    steps = ptx_check.steps_of(launch.threads_per_thread_group)
    if (launch.handle, steps) not in _RECORDED:  # handles are never reused
        _RECORDED.add((launch.handle, steps))
        record_launch(kernel.name, tuple(launch.registration()), launch.threads_per_thread_group)
    return out


_RECORDED: set[tuple[int, int]] = set()


def record_launch(name: str, registration: tuple, group: tuple | list = (1, 1, 1)) -> None:
    """A specialization launched (``registration``: register_kernel's arguments) with
    threadgroups of ``group``: it must compile for the GPU too, in the form such
    a launch takes there (``support/ptx_check.py``).

    Its debug bit (a CPU-backend feature) is left out. A launch with Metal
    fidelity switched off is not checked: such a kernel may use what no GPU
    compiler accepts (``double``), which is why it needed the switch.
    """
    if not _C._metal_fidelity_enabled():
        return
    *head, options = (tuple(a) if isinstance(a, list) else a for a in registration)
    ptx_check.check_launched(name, (*head, options & ~OPTION_DEBUG), ptx_check.steps_of(group))


def install_launch_hook() -> None:
    """Observes every eager launch of the session (``_observe``)."""
    set_launch_hook(_observe)


@contextlib.contextmanager
def observed_launches() -> Iterator[list[Launch]]:
    """The launches made inside the block, in order (after the session's hook ran them)."""
    seen: list[Launch] = []

    def observe(launch: Launch) -> Any:
        seen.append(launch)
        return previous(launch) if previous is not None else launch.run()

    previous = set_launch_hook(observe)
    try:
        yield seen
    finally:
        set_launch_hook(previous)
