"""The eager fast path of a kernel call (csrc/python/kernel_call.cpp).

A repeated call of a registered specialization with plain arguments is
launched from C++ without the dispatcher. These tests check that it gives the
same results as the general path, that every state which changes what a call
does (modes, debug, autograd, tracing, redefinition, a new specialization) still
reaches the general path, and that bad arguments after warm-up raise the same
errors as before it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from support.kernel_testing import observed_launches
from torch.utils._python_dispatch import TorchDispatchMode

from coreai_torch import MetalCompileError, MetalParameter, TorchMetalKernel

ID = [MetalParameter("id", "uint", "thread_position_in_grid")]
GRID = {"threads_per_grid": (8, 1, 1), "threads_per_thread_group": (8, 1, 1)}


def scaled_sum(x: torch.Tensor, y: torch.Tensor, k: int, s: float, neg: bool) -> torch.Tensor:
    out = (x + y * k) * s
    return -out if neg else out


SCALED_SUM_SRC = """
float v = (x[id] + y[id] * float(k)) * s;
out[id] = neg ? -v : v;
"""


def two_results(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x * 2, x + 1


def list_results(x: torch.Tensor) -> list[torch.Tensor]:
    return [x * 2, x + 1]


TWO_SRC = "a[id] = x[id] * 2; b[id] = x[id] + 1;"


def copy(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@pytest.fixture
def scaled() -> TorchMetalKernel:
    return TorchMetalKernel(
        "fast_scaled_sum",
        ["x", "y", "k", "s", "neg"],
        ["out"],
        SCALED_SUM_SRC,
        scaled_sum,
        metal_params=ID,
    )


def call_scaled(kernel, x, y, k=3, s=0.5, neg=True):
    return kernel(x, y, k, s, neg, **GRID, result_shapes=[[8]])


def test_repeated_calls_match_reference(scaled):
    x, y = torch.randn(8), torch.randn(8)
    # Each element is a few float32 operations in the same order on both sides.
    for k, s, neg in [(3, 0.5, True), (-2, 1.25, False), (0, -3.0, True)]:
        for _ in range(2):  # the second call is the fast path's
            torch.testing.assert_close(
                call_scaled(scaled, x, y, k, s, neg),
                scaled_sum(x, y, k, s, neg),
                rtol=1e-6,
                atol=1e-6,
            )


@pytest.mark.parametrize(("defn", "kind"), [(two_results, tuple), (list_results, list)])
def test_result_containers_as_torch_defn(defn, kind):
    kernel = TorchMetalKernel(
        f"fast_{kind.__name__}", ["x"], ["a", "b"], TWO_SRC, defn, metal_params=ID
    )
    x = torch.randn(8)
    for _ in range(2):
        out = kernel(x, **GRID, result_shapes=[[8], [8]])
        assert type(out) is kind
        torch.testing.assert_close(list(out), list(defn(x)), rtol=0, atol=0)


def _route(kernel, inputs, grid, group, shapes) -> str:
    """The route a call's launch took ('direct', 'op'), or the error it raised."""
    try:
        with observed_launches() as launches:
            kernel(
                *inputs, threads_per_grid=grid, threads_per_thread_group=group, result_shapes=shapes
            )
    except (TypeError, ValueError, RuntimeError) as exc:
        return type(exc).__name__
    return launches[0].route


