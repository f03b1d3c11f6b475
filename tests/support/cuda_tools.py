"""What the CUDA tests need: the GPU, ptxas, and the backend's compile command."""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
requires_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
)


def find_ptxas() -> str | None:
    """ptxas from PATH, $CUDA_HOME, /usr/local/cuda or the nvidia-cuda-nvcc wheels."""
    found = shutil.which("ptxas")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    site = Path(sysconfig.get_paths()["purelib"])
    roots += [str(site / "nvidia" / "cu13"), str(site / "nvidia" / "cuda_nvcc")]
    for root in roots:
        candidate = Path(root) / "bin" / "ptxas"
        if root and candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None
