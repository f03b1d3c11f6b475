// PyTorch's MPS cummin / cummax scan kernels (the SIMD-group scan PyTorch
// adapted from MLX), ported to the CPU backend of coreai_torch for its test
// corpus.
//
// Source: github.com/pytorch/pytorch (BSD-3-Clause license, Copyright (c)
// Meta Platforms, Inc. and affiliates),
// aten/src/ATen/native/mps/kernels/ScanKernel.metal at
// 1fff6356d9f99ec2980052c498dc0b70d513bc6d: its head and the helpers of its
// `__METAL_VERSION__ >= 310` part (the part Metal 3.1 and later compile),
// unchanged. The older part (one thread per row, no SIMD-group functions) is
// left out; the kernels scan_with_indices_innermost_dim and
// scan_with_indices_outer_dim are the bodies in tests/corpus/test_pytorch_mps.py.

// ---- ScanKernel.metal, head

#include <metal_simdgroup>
#include <metal_stdlib>
using namespace metal;

#include <c10/metal/common.h>
#include <c10/metal/utils.h>

using c10::metal::accum_t;

// ---- ScanKernel.metal, `#else // __METAL_VERSION__ >= 310`, up to the kernels

// The reminder of this file contains cummin and cummax implementations adapted
// from MLX:
// https://github.com/ml-explore/mlx/blob/main/mlx/backend/metal/kernels/scan.h
//
// The original MLX kernels have been modified to integrate with PyTorch's MPS
// backend. Most notably:
//  - Keeping track and returning indices, which MLX kernels don't do.
//  - Perform computations on half/bfloat tensors at higher precision (float)
//  via c10::metal::accum_t
//
// Original work is licensed under MIT License:
// https://github.com/ml-explore/mlx/blob/main/LICENSE

inline uint64_t simd_shuffle_and_fill_up(
    uint64_t data,
    uint64_t filling,
    uint16_t delta) {
  return as_type<uint64_t>(metal::simd_shuffle_and_fill_up(
      as_type<uint2>(data), as_type<uint2>(filling), delta));
}

inline int64_t simd_shuffle_and_fill_up(
    int64_t data,
    int64_t filling,
    uint16_t delta) {
  return as_type<int64_t>(metal::simd_shuffle_and_fill_up(
      as_type<uint2>(data), as_type<uint2>(filling), delta));
}

inline bool simd_shuffle_and_fill_up(bool data, bool filling, uint16_t delta) {
  return simd_shuffle_and_fill_up(
      static_cast<uint32_t>(data), static_cast<uint32_t>(filling), delta);
}

inline uint64_t simd_shuffle(uint64_t data, uint16_t lane) {
  return as_type<uint64_t>(metal::simd_shuffle(as_type<uint2>(data), lane));
}

inline int64_t simd_shuffle(int64_t data, uint16_t lane) {
  return as_type<int64_t>(metal::simd_shuffle(as_type<uint2>(data), lane));
}

inline bool simd_shuffle(bool data, uint16_t lane) {
  return simd_shuffle(static_cast<uint32_t>(data), lane);
}

#define DEFINE_SIMD_SCAN()                                               \
  template <typename U, metal::enable_if_t<sizeof(U) < 8, bool> = true>  \
  U simd_scan(U val) {                                                   \
    return simd_scan_impl(val);                                          \
  }                                                                      \
                                                                         \
  template <typename U, metal::enable_if_t<sizeof(U) == 8, bool> = true> \
  U simd_scan(U val) {                                                   \
    for (int i = 1; i <= 16; i *= 2) {                                   \
      val = operator()(val, simd_shuffle_and_fill_up(val, init, i));     \
    }                                                                    \
    return val;                                                          \
  }

#define DEFINE_SIMD_EXCLUSIVE_SCAN()                                     \
  template <typename U, metal::enable_if_t<sizeof(U) < 8, bool> = true>  \
  U simd_exclusive_scan(U val) {                                         \
    return simd_exclusive_scan_impl(val);                                \
  }                                                                      \
                                                                         \
  template <typename U, metal::enable_if_t<sizeof(U) == 8, bool> = true> \
  U simd_exclusive_scan(U val) {                                         \
    val = simd_scan(val);                                                \
    return simd_shuffle_and_fill_up(val, init, 1);                       \
  }

// Pair structure to hold value and index for cummin/cummax operations
template <typename T, typename acc_t = accum_t<T>>
struct ValueIndexPair {
  acc_t value;
  int64_t index;
};

// Helper function to create ValueIndexPair
template <typename T, typename acc_t = accum_t<T>>
inline ValueIndexPair<T, acc_t> make_pair(acc_t v, int64_t i) {
  ValueIndexPair<T, acc_t> result;
  result.value = v;
  result.index = i;
  return result;
}

// Helper function for shuffling pairs in SIMD operations
template <typename T, typename acc_t = accum_t<T>>
inline ValueIndexPair<T, acc_t> simd_shuffle_pair(
    ValueIndexPair<T, acc_t> data,
    uint16_t lane) {
  return make_pair<T, acc_t>(
      simd_shuffle(data.value, lane), simd_shuffle(data.index, lane));
}

template <typename T, typename acc_t = accum_t<T>>
struct CumMinOp {
  using pair_t = ValueIndexPair<T, acc_t>;

  static constexpr constant acc_t init_val = static_cast<acc_t>(
      metal::is_floating_point_v<T> ? metal::numeric_limits<T>::infinity()
                                    : metal::numeric_limits<T>::max());

  static pair_t get_init() {
    return make_pair<T, acc_t>(init_val, 0);
  }

