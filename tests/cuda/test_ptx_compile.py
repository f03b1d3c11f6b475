"""Every kernel the test session launched compiles for NVIDIA GPUs, with no GPU needed.

The CPU backend and the CUDA backend compile the same rendering against the
same headers; this keeps the GPU target from rotting between GPU runs. Each
kernel specialization that some test launched successfully on the CPU
(kernel_testing.LAUNCHED_KERNELS; this module runs last) is compiled to PTX
by the CUDA backend's JIT, and the PTX to machine code for the H200 (sm_90) by
ptxas. Run alone, it first runs the kernel corpora in a child session that
ends with this very test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cuda_tools import find_ptxas
from kernel_testing import LAUNCHED_KERNELS

from coreai_torch import _C

ARCH = "sm_90"
TESTS = Path(__file__).resolve().parents[1]
# The kernel corpora, for a run of this module alone.
CORPORA = [
    TESTS / "test_opcheck.py",
    TESTS / "cpu" / "test_msl_kernels.py",
    TESTS / "cpu" / "test_launch_dispatch.py",
    TESTS / "cpu" / "test_launch_sync.py",
]
_CHILD = "COREAI_TORCH_PTX_CHILD_SESSION"


def _compile(name: str, handle: int, ptxas: str | None, scratch: Path) -> str:
    """'' if kernel `handle` compiles to PTX (and with ptxas to sm_90 code), else why not."""
    try:
        ptx = _C._cuda_ptx(handle, ARCH)
    except RuntimeError as exc:
        return f"kernel '{name}' (handle {handle}) does not compile to PTX:\n{exc}"
    if ptxas is None:
        return ""
    path = scratch / f"{handle}.ptx"
    path.write_text(ptx)
    result = subprocess.run(
        [ptxas, f"-arch={ARCH}", str(path), "-o", os.devnull], capture_output=True, text=True
    )
    if result.returncode != 0:
        return f"kernel '{name}' (handle {handle}): ptxas rejects its PTX:\n{result.stderr}"
    return ""


def test_every_launched_kernel_compiles_for_the_gpu() -> None:
    if not LAUNCHED_KERNELS:
        assert os.environ.get(_CHILD) is None, "the kernel corpora launched no kernel"
        child = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CORPORA, __file__],
            cwd=TESTS.parent,
            env={**os.environ, _CHILD: "1"},
            capture_output=True,
            text=True,
        )
        assert child.returncode == 0, child.stdout[-8000:] + child.stderr[-2000:]
        return
    ptxas = find_ptxas()
    # Each specialization once: repeated registrations share a handle.
    kernels = sorted(set(LAUNCHED_KERNELS), key=lambda k: k[1])
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=2) as pool:
        failures = [
            f for f in pool.map(lambda k: _compile(k[0], k[1], ptxas, Path(tmp)), kernels) if f
        ]
    assert not failures, f"{len(failures)} of {len(kernels)} kernels fail:\n\n" + "\n\n".join(
        failures[:10]
    )
    if ptxas is None:
        pytest.skip(
            f"all {len(kernels)} kernels compile to PTX; ptxas was not found to check the "
            "machine code (scripts/install.sh --test installs it)"
        )
