"""Every kernel the test session launched compiles for NVIDIA GPUs, with no GPU needed.

The CPU backend and the CUDA backend compile the same rendering against the
same headers; this keeps the GPU target from rotting between GPU runs. Each
kernel specialization that some test launched successfully on the CPU
(kernel_testing.LAUNCHED; this module runs last, tests/conftest.py) is
compiled to PTX by the CUDA backend's JIT, and the PTX to machine code for the
H200 (sm_90) by ptxas. Run alone, it first runs the kernel corpora in a child
session that ends with this very test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from support.cuda_tools import find_ptxas
from support.kernel_testing import LAUNCHED

from coreai_torch import _C

ARCH = "sm_90"
TESTS = Path(__file__).resolve().parents[1]
# The kernel corpora, for a run of this module alone.
CORPORA = [
    TESTS / "test_opcheck.py",
    TESTS / "cpu" / "test_msl_kernels.py",
    TESTS / "cpu" / "test_launch_dispatch.py",
    TESTS / "cpu" / "test_launch_sync.py",
    TESTS / "corpus",
]
_CHILD = "COREAI_TORCH_PTX_CHILD_SESSION"


def _compile(name: str, registration: tuple, ptxas: str, scratch: Path) -> str:
    """'' if the kernel compiles to PTX and with ptxas to sm_90 code, else why not.

    A kernel with SIMD-group matrices is compiled in both of its forms: for
    launches with partial SIMD-groups and for launches without.
    """
    args = [list(a) if isinstance(a, tuple) else a for a in registration]
    handle = torch.ops.coreai_torch.register_kernel.default(*args)
    ptxs = {}
    try:
        forms = [False, True] if _C._cuda_uses_simdgroup_matrices(handle) else [False]
        for whole in forms:
            ptxs[whole] = _C._cuda_ptx(handle, ARCH, whole)
    except RuntimeError as exc:
        form = "whole" if len(ptxs) == 1 else "partial"
        return f"kernel '{name}' does not compile to PTX ({form} SIMD-groups):\n{exc}"
    finally:
        torch.ops.coreai_torch.release_kernel.default(handle)
    for whole, ptx in ptxs.items():
        path = scratch / f"{registration[2]}-{handle}-{int(whole)}.ptx"
        path.write_text(ptx)
        result = subprocess.run(
            [ptxas, f"-arch={ARCH}", str(path), "-o", os.devnull], capture_output=True, text=True
        )
        if result.returncode != 0:
            return (
                f"kernel '{name}' (entry {registration[2]}, whole SIMD-groups: {whole}): "
                f"ptxas rejects its PTX:\n{result.stderr}"
            )
    return ""


def test_every_launched_kernel_compiles_for_the_gpu() -> None:
    if not LAUNCHED:
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
    assert ptxas is not None, (
        "ptxas was not found (PATH, $CUDA_HOME, /usr/local/cuda, the nvidia-cuda-nvcc wheel); "
        "scripts/install.sh --test installs it"
    )
    kernels = sorted(LAUNCHED.items(), key=lambda item: item[0][2])  # by entry name
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=2) as pool:
        failures = [
            f for f in pool.map(lambda k: _compile(k[1], k[0], ptxas, Path(tmp)), kernels) if f
        ]
    assert not failures, f"{len(failures)} of {len(kernels)} kernels fail:\n\n" + "\n\n".join(
        failures[:10]
    )