def test_only_plain_calls_of_registered_specializations_launch_directly(scaled):
    x, y = torch.randn(8), torch.randn(8)
    call_scaled(scaled, x, y)
    grid, group = (8, 1, 1), (8, 1, 1)
    assert _route(scaled, (x, y, 3, 0.5, True), grid, group, [[8]]) == "direct"
    assert _route(scaled, (x, y, 3, 1, True), grid, group, [[8]]) == "direct"  # int as float
    # A Parameter that needs no gradient is a plain tensor to every op.
    frozen = torch.nn.Parameter(y, requires_grad=False)
    assert _route(scaled, (x, frozen, 3, 0.5, True), grid, group, [[8]]) == "direct"
    through_the_op = [
        (x.half(), y.half(), 3, 0.5, True),  # a new specialization
        # Tensors whose memory does not hold their values: the dispatcher
        # resolves them first.
        (torch.randn(8, dtype=torch.complex64).conj().imag, y, 3, 0.5, True),
        (torch._efficientzerotensor(8), y, 3, 0.5, True),
    ]
    for inputs in through_the_op:
        assert _route(scaled, inputs, grid, group, [[8]]) == "op", inputs
    # What no route takes is refused before any route is chosen.
    refused = [
        ((x, y, 3.0, 0.5, True), grid, group, [[8]], "TypeError"),  # a float for an int
        ((x, y, 3, 0.5, 1), grid, group, [[8]], "TypeError"),  # an int for a bool
        ((x, y, 2**31, 0.5, True), grid, group, [[8]], "ValueError"),  # outside int32
        ((x, y, 3, float("nan"), True), grid, group, [[8]], "ValueError"),
        ((x, y, 3, 1e39, True), grid, group, [[8]], "ValueError"),  # inf as a 32-bit float
        ((x.to_sparse(), y, 3, 0.5, True), grid, group, [[8]], "TypeError"),
        ((x, y, 3, 0.5, True), (8, 1), group, [[8]], "ValueError"),
        ((x, y, 3, 0.5, True), grid, (8, 1, 0), [[8]], "ValueError"),
        ((x, y, 3, 0.5, True), grid, (2048, 1, 1), [[8]], "ValueError"),
        ((x, y, 3, 0.5, True), (2**32, 1, 1), group, [[8]], "ValueError"),
        ((x, y, 3, 0.5, True), grid, group, [[-8]], "ValueError"),
        ((x, y, 3, 0.5, True), grid, group, [[8], [8]], "ValueError"),
        ((x, y, 3, 0.5), grid, group, [[8]], "TypeError"),
    ]
    for inputs, g, t, shapes, error in refused:
        assert _route(scaled, inputs, g, t, shapes) == error, (inputs, g, t, shapes)
    scaled.debug = True  # another option set is another specialization
    try:
        assert _route(scaled, (x, y, 3, 0.5, True), grid, group, [[8]]) == "op"
        assert _route(scaled, (x, y, 3, 0.5, True), grid, group, [[8]]) == "direct"
    finally:
        scaled.debug = False
    with torch.enable_grad():
        xg = x.clone().requires_grad_()
        assert _route(scaled, (xg, y, 3, 0.5, True), grid, group, [[8]]) == "op"
    with fwAD.dual_level():  # a tangent, which autograd records, takes the op too
        assert _route(scaled, (fwAD.make_dual(x, x), y, 3, 0.5, True), grid, group, [[8]]) == "op"
    with torch.inference_mode():
        assert _route(scaled, (x, y, 3, 0.5, True), grid, group, [[8]]) == "direct"

    # Under vmap each row is a plain-looking 1-D float tensor; the transform
    # shows in the thread's dispatch keys.
    seen = []

    def probe(row: torch.Tensor) -> torch.Tensor:
        seen.append(_route(scaled, (row, y, 3, 0.5, True), grid, group, [[8]]))
        return row

    torch.vmap(probe)(torch.randn(2, 8))
    assert len(seen) == 1 and seen[0] != "direct", seen


