"""Runs the kernel `coreai_checks` of a PTX file on one GPU thread: ``python cuda_runner.py F.ptx``.

msl_harness.py uses it in device mode: the check program's emit() calls print
with the GPU's printf, which the driver writes to this process's stdout when
the kernel has finished. The driver is loaded with ctypes, so the harness
needs nothing beyond the NVIDIA driver.
"""

from __future__ import annotations

import ctypes
import fcntl
import sys
import tempfile
from pathlib import Path

CU_LIMIT_STACK_SIZE = 0
CU_LIMIT_PRINTF_FIFO_SIZE = 1
LOCK_FILE = Path(tempfile.gettempdir()) / "coreai_torch_cuda_runner.lock"


def main(path: str) -> None:
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(result: int, what: str) -> None:
        if result != 0:
            sys.exit(f"{what} failed with CUDA error {result}")

    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    # Check programs print thousands of lines and keep arrays on the stack.
    check(cuda.cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, ctypes.c_size_t(64 << 20)), "printf")
    check(cuda.cuCtxSetLimit(CU_LIMIT_STACK_SIZE, ctypes.c_size_t(64 << 10)), "stack")
    with open(path, "rb") as f:
        image = f.read() + b"\0"
    module = ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
    function = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"coreai_checks"), "function")
    check(cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, None, None), "cuLaunchKernel")
    check(cuda.cuCtxSynchronize(), "the check program")


if __name__ == "__main__":
    # The driver reserves each thread's stack for every thread the GPU can hold
    # at once (64 KiB x 2048 x 132 SMs = 17 GiB on an H100) and loading a
    # module can reserve more, so a few runners at once (pytest-xdist) fill the
    # GPU's memory. They take the GPU one at a time; each runs for well under
    # a second, and the compiles before them still run in parallel.
    with open(LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        main(sys.argv[1])