  pair_t operator()(pair_t a, pair_t b) {
    if (::metal::isnan(static_cast<float>(a.value)) &&
        ::metal::isnan(static_cast<float>(b.value))) {
      return (a.index >= b.index) ? a : b;
    } else if (::metal::isnan(static_cast<float>(a.value))) {
      return a;
    } else if (::metal::isnan(static_cast<float>(b.value))) {
      return b;
    } else if (a.value < b.value) {
      return a;
    } else if (a.value > b.value) {
      return b;
    } else {
      return (a.index >= b.index) ? a : b;
    }
  }

  // For SIMD operations, we need to handle pairs differently
  pair_t simd_scan(pair_t val) {
    // For pairs, we need to implement scan manually since SIMD doesn't support
    // pairs directly
    pair_t init_val = get_init();
    for (int i = 1; i <= 16; i *= 2) {
      pair_t shuffled = make_pair<T, acc_t>(
          simd_shuffle_and_fill_up(val.value, init_val.value, i),
          simd_shuffle_and_fill_up(val.index, init_val.index, i));
      val = operator()(val, shuffled);
    }
    return val;
  }

  pair_t simd_exclusive_scan(pair_t val) {
    val = simd_scan(val);
    pair_t init_val = get_init();
    return simd_shuffle_and_fill_up_pair(val, init_val, 1);
  }

 private:
  pair_t simd_shuffle_pair(pair_t data, uint16_t delta) {
    pair_t init_val = get_init();
    return make_pair<T, acc_t>(
        simd_shuffle_and_fill_up(data.value, init_val.value, delta),
        simd_shuffle_and_fill_up(data.index, init_val.index, delta));
  }

  pair_t simd_shuffle_and_fill_up_pair(
      pair_t data,
      pair_t filling,
      uint16_t delta) {
    return make_pair<T, acc_t>(
        simd_shuffle_and_fill_up(data.value, filling.value, delta),
        simd_shuffle_and_fill_up(data.index, filling.index, delta));
  }
};

template <typename T, typename acc_t = accum_t<T>>
struct CumMaxOp {
  using pair_t = ValueIndexPair<T, acc_t>;

  static constexpr constant acc_t init_val = static_cast<acc_t>(
      metal::is_floating_point_v<T> ? -metal::numeric_limits<T>::infinity()
                                    : metal::numeric_limits<T>::lowest());

  static pair_t get_init() {
    return make_pair<T, acc_t>(init_val, 0);
  }

  pair_t operator()(pair_t a, pair_t b) {
    if (::metal::isnan(static_cast<float>(a.value)) &&
        ::metal::isnan(static_cast<float>(b.value))) {
      return (a.index >= b.index) ? a : b;
    } else if (::metal::isnan(static_cast<float>(a.value))) {
      return a;
    } else if (::metal::isnan(static_cast<float>(b.value))) {
      return b;
    } else if (a.value > b.value) {
      return a;
    } else if (a.value < b.value) {
      return b;
    } else {
      return (a.index >= b.index) ? a : b;
    }
  }

  // For SIMD operations, we need to handle pairs differently
  pair_t simd_scan(pair_t val) {
    // For pairs, we need to implement scan manually since SIMD doesn't support
    // pairs directly
    pair_t init_val = get_init();
    for (int i = 1; i <= 16; i *= 2) {
      pair_t shuffled = make_pair<T, acc_t>(
          simd_shuffle_and_fill_up(val.value, init_val.value, i),
          simd_shuffle_and_fill_up(val.index, init_val.index, i));
      val = operator()(val, shuffled);
    }
    return val;
  }

  pair_t simd_exclusive_scan(pair_t val) {
    val = simd_scan(val);
    pair_t init_val = get_init();
    return simd_shuffle_and_fill_up_pair(val, init_val, 1);
  }

 private:
  pair_t simd_shuffle_pair(pair_t data, uint16_t delta) {
    pair_t init_val = get_init();
    return make_pair<T, acc_t>(
        simd_shuffle_and_fill_up(data.value, init_val.value, delta),
        simd_shuffle_and_fill_up(data.index, init_val.index, delta));
  }

  pair_t simd_shuffle_and_fill_up_pair(
      pair_t data,
      pair_t filling,
      uint16_t delta) {
    return make_pair<T, acc_t>(
        simd_shuffle_and_fill_up(data.value, filling.value, delta),
        simd_shuffle_and_fill_up(data.index, filling.index, delta));
  }
};

template <typename T, int N_READS, typename acc_t = accum_t<T>>
inline void load_unsafe(acc_t values[N_READS], const device T* input) {
  for (int i = 0; i < N_READS; i++) {
    values[i] = static_cast<acc_t>(input[i]);
  }
}

template <typename T, int N_READS, typename acc_t = accum_t<T>>
inline void load_safe(
    acc_t values[N_READS],
    const device T* input,
    int start,
    int total,
    acc_t init) {
  for (int i = 0; i < N_READS; i++) {
    values[i] = (start + i < total) ? static_cast<acc_t>(input[i]) : init;
  }
}

template <typename T, int N_READS, typename acc_t = accum_t<T>>
inline void write_unsafe(acc_t values[N_READS], device T* out) {
  for (int i = 0; i < N_READS; i++) {
    out[i] = static_cast<T>(values[i]);
  }
}

template <typename T, int N_READS, typename acc_t = accum_t<T>>
inline void write_safe(
    acc_t values[N_READS],
    device T* out,
    int start,
    int total) {
  for (int i = 0; i < N_READS; i++) {
    if (start + i < total) {
      out[i] = static_cast<T>(values[i]);
    }
  }
}

// Utility function for ceiling division
template <typename T, typename U>
inline T ceildiv(T N, U M) {
  return (N + M - 1) / M;
}