def test_errors_after_warm_up_are_unchanged(scaled):
    x, y = torch.randn(8), torch.randn(8)
    call_scaled(scaled, x, y)
    with pytest.raises(TypeError, match="input 'k' is declared int in torch_defn, got float"):
        call_scaled(scaled, x, y, k=3.0)
    with pytest.raises(ValueError, match="int input 'k' = 2147483648 does not fit"):
        call_scaled(scaled, x, y, k=2**31)
    with pytest.raises(ValueError, match="float input 's' = inf is not finite"):
        call_scaled(scaled, x, y, s=float("inf"))
    # Finite as a Python float, inf as Metal's: refused like inf.
    for big in (1e39, -1e39, 10**39):
        says = re.escape(f"float input 's' = {big} does not fit Metal's 32-bit float")
        with pytest.raises(ValueError, match=says):
            call_scaled(scaled, x, y, s=big)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # nested tensors are a prototype
        odd_layouts = {
            "has layout torch.sparse_coo": x.to_sparse(),
            "has layout torch.sparse_csr": x.reshape(2, 4).to_sparse_csr(),
            "has layout torch._mkldnn": x.to_mkldnn(),
            "is a nested tensor": torch.nested.as_nested_tensor([x]),
            "is a nested tensor,": torch.nested.nested_tensor([x, x[:4]], layout=torch.jagged),
        }
    for says, tensor in odd_layouts.items():
        with pytest.raises(TypeError, match=f"kernel 'fast_scaled_sum': input 'x' {says}"):
            call_scaled(scaled, tensor, y)
    with pytest.raises(ValueError, match=r"threads_per_thread_group entries must be in \[1, "):
        scaled(
            x,
            y,
            3,
            0.5,
            True,
            threads_per_grid=(8, 1, 1),
            threads_per_thread_group=(0, 1, 1),
            result_shapes=[[8]],
        )
    with pytest.raises(ValueError, match="must be a 3-tuple"):
        scaled(
            x,
            y,
            3,
            0.5,
            True,
            threads_per_grid=(8, 1),
            threads_per_thread_group=(8, 1, 1),
            result_shapes=[[8]],
        )
    with pytest.raises(ValueError, match=r"result_shapes gives \[\] for result 'out'"):
        scaled(x, y, 3, 0.5, True, **GRID, result_shapes=[[]])
    with pytest.raises(TypeError, match="takes 5 inputs"):
        scaled(x, y, 3, 0.5, **GRID, result_shapes=[[8]])
    # A ValueError, as every other bad grid (issue 9, 2.9).
    with pytest.raises(ValueError, match=r"threads_per_grid entries must be in \[0, 2\^32 - 1\]"):
        scaled(
            x,
            y,
            3,
            0.5,
            True,
            threads_per_grid=(2**32, 1, 1),
            threads_per_thread_group=(8, 1, 1),
            result_shapes=[[8]],
        )


def test_modes_and_options_still_apply(scaled):
    x, y = torch.randn(8), torch.randn(8)
    call_scaled(scaled, x, y)
    calls = []

    def counting(*args):
        calls.append(args)
        return scaled_sum(*args)

    scaled.torch_defn = counting
    scaled.execution_mode = "reference"
    try:
        call_scaled(scaled, x, y)
    finally:
        scaled.execution_mode = None
    assert len(calls) == 1
    call_scaled(scaled, x, y)
    assert len(calls) == 1  # the kernel again
    scaled.execution_mode = "fast"
    try:
        with pytest.raises(ValueError, match="execution_mode must be None or one of"):
            call_scaled(scaled, x, y)
    finally:
        scaled.execution_mode = None


def test_debug_mode_after_fast_calls():
    # Writes only the first half of its result: only debug mode notices.
    half = TorchMetalKernel(
        "fast_half_write", ["x"], ["out"], "if (id < 4) out[id] = x[id];", copy, metal_params=ID
    )
    x = torch.randn(8)
    half(x, **GRID, result_shapes=[[8]])
    half(x, **GRID, result_shapes=[[8]])
    half.debug = True
    try:
        with pytest.raises(RuntimeError, match="4 of 8 elements that the kernel never wrote"):
            half(x, **GRID, result_shapes=[[8]])
    finally:
        half.debug = False


