// MLX's affine quantization helpers, ported to the CPU backend of coreai_torch for its test corpus.
//
// Source: github.com/ml-explore/mlx at 846d176227a0ac13d2667e58d2bb68b322109ab0
// (MIT license, Copyright © 2023-2024 Apple Inc.), mlx/backend/metal/kernels/:
// the files below, in dependency order, unchanged except for their
// repository-relative #include lines, which corpus_support.helper_source drops.
// From quantized.h only what affine_quantize and affine_dequantize use (the file's
// function constants belong to its matmul kernels); common.metal comes first.

// ---- mlx/backend/metal/kernels/quantized.h: pack helpers

using namespace metal;

#define MLX_MTL_CONST static constant constexpr const

MLX_MTL_CONST int SIMD_SIZE = 32;
MLX_MTL_CONST int QUAD_SIZE = 4;

template <int bits, int wsize = 8>
inline constexpr short get_pack_factor() {
  return (bits == 3 || bits == 5) ? 8 : (bits == 6 ? 4 : wsize / bits);
}

template <int bits, int wsize = 8>
inline constexpr short get_bytes_per_pack() {
  constexpr int power_of_2_bits = (bits & (bits - 1)) == 0;
  return power_of_2_bits ? (wsize / 8) : (bits == 5 ? 5 : 3);
}

