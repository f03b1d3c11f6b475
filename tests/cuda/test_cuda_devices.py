"""Launches on the devices, streams and contexts of a CUDA host, and training
under torch.distributed on GPUs (docs/cuda.md, "Distributed training").

A launch must run on the device of its tensors, on that device's current
stream, in the primary context PyTorch uses there, from any thread. What one
GPU allows runs on the one-GPU machine: stream choice (a launch captured into
a CUDA graph from the current stream, which fails for any other stream), a
thread that never touched CUDA, two threads on two streams at once,
CUDA_VISIBLE_DEVICES, and NCCL/FSDP2 with one rank. What needs two GPUs skips
with that reason on fewer.
"""

from __future__ import annotations

import ctypes
import os
import textwrap
import threading
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from support.child_process import run
from support.cuda_tools import requires_gpu
from support.ddp_training import free_port, global_batches, new_model, train, train_ranks
from support.kernels import axpy_kernel

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
requires_two_gpus = pytest.mark.skipif(
    GPUS < 2, reason=f"needs two CUDA GPUs (this machine has {GPUS})"
)

axpy = axpy_kernel("cuda_devices_axpy")


def _axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    n = x.numel()
    return axpy(
        x,
        y,
        alpha,
        threads_per_grid=(n, 1, 1),
        threads_per_thread_group=(128, 1, 1),
        result_shapes=[[n]],
    )


def _inputs(n: int, device: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randn(n, generator=generator).to(device),
        torch.randn(n, generator=generator).to(device),
    )


# alpha = 2: 2 * x is exact, so the kernel (fused or not) and torch round once,
# the same way: results are compared exactly.
ALPHA = 2.0


def _captured_launch(device: str) -> None:
    """Captures a launch on `device` into a CUDA graph and replays it on new
    inputs. Capture fails for work queued on any stream but the capturing one
    (the device's current stream inside torch.cuda.graph), so a correct replay
    shows the launch used the current stream of the tensors' device."""
    x, y = _inputs(1000, device, seed=1)
    _axpy(x, y, ALPHA)  # compile and load outside the capture
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(device), torch.cuda.graph(graph):
        out = _axpy(x, y, ALPHA)
    fresh, _ = _inputs(1000, device, seed=2)
    x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize(device)
    assert out.device == torch.device(device)
    torch.testing.assert_close(out, ALPHA * fresh + y, rtol=0, atol=0)


@requires_gpu
def test_a_launch_is_captured_into_a_cuda_graph_on_the_current_stream() -> None:
    _captured_launch("cuda:0")


def _cuda_driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _current_context(driver: ctypes.CDLL) -> int | None:
    context = ctypes.c_void_p()
    assert driver.cuCtxGetCurrent(ctypes.byref(context)) == 0
    return context.value


def _primary_context(driver: ctypes.CDLL, ordinal: int) -> int:
    device, context = ctypes.c_int(), ctypes.c_void_p()
    assert driver.cuDeviceGet(ctypes.byref(device), ordinal) == 0
    # Retained for the rest of the process, as PyTorch's runtime keeps it.
    assert driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
    return context.value


@requires_gpu
def test_a_thread_that_never_used_cuda_launches_in_the_primary_context() -> None:
    driver = _cuda_driver()
    x, y = _inputs(4096, "cuda", seed=3)
    _axpy(x, y, ALPHA)
    seen: dict[str, object] = {}

    def launch() -> None:
        try:
            seen["before"] = _current_context(driver)
            out = _axpy(x, y, ALPHA)
            torch.cuda.current_stream().synchronize()
            seen["after"] = _current_context(driver)
            seen["out"] = out
        except BaseException as error:  # reported by the main thread
            seen["error"] = error

    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    assert "error" not in seen, seen.get("error")
    assert seen["before"] is None  # a new thread has no current context
    assert seen["after"] == _primary_context(driver, 0)
    assert _current_context(driver) == seen["after"]  # the one PyTorch uses here
    torch.testing.assert_close(seen["out"], ALPHA * x + y, rtol=0, atol=0)


def _launch_from_threads(devices: list[str], rounds: int = 40) -> None:
    """One thread per entry of `devices`, each on a stream of its own, starting
    together: a new kernel's first call (compile and load) races in every
    thread, then `rounds` launches each; every result must be exact."""
    kernel = axpy_kernel(f"cuda_threads_{len(devices)}_{devices[-1].replace(':', '')}")
    start = threading.Barrier(len(devices))
    errors: list[BaseException] = []

    def work(index: int, device: str) -> None:
        try:
            n = 1000 + 37 * index  # a specialization of each thread's own
            x, y = _inputs(n, device, seed=10 + index)
            stream = torch.cuda.Stream(device)
            call = dict(threads_per_grid=(n, 1, 1), threads_per_thread_group=(64, 1, 1))
            start.wait()
            with torch.cuda.stream(stream):
                for r in range(rounds):
                    out = kernel(x, y, float(r), **call, result_shapes=[[n]])
                    stream.synchronize()
                    torch.testing.assert_close(out, r * x + y, rtol=1e-6, atol=1e-6)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i, d)) for i, d in enumerate(devices)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


