"""Run in a fresh process by bench_cpu.py (``startup_probe.py``) and bench_cuda.py
(``startup_probe.py cuda``): how long until the first kernel result on that device.

Prints one JSON object (seconds): ``import_torch``, ``import_coreai_torch``
(after torch), and ``first_result``, from just before the first kernel call
(imports and kernel definitions done, inputs allocated) until its result is
back. The kernel cache directory comes from ``COREAI_TORCH_CACHE_DIR``, so the
caller decides whether this is a cold or a warm start.
"""

import json
import sys
import time
from pathlib import Path

start = time.perf_counter()
import torch  # noqa: E402

after_torch = time.perf_counter()
import coreai_torch  # noqa: E402, F401

after_coreai = time.perf_counter()

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_kernels  # noqa: E402

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
x, y = torch.randn(1024, device=device), torch.randn(1024, device=device)
if device == "cuda":
    torch.cuda.synchronize()  # the CUDA context exists before the clock starts
before_call = time.perf_counter()
out = bench_kernels.add(
    x,
    y,
    threads_per_grid=(1024, 1, 1),
    threads_per_thread_group=(256, 1, 1),
    result_shapes=[[1024]],
)
if device == "cuda":
    torch.cuda.synchronize()
after_call = time.perf_counter()

# A fast wrong answer is not a result.
torch.testing.assert_close(out, x + y, rtol=0, atol=0)
print(
    json.dumps(
        {
            "import_torch": after_torch - start,
            "import_coreai_torch": after_coreai - after_torch,
            "first_result": after_call - before_call,
        }
    )
)
