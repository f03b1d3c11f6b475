"""Every kernel a test launches on the CPU also compiles for NVIDIA GPUs, with no GPU needed.

The CPU backend and the CUDA backend compile the same rendering against the
same headers; this keeps the GPU target from rotting between GPU runs. The
first successful CPU launch of each specialization in a test session
(``kernel_testing.record_launch``) compiles it to PTX with the CUDA backend's
JIT and the PTX to machine code for the H200 (sm_90) with ptxas, there and
then: a kernel that does not compile for the GPU fails the test that launched
it, naming the kernel. Compiles land in the kernel cache, so a test run
repeated with a warm cache pays nothing for them.

Without NVIDIA's libdevice and ptxas (``scripts/install.sh --test`` installs
them from PyPI) the check is off, except where ``CI`` is set: there a missing
toolchain fails the run (``tests/cuda/test_ptx_compile.py``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from coreai_torch import _C
from support.cuda_tools import find_ptxas

ARCH = "sm_90"
_CHECKED: set[tuple] = set()
_LOCK = threading.Lock()


def toolchain_problem() -> str:
    """'' when kernels can be compiled for the GPU here, else what is missing."""
    if find_ptxas() is None:
        return (
            "ptxas was not found (PATH, $CUDA_HOME, /usr/local/cuda, the nvidia-cuda-nvcc "
            "wheel); scripts/install.sh --test installs it"
        )
    if not _C._cuda_libdevice():
        return (
            "NVIDIA's libdevice.10.bc was not found ($COREAI_TORCH_LIBDEVICE, $CUDA_HOME, "
            "/usr/local/cuda, the nvidia-nvvm wheel); scripts/install.sh --test installs it"
        )
    return ""


ENABLED = not toolchain_problem()
# Switched on by the test session (tests/conftest.py), not in the child
# processes of tests, whose private kernel caches are theirs to count.
_ACTIVE = False


def activate() -> None:
    """Checks the launches of this process from now on (where the toolchain is here)."""
    global _ACTIVE
    _ACTIVE = True


def _form_name(whole: bool, aligned: bool, steps: int) -> str:
    simdgroups = "whole SIMD-groups" if whole else "partial SIMD-groups"
    tensors = "aligned tensors" if aligned else "any tensors"
    per_thread = f", {steps} Metal threads per CUDA thread" if steps > 1 else ""
    return f"{simdgroups}, {tensors}{per_thread}"


def steps_of(group: tuple[int, int, int] | list[int]) -> int:
    """The Metal threads per CUDA thread a launch of threadgroups of ``group``
    asks for (cuda/launcher.cpp, steps_of): 1 up to 256 threads, else
    threads / 256, at most 4, for multiples of 256."""
    threads = group[0] * group[1] * group[2]
    return min(threads // 256, 4) if threads > 256 and threads % 256 == 0 else 1


def compile_for_gpu(
    name: str, registration: tuple, steps: int = 1, one_step_forms: bool = True
) -> str:
    """'' if the kernel compiles to PTX and with ptxas to sm_90 code, else why not.

    The kernel is compiled in the launch forms (cuda/target.h, LaunchForm)
    that most launches take: for any tensors and for aligned ones; a kernel
    with SIMD-group matrices also for launches of whole SIMD-groups with
    aligned tensors, the form its benchmarks and models run in; launched
    with threadgroups that take ``steps`` Metal threads per CUDA thread
    (``steps_of``), a kernel with a steps form also in that form, for
    aligned tensors (``one_step_forms`` False: in that form only).
    """
    args = [list(a) if isinstance(a, tuple) else a for a in registration]
    handle = torch.ops.coreai_torch.register_kernel.default(*args)
    forms = [(False, False, 1), (False, True, 1)] if one_step_forms else []
    ptxs = {}
    try:
        if one_step_forms and _C._cuda_uses_simdgroup_matrices(handle):
            forms.append((True, True, 1))
        if steps > 1 and not _C._cuda_steps_form(registration[1])[0]:
            forms.append((False, True, steps))
        for whole, aligned, steps in forms:
            ptxs[whole, aligned, steps] = _C._cuda_ptx(handle, ARCH, whole, aligned, steps)
    except RuntimeError as exc:
        form = _form_name(*forms[len(ptxs)])
        return f"kernel '{name}' does not compile to PTX ({form}):\n{exc}"
    finally:
        torch.ops.coreai_torch.release_kernel.default(handle)
    with tempfile.TemporaryDirectory(prefix="coreai-ptx-") as scratch:
        for (whole, aligned, steps), ptx in ptxs.items():
            path = Path(scratch) / f"{registration[2]}-{int(whole)}{int(aligned)}{steps}.ptx"
            path.write_text(ptx)
            result = subprocess.run(
                [find_ptxas(), f"-arch={ARCH}", str(path), "-o", os.devnull],
                capture_output=True,
                text=True,
            )
            if result.returncode != 0:
                return (
                    f"kernel '{name}' (entry {registration[2]}, "
                    f"{_form_name(whole, aligned, steps)}): "
                    f"ptxas rejects its PTX:\n{result.stderr}"
                )
    return ""


def check_launched(name: str, registration: tuple, steps: int = 1) -> None:
    """Compiles a newly launched specialization for the GPU once per session and
    number of steps (see above)."""
    if not (ENABLED and _ACTIVE):
        return
    with _LOCK:
        if (registration, steps) in _CHECKED:
            return
        first = not any(r == registration for r, _ in _CHECKED)
        _CHECKED.add((registration, steps))
    failure = compile_for_gpu(name, registration, steps, one_step_forms=first)
    assert not failure, (
        f"{failure}\n(kernels that run on the CPU backend must also compile for the CUDA "
        "backend: the two compile the same rendering against the same headers)"
    )


def checked_count() -> int:
    """How many specializations this process has compiled for the GPU."""
    return len({registration for registration, _ in _CHECKED})