def test_dispatch_modes_see_the_op(scaled):
    x, y = torch.randn(8), torch.randn(8)
    call_scaled(scaled, x, y)

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Recorder() as recorder:
        call_scaled(scaled, x, y)
    assert "coreai_metal_kernels.fast_scaled_sum.default" in recorder.ops


def test_compile_errors_on_repeated_calls():
    broken = TorchMetalKernel(
        "fast_broken", ["x"], ["out"], "out[id] = x[id] +;", copy, metal_params=ID
    )
    x = torch.randn(8)
    for _ in range(2):  # the second call reaches the registered specialization directly
        with pytest.raises(MetalCompileError, match="src:1"):
            broken(x, **GRID, result_shapes=[[8]])


def test_lazily_negated_views_are_read_as_their_values():
    # z.conj().imag is a view whose memory holds imag(z) and whose Negative
    # dispatch key says "negate on read". The first call took the op (whose
    # dispatcher resolved it), every later one read the raw memory (issue 9, 2.3).
    kernel = TorchMetalKernel(
        "fast_copy", ["x"], ["out"], "out[id] = x[id];", copy, metal_params=ID
    )
    z = torch.randn(8, dtype=torch.complex64)
    view = z.conj().imag
    for _ in range(3):
        out = kernel(view, **GRID, result_shapes=[[8]])
        torch.testing.assert_close(out, -z.imag, rtol=0, atol=0)


ZERO_TENSOR_CHILD = """
import torch
from coreai_torch import MetalParameter, TorchMetalKernel

def copy(x: torch.Tensor) -> torch.Tensor:
    return x.clone()

k = TorchMetalKernel("zero_copy", ["x"], ["out"], "out[id] = x[id] + 1.0f;", copy,
                     metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
call = dict(threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1), result_shapes=[[8]])
k(torch.ones(8), **call)  # registers the specialization: later calls take the fast path
zero = torch._efficientzerotensor(8)  # no storage at all
for _ in range(3):
    assert torch.equal(k(zero, **call), torch.ones(8)), k(zero, **call)
print("ok")
"""


def test_zero_tensors_are_read_as_zeros_in_a_subprocess(tmp_path):
    # A ZeroTensor has no memory: reading it from the fast path crashed the
    # process (issue 9, 2.3).
    env = {**os.environ, "COREAI_TORCH_CACHE_DIR": os.environ.get("COREAI_TORCH_CACHE_DIR", "")}
    run = subprocess.run(
        [sys.executable, "-c", ZERO_TENSOR_CHILD],
        capture_output=True, text=True, timeout=300, env={k: v for k, v in env.items() if v},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "ok"


def test_a_launch_that_compiles_releases_the_gil():
    # A small launch keeps the GIL, but not one that must compile first: the
    # compiler takes a large fraction of a second, and other Python threads
    # must run meanwhile.
    tag = uuid.uuid4().hex  # a source no cache has seen: the launch compiles
    kernel = TorchMetalKernel(
        "fast_gil", ["x"], ["out"], f"// {tag}\nout[id] = x[id];", copy, metal_params=ID
    )
    x = torch.randn(8)
    kernel.table.find_or_register(kernel, 0, (x,), [[8]])  # registered, not compiled
    ticks, running = [], threading.Event()

    def ticker():
        running.set()
        while running.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        compiles = torch.ops.coreai_torch.cpu_compile_count()
        start = time.perf_counter()
        with observed_launches() as launches:
            out = kernel(x, **GRID, result_shapes=[[8]])
        end = time.perf_counter()
    finally:
        running.clear()
        thread.join()
    assert torch.ops.coreai_torch.cpu_compile_count() == compiles + 1
    assert [launch.route for launch in launches] == ["direct"]
    torch.testing.assert_close(out, x, rtol=0, atol=0)
    during = [t for t in ticks if start < t < end]
    # With the GIL held the ticker could not run at all during the launch.
    assert len(during) >= 5, (len(during), end - start)
