"""Matrix multiplication with MetalPerformancePrimitives' matmul2d, as Apple documents it.

Source: Apple's MetalPerformancePrimitives framework header
MetalPerformancePrimitives.framework/Headers/MPPTensorOpsMatMul2d.h (iOS and
macOS 26 SDKs), the examples `simpleMatMul` and `simpleMatMulCooperative` in
its leading comment. Both take tensor parameters exactly as a TorchMetalKernel
body sees its tensors; only two typos of the comment are fixed (the op is
called `matmulOp` but run as `op`, and a `for` uses `,` for `;`), and the
cooperative example's placeholder `foo(cT[i], idx)` is a concrete epilogue,
a ReLU.

Launch as documented: threadgroups of 4 SIMD-groups, ((N + 31) / 32,
(M + 63) / 64) of them (tgid.x walks N in 32s, tgid.y walks M in 64s).
"""

from __future__ import annotations

import math

import pytest
import torch
from corpus_support import launch, randn

from coreai_torch import MetalParameter, TorchMetalKernel

# Every kernel here also runs clean under debug mode's checks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("default_and_debug_mode")

TGID = MetalParameter("tgid", "uint2", "threadgroup_position_in_grid")


def _matmul(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return A.float() @ B.float()


simple_matmul = TorchMetalKernel(
    "apple_mpp_simple_matmul",
    ["A", "B"],
    ["C"],
    src="""
    // descriptor to create matmul operation that does 64x32 times 32x32
    // producing 64x32
    constexpr auto matmulDescriptor =
        matmul2d_descriptor(64, // m outer dim of local tile
                            32, // n outer dim of local tile
                            static_cast<int>(dynamic_extent), // k inner dimension
                            false,  // transpose_left
                            false,  // transpose_right
                            false); // relaxed_precision

    // create matmul op from above descriptor with 4 SIMD-Groups.
    matmul2d<matmulDescriptor, execution_simdgroups<4>> matmulOp;

    auto mA = A.slice(0, tgid.y*64);
    auto mB = B.slice(tgid.x*32, 0);
    auto mC = C.slice(tgid.x*32, tgid.y*64);

    // execute the operation. Assumes C is is initialized to zero.
    matmulOp.run(mA, mB, mC);
    """,
    torch_defn=_matmul,
    metal_params=[TGID],
)


def _matmul_bias_relu(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(A.float() @ B.float() + bias.float())


cooperative_matmul = TorchMetalKernel(
    "apple_mpp_cooperative_matmul",
    ["A", "B", "bias"],
    ["C"],
    src="""
    constexpr auto matmulDescriptor = matmul2d_descriptor(64,
                                                          32,
                                                          static_cast<int>(dynamic_extent));

    matmul2d<matmulDescriptor, execution_simdgroups<4>> matmulOp;

   auto mA = A.slice(0, tgid.y*64);
   auto mB = B.slice(tgid.x*32, 0);
   auto mC = C.slice(tgid.x*32, tgid.y*64);
   auto mbias = bias.slice(tgid.x*32, tgid.y*64);

   auto cT = matmulOp.get_destination_cooperative_tensor<__remove_addrspace_t<decltype(mA)>,
       __remove_addrspace_t<decltype(mB)>, float>();

   #pragma unroll full
   for (uint16_t i = 0; i < cT.get_capacity(); ++i) {
     if(cT.get_mask(i))
       cT[i] = 0;
   }

   matmulOp.run(mA, mB, cT);

   auto biasT = matmulOp.get_destination_cooperative_tensor<__remove_addrspace_t<decltype(mA)>,
       __remove_addrspace_t<decltype(mB)>, float>();

   biasT.load(mbias);

   #pragma unroll full
   for (uint16_t i = 0; i < cT.get_capacity(); ++i) {

     if(cT.get_mask(i)) {
       //add bias
       cT[i] += biasT[i];

       auto idx = cT.get_multidimensional_index(i);
       (void)idx;
       cT[i] = max(cT[i], 0.0f);
     }
   }

  // store to tensor handle
  cT.store(mC);
    """,
    torch_defn=_matmul_bias_relu,
    metal_params=[TGID],
)


def _grid(m: int, n: int) -> tuple[int, int, int]:
    return (128 * math.ceil(n / 32), math.ceil(m / 64), 1)


# float32 sums of K products of half values in another order than torch's:
# a few float32 ulps of sums of magnitude up to ~sqrt(K) * 3.
TOL = {"rtol": 1e-4, "atol": 1e-4}


@pytest.mark.parametrize(("m", "n", "k"), [(64, 32, 16), (100, 45, 37), (130, 70, 64)])
def test_apple_simple_matmul(m: int, n: int, k: int) -> None:
    A, B = randn(m, k, dtype=torch.float16, seed=m), randn(k, n, dtype=torch.float16, seed=n)
    C = launch(
        simple_matmul, A, B, grid=_grid(m, n), group=(128, 1, 1), shapes=[[m, n]], opcheck=m == 64
    )
    assert C.dtype == torch.float32
    torch.testing.assert_close(C, A.float() @ B.float(), **TOL)


@pytest.mark.parametrize(("m", "n", "k"), [(64, 32, 24), (90, 50, 33)])
def test_apple_cooperative_matmul_with_bias_and_relu(m: int, n: int, k: int) -> None:
    A, B = randn(m, k, dtype=torch.float16, seed=k), randn(k, n, dtype=torch.float16, seed=m)
    bias = randn(m, n, dtype=torch.float16, seed=n)
    C = launch(
        cooperative_matmul,
        A,
        B,
        bias,
        grid=_grid(m, n),
        group=(128, 1, 1),
        shapes=[[m, n]],
        opcheck=m == 64,
    )
    torch.testing.assert_close(C, _matmul_bias_relu(A, B, bias), **TOL)
