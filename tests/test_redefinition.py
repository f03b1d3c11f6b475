"""Re-running a kernel definition (a notebook cell) never runs stale source."""

import gc
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from coreai_torch import MetalParameter, TorchMetalKernel

CALL = {"threads_per_grid": (4, 1, 1), "threads_per_thread_group": (4, 1, 1)}


def plus(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def make(src: str, defn=plus) -> TorchMetalKernel:
    return TorchMetalKernel(
        "redef_kernel",
        ["x"],
        ["out"],
        src,
        defn,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )


def test_identical_definition_reuses_the_op_without_warning():
    first = make("out[id] = x[id] + 1;")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = make("out[id] = x[id] + 1;")
    assert second.op is first.op
    x = torch.arange(4.0)
    for k in (first, second):
        torch.testing.assert_close(k(x, result_shapes=[[4]], **CALL), x + 1)


def test_changed_definition_replaces_the_op_and_later_calls_run_it():
    old = make("out[id] = x[id] + 1;")
    x = torch.arange(4.0)
    torch.testing.assert_close(old(x, result_shapes=[[4]], **CALL), x + 1)

    def plus_two(x: torch.Tensor) -> torch.Tensor:
        return x + 2

    with pytest.warns(UserWarning, match="Redefining kernel 'redef_kernel'"):
        new = make("out[id] = x[id] + 2;", plus_two)
    torch.testing.assert_close(new(x, result_shapes=[[4]], **CALL), x + 2)
    # The op itself now runs the new source too.
    torch.testing.assert_close(
        torch.ops.coreai_metal_kernels.redef_kernel(x, [4, 1, 1], [4, 1, 1], [4]), x + 2
    )
    with pytest.raises(RuntimeError, match="was redefined with a different definition"):
        old(x, result_shapes=[[4]], **CALL)


HAMMER = """
import sys, threading, warnings
import torch
from coreai_torch import MetalParameter, TorchMetalKernel

warnings.simplefilter("ignore")  # one redefinition warning per round

def make(c):
    def plus(x: torch.Tensor) -> torch.Tensor:
        return x + c
    return TorchMetalKernel("hammered", ["x"], ["out"], f"out[id] = x[id] + {c};", plus,
                            metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])

ROUNDS = 12
kernels = [make(0)]
stop = threading.Event()
seen, problems = set(), []
x = torch.zeros(64)

def hammer():
    op = torch.ops.coreai_metal_kernels.hammered
    while not stop.is_set():
        try:
            out = op(x, [64, 1, 1], [64, 1, 1], [64])
        except Exception as e:
            problems.append(repr(e)[:300])
            continue
        values = set(out.tolist())
        # All 64 elements from one kernel, one of the definitions made so far.
        if len(values) != 1 or not values <= set(range(ROUNDS + 1)):
            problems.append(f"mixed or unknown results {sorted(values)[:8]}")
        seen.update(values)

threads = [threading.Thread(target=hammer) for _ in range(3)]
for t in threads:
    t.start()
for c in range(1, ROUNDS + 1):
    kernels.append(make(c))
    kernels.pop(0)  # the previous definition is dropped: its specializations are released
    # Compiles the new definition here, while the other threads keep calling.
    kernels[0](x, threads_per_grid=(64, 1, 1), threads_per_thread_group=(64, 1, 1),
               result_shapes=[[64]])
stop.set()
for t in threads:
    t.join()
assert not problems, problems[:5]
assert len(seen) > 1, seen  # the calls saw more than one definition
print("ok", len(seen))
"""


def test_redefining_while_other_threads_call_the_op_in_a_subprocess(tmp_path):
    # Redefinition used to destroy and re-create the op while other threads
    # were inside it: a segfault (issue 9, 2.4). With an unchanged signature the
    # op now stays and its calls run the old or the new kernel.
    env = {**os.environ, "COREAI_TORCH_CACHE_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", HAMMER], capture_output=True, text=True, timeout=600, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("ok "), run.stdout


HAMMER_SIGNATURES = """
import threading, warnings
import torch
from coreai_torch import MetalParameter, TorchMetalKernel

warnings.simplefilter("ignore")
ID = [MetalParameter("id", "uint", "thread_position_in_grid")]

def make(c):
    # Odd rounds take a scalar input: every round changes the op's signature.
    if c % 2:
        def plus_k(x: torch.Tensor, k: float) -> torch.Tensor:
            return x + k
        return TorchMetalKernel("resigned", ["x", "k"], ["out"], "out[id] = x[id] + k;",
                                plus_k, metal_params=ID)
    def plus(x: torch.Tensor) -> torch.Tensor:
        return x + c
    return TorchMetalKernel("resigned", ["x"], ["out"], f"out[id] = x[id] + {c};", plus,
                            metal_params=ID)

def call(kernel):
    scalar = (1.0,) if len(kernel.input_names) == 2 else ()
    return kernel(x, *scalar, threads_per_grid=(64, 1, 1),
                  threads_per_thread_group=(64, 1, 1), result_shapes=[[64]])

kernels = [make(0)]
first_op = torch.ops.coreai_metal_kernels.resigned.default  # kept across redefinitions
stop = threading.Event()
problems, launched = [], [0]
x = torch.zeros(64)

def allowed(e):
    return "redefined with" in str(e)

def hammer_objects():  # the object current when the call starts, old by the time it runs
    while not stop.is_set():
        try:
            call(kernels[0])
            launched[0] += 1
        except Exception as e:
            if not allowed(e):
                problems.append(repr(e)[:300])

def hammer_op():  # the first definition's op, by a kept reference
    while not stop.is_set():
        try:
            first_op(x, [64, 1, 1], [64, 1, 1], [64])
            launched[0] += 1
        except Exception as e:
            if not allowed(e):
                problems.append(repr(e)[:300])

threads = [threading.Thread(target=hammer_objects) for _ in range(2)]
threads.append(threading.Thread(target=hammer_op))
for t in threads:
    t.start()
for c in range(1, 13):
    kernels.append(make(c))
    kernels.pop(0)
    call(kernels[0])  # compiles while the other threads call
stop.set()
for t in threads:
    t.join()
assert not problems, problems[:5]
assert launched[0] > 0
print("ok")
"""


def test_redefining_with_new_signatures_while_threads_call_in_a_subprocess(tmp_path):
    # Each redefinition with another signature used to destroy the op while
    # other threads were in it: SIGSEGV (issue 29.9). A new signature is now a
    # new overload of the op; calls of an old object or an old overload run
    # or are refused with an error, and nothing crashes.
    env = {**os.environ, "COREAI_TORCH_CACHE_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", HAMMER_SIGNATURES],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "ok", run.stdout


def _mapped(path: str) -> bool:
    return path in Path("/proc/self/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
def test_a_redefined_kernel_unloads_the_old_library_once_dropped():
    # Every compiled or redefined kernel used to stay loaded for the life of
    # the process (issue 9, 2.12).
    x = torch.arange(4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # redefines what an earlier test left
        kernel = make("out[id] = x[id] * 3.0f + 0.25f;")
    torch.testing.assert_close(kernel(x, result_shapes=[[4]], **CALL), x * 3 + 0.25)
    gc.collect()
    loaded = torch.ops.coreai_torch.cpu_loaded_libraries()
    handle = kernel.table.find_or_register(kernel, kernel.options, (x,), [[4]])
    library = torch.ops.coreai_torch.cpu_library_path(handle)
    assert library and _mapped(library)

    with pytest.warns(UserWarning, match="Redefining kernel 'redef_kernel'"):
        kernel = make("out[id] = x[id] * 5.0f + 0.25f;")  # the old object is dropped
    torch.testing.assert_close(kernel(x, result_shapes=[[4]], **CALL), x * 5 + 0.25)
    gc.collect()
    assert not _mapped(library)
    with pytest.raises(ValueError, match=f"unknown kernel handle {handle}"):
        torch.ops.coreai_torch.cpu_library_path(handle)
    # One library out, one in.
    assert torch.ops.coreai_torch.cpu_loaded_libraries() == loaded