@requires_gpu
def test_two_threads_launch_on_two_streams_of_one_device_at_once() -> None:
    _launch_from_threads(["cuda:0", "cuda:0"])


@requires_gpu
def test_cuda_visible_devices_chooses_the_gpu_behind_cuda0() -> None:
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    script = textwrap.dedent(
        """
        import torch
        from support.kernels import axpy_kernel
        k = axpy_kernel("visible_axpy")
        x = torch.arange(256.0)
        call = dict(threads_per_grid=(256, 1, 1), threads_per_thread_group=(64, 1, 1),
                    result_shapes=[[256]])
        if torch.cuda.is_available():
            assert torch.cuda.device_count() == 1
            assert str(torch.cuda.get_device_properties(0).uuid) == UUID
            out = k(x.cuda(), x.cuda(), 2.0, **call)
            assert out.device == torch.device("cuda:0"), out.device
            print("gpu", out.sum().item())
        else:
            print("cpu", k(x, x, 2.0, **call).sum().item())
        """
    ).replace("UUID", repr(uuid))
    expected = 3 * sum(range(256))
    chosen = run(script, {**os.environ, "CUDA_VISIBLE_DEVICES": f"GPU-{uuid}"}, fresh=True)
    assert chosen.split() == ["gpu", str(float(expected))]
    # No visible GPU: CUDA tensors cannot exist, and the kernel runs on the CPU.
    hidden = run(script, {**os.environ, "CUDA_VISIBLE_DEVICES": ""}, fresh=True)
    assert hidden.split() == ["cpu", str(float(expected))]


@requires_two_gpus
def test_a_launch_on_every_device_runs_on_its_current_stream() -> None:
    for index in range(GPUS):
        with torch.cuda.device(0):  # the current device is not the tensors'
            _captured_launch(f"cuda:{index}")


@requires_two_gpus
def test_a_kernel_used_on_a_second_device_is_loaded_there_without_compiling() -> None:
    kernel = axpy_kernel("cuda_second_device")
    x, y = _inputs(2048, "cpu", seed=5)
    call = dict(threads_per_grid=(2048, 1, 1), threads_per_thread_group=(128, 1, 1))
    first = kernel(x.to("cuda:0"), y.to("cuda:0"), ALPHA, **call, result_shapes=[[2048]])
    compiles = torch.ops.coreai_torch.cuda_compile_count()
    second = kernel(x.to("cuda:1"), y.to("cuda:1"), ALPHA, **call, result_shapes=[[2048]])
    assert torch.ops.coreai_torch.cuda_compile_count() == compiles
    assert second.device == torch.device("cuda:1")
    torch.testing.assert_close(first.cpu(), ALPHA * x + y, rtol=0, atol=0)
    torch.testing.assert_close(second.cpu(), ALPHA * x + y, rtol=0, atol=0)


@requires_two_gpus
def test_two_threads_launch_on_two_devices_at_once() -> None:
    _launch_from_threads(["cuda:0", "cuda:1"])


# Ranks over NCCL: one per GPU (at most two). With one GPU, a group of one rank
# still takes the kernel through NCCL's DDP and fully_shard's parameter and
# gradient handling; the cross-GPU reduction needs two.
RANKS = min(GPUS, 2)


@requires_gpu
def test_nccl_ddp_and_fsdp2_train_like_one_gpu(tmp_path: Path) -> None:
    if not torch.distributed.is_nccl_available():
        pytest.skip("this PyTorch has no NCCL")
    out_file = tmp_path / "ranks.pt"
    modes = ("nccl", "nccl-compiled", "fsdp2")
    mp.spawn(train_ranks, args=(RANKS, free_port(), str(out_file), modes), nprocs=RANKS)
    ranks = torch.load(out_file)
    model = new_model("cuda:0")
    start = {name: p.detach().cpu().clone() for name, p in model.named_parameters()}
    alone = train(model, model, global_batches("cuda:0"))
    for mode in modes:
        assert ranks[mode].keys() == alone.keys(), mode
        for name, value in alone.items():
            assert not torch.equal(value, start[name]), name
            # As in tests/test_distributed.py: the same sums in another order.
            torch.testing.assert_close(
                ranks[mode][name], value, rtol=1e-4, atol=1e-6, msg=f"{mode} {name}"
            )
