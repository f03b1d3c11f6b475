"""tinygrad's hand-written Metal matmul, on the CPU backend.

Source: github.com/tinygrad/tinygrad, extra/gemm/metal_matmul.py, the kernel
`test` that script compiles (MIT license). It multiplies two N x N float32
matrices with simdgroup_float8x8 tiles: each SIMD-group owns a 32 x 32 block
of the result as 4 x 4 accumulators, loads 8 x 8 slices of both operands
straight from device memory with simdgroup_load, and stores with
simdgroup_store.

Adapted: tinygrad pastes N and LID (= 2, SIMD-groups per threadgroup along y)
into the source with an f-string; here N is the operand's extent and LID a
constant, and the three buffers are the tensor views' data. The kernel has no
bounds checks: like the original (whose script asserts N % 64 == 0 through
its grid), it runs on N that are multiples of 32 * LID.
"""

from __future__ import annotations

import pytest
import torch
from corpus_support import launch, randn

from coreai_torch import MetalParameter, TorchMetalKernel

# Every kernel here also runs clean under debug mode's checks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("default_and_debug_mode")

LID = 2

SOURCE = """
device float *a = out.get_data_ptr();
device const float *data1 = x.get_data_ptr();
device const float *data2 = y.get_data_ptr();
const uint N = x.get_extent(0);
const uint LID = 2;
  a += gid.x * 32 * N + (gid.y * LID + lid.y) * 32;
  data1 += gid.x * 32 * N;
  data2 += (gid.y * LID + lid.y) * 32;

  simdgroup_float8x8 acc[4][4];
  for (uint i = 0; i < 4; i++) {
    for (uint j = 0; j < 4; j++) {
      acc[i][j] = simdgroup_float8x8(0);
    }
  }

  simdgroup_float8x8 A[4];
  simdgroup_float8x8 B[4];
  for (uint k = 0; k < N; k+=8) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_load(A[0], data1+k+(0*N), N, ulong2(0, 0));
    simdgroup_load(A[1], data1+k+(8*N), N, ulong2(0, 0));
    simdgroup_load(A[2], data1+k+(16*N), N, ulong2(0, 0));
    simdgroup_load(A[3], data1+k+(24*N), N, ulong2(0, 0));
    simdgroup_load(B[0], data2+0+k*(N), N, ulong2(0, 0));
    simdgroup_load(B[1], data2+8+k*(N), N, ulong2(0, 0));
    simdgroup_load(B[2], data2+16+k*(N), N, ulong2(0, 0));
    simdgroup_load(B[3], data2+24+k*(N), N, ulong2(0, 0));

    simdgroup_multiply_accumulate(acc[0][0], A[0], B[0], acc[0][0]);
    simdgroup_multiply_accumulate(acc[0][1], A[1], B[0], acc[0][1]);
    simdgroup_multiply_accumulate(acc[0][2], A[2], B[0], acc[0][2]);
    simdgroup_multiply_accumulate(acc[0][3], A[3], B[0], acc[0][3]);
    simdgroup_multiply_accumulate(acc[1][0], A[0], B[1], acc[1][0]);
    simdgroup_multiply_accumulate(acc[1][1], A[1], B[1], acc[1][1]);
    simdgroup_multiply_accumulate(acc[1][2], A[2], B[1], acc[1][2]);
    simdgroup_multiply_accumulate(acc[1][3], A[3], B[1], acc[1][3]);
    simdgroup_multiply_accumulate(acc[2][0], A[0], B[2], acc[2][0]);
    simdgroup_multiply_accumulate(acc[2][1], A[1], B[2], acc[2][1]);
    simdgroup_multiply_accumulate(acc[2][2], A[2], B[2], acc[2][2]);
    simdgroup_multiply_accumulate(acc[2][3], A[3], B[2], acc[2][3]);
    simdgroup_multiply_accumulate(acc[3][0], A[0], B[3], acc[3][0]);
    simdgroup_multiply_accumulate(acc[3][1], A[1], B[3], acc[3][1]);
    simdgroup_multiply_accumulate(acc[3][2], A[2], B[3], acc[3][2]);
    simdgroup_multiply_accumulate(acc[3][3], A[3], B[3], acc[3][3]);
  }
  simdgroup_store(acc[0][0], a+(0+0*N), N, ulong2(0, 0));
  simdgroup_store(acc[1][0], a+(8+0*N), N, ulong2(0, 0));
  simdgroup_store(acc[2][0], a+(16+0*N), N, ulong2(0, 0));
  simdgroup_store(acc[3][0], a+(24+0*N), N, ulong2(0, 0));
  simdgroup_store(acc[0][1], a+(0+8*N), N, ulong2(0, 0));
  simdgroup_store(acc[1][1], a+(8+8*N), N, ulong2(0, 0));
  simdgroup_store(acc[2][1], a+(16+8*N), N, ulong2(0, 0));
  simdgroup_store(acc[3][1], a+(24+8*N), N, ulong2(0, 0));
  simdgroup_store(acc[0][2], a+(0+16*N), N, ulong2(0, 0));
  simdgroup_store(acc[1][2], a+(8+16*N), N, ulong2(0, 0));
  simdgroup_store(acc[2][2], a+(16+16*N), N, ulong2(0, 0));
  simdgroup_store(acc[3][2], a+(24+16*N), N, ulong2(0, 0));
  simdgroup_store(acc[0][3], a+(0+24*N), N, ulong2(0, 0));
  simdgroup_store(acc[1][3], a+(8+24*N), N, ulong2(0, 0));
  simdgroup_store(acc[2][3], a+(16+24*N), N, ulong2(0, 0));
  simdgroup_store(acc[3][3], a+(24+24*N), N, ulong2(0, 0));
"""


def _matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x @ y


tinygrad_matmul = TorchMetalKernel(
    "tinygrad_metal_matmul",
    ["x", "y"],
    ["out"],
    src=SOURCE,
    torch_defn=_matmul,
    metal_params=[
        MetalParameter("gid", "uint3", "threadgroup_position_in_grid"),
        MetalParameter("lid", "uint3", "thread_position_in_threadgroup"),
    ],
)


@pytest.mark.parametrize("n", [64, 128])
def test_tinygrad_metal_matmul(n: int) -> None:
    x, y = randn(n, n, seed=n), randn(n, n, seed=n + 1)
    # global_size [N / 32, N / (32 * LID)] threadgroups of [32, LID] threads.
    out = launch(
        tinygrad_matmul,
        x,
        y,
        grid=(n, n // 32, 1),
        group=(32, LID, 1),
        shapes=[[n, n]],
        opcheck=n == 64,
    )
    # float32 sums of n products of randn values, in another order than
    # torch's: a few ulps of sums of magnitude ~sqrt(n) * 3.
    torch.testing.assert_close(out, x @ y, rtol=1e-4, atol=1e-4)
