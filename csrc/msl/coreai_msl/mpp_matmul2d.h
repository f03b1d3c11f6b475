// MetalPerformancePrimitives' matmul2d for the CPU backend (Apple's API:
// MetalPerformancePrimitives.framework/Headers/MPPTensorOpsMatMul2d.h).
//
//   constexpr auto d = matmul2d_descriptor(m, n, k, transpose_left, transpose_right,
//                                          relaxed_precision, mode);
//   matmul2d<d, execution_simdgroups<4>> op;
//   op.run(A, B, C);        // C (m x n) = A (m x k) * B (k x n) [+ C]
//
// Semantics kept from Apple's header documentation:
//  - Operands are tensors in Metal order: A has extents (k, m), or (m, k) with
//    transpose_left; B has (n, k), or (k, n) with transpose_right; the
//    destination is a tensor with extents (n, m) or a cooperative tensor from
//    get_destination_cooperative_tensor. A k of dynamic_extent (-1) takes K
//    from A's extents.
//  - Elements outside an operand's extents count as zero and destination
//    elements outside its extents are not written, so slices at the matrix
//    edge work without padding; a static k reads k elements.
//  - mode::multiply overwrites the destination, multiply_accumulate adds to it.
//  - Every thread of the scope calls run(); with a tensor destination the
//    tile is split among them, with a cooperative tensor each computes the
//    elements it owns (cooperative_tensor.h).
// Products are summed in float (int32 for 8-bit integer operands) in order of
// k and rounded once to the destination type; relaxed_precision changes
// nothing here. Cooperative-tensor operands (left/right input tensors) are not
// supported and fail to compile with a message saying so.
#ifndef COREAI_MSL_MPP_MATMUL2D_H
#define COREAI_MSL_MPP_MATMUL2D_H

#include <cstdint>
#include <type_traits>

#include "cooperative_tensor.h"
#include "numeric_limits.h"
#include "tensor.h"

namespace mpp::tensor_ops {

enum class reduction_operation { sum, max, min };

struct matmul2d_descriptor {
  enum class mode { multiply, multiply_accumulate };

  int m, n, k;
  bool transpose_left, transpose_right;
  bool relaxed_precision;
  mode matmul_mode;

  constexpr matmul2d_descriptor(int m_, int n_, int k_ = static_cast<int>(metal::dynamic_extent),
                                bool transpose_left_ = false, bool transpose_right_ = false,
                                bool relaxed_precision_ = false, mode matmul_mode_ = mode::multiply)
      : m(m_),
        n(n_),
        k(k_),
        transpose_left(transpose_left_),
        transpose_right(transpose_right_),
        relaxed_precision(relaxed_precision_),
        matmul_mode(matmul_mode_) {}
};

template <class ElementType>
struct reduction_operation_identity {
  static constexpr ElementType sum_identity = ElementType(0);
  static constexpr ElementType max_identity = metal::numeric_limits<ElementType>::lowest();
  static constexpr ElementType min_identity = metal::numeric_limits<ElementType>::max();
};

namespace matmul_detail {

template <class T>
inline constexpr bool is_cooperative_v = false;
template <class E, class X, class L>
inline constexpr bool is_cooperative_v<metal::cooperative_tensor<E, X, L>> = true;

template <class T>
using element_t = std::remove_cv_t<typename std::remove_cvref_t<T>::element_type>;

// The type products are summed in.
template <class A, class B>
using accumulator_t =
    std::conditional_t<std::is_integral_v<A> && std::is_integral_v<B>, std::int32_t, float>;

// Element (r, c) of an operand stored as (c, r) in Metal order, or transposed;
// zero outside its extents.
template <class Acc, class Tensor>
inline Acc read(const Tensor& t, int r, int c, bool transposed) {
  const int x = transposed ? r : c, y = transposed ? c : r;
  if (x < 0 || y < 0 || x >= static_cast<int>(t.get_extent(0)) ||
      y >= static_cast<int>(t.get_extent(1))) {
    return Acc(0);
  }
  return static_cast<Acc>(t[x, y]);
}

}  // namespace matmul_detail

template <matmul2d_descriptor Descriptor, class Scope, class... Args>
class matmul2d {
  static_assert(metal::cooperative_detail::is_scope_v<Scope>,
                "matmul2d: the scope is execution_thread, execution_simdgroup or "
                "execution_simdgroups<N>");
  static_assert(Descriptor.m > 0 && Descriptor.n > 0,
                "matmul2d_descriptor: m and n are the tile's static sizes");

 public:
  static constexpr matmul2d_descriptor descriptor = Descriptor;
  using scope = Scope;

  template <class Left, class Right, class ElementType, class CoordType = int>
  using cooperative_tensor_destination_t =
      metal::cooperative_tensor<ElementType, metal::extents<CoordType, Descriptor.n, Descriptor.m>,
                                metal::cooperative_layout<Descriptor.m, Descriptor.n, Scope>>;
  template <class Left, class Right, class ElementType, class CoordType = int>
  using cooperative_tensor_row_reduction_destination_t =
      metal::cooperative_tensor<ElementType, metal::extents<CoordType, Descriptor.m>,
                                metal::cooperative_layout<Descriptor.m, 1, Scope>>;
  template <class Left, class Right, class ElementType, class CoordType = int>
  using cooperative_tensor_column_reduction_destination_t =
      metal::cooperative_tensor<ElementType, metal::extents<CoordType, Descriptor.n>,
                                metal::cooperative_layout<1, Descriptor.n, Scope>>;

  template <class Left, class Right, class ElementType, class CoordType = int>
  cooperative_tensor_destination_t<Left, Right, ElementType, CoordType>
  get_destination_cooperative_tensor() const {
    return {};
  }
  template <class Left, class Right, class ElementType, class CoordType = int>
  cooperative_tensor_row_reduction_destination_t<Left, Right, ElementType, CoordType>
  get_row_reduction_destination_cooperative_tensor() const {
    return {};
  }
  template <class Left, class Right, class ElementType, class CoordType = int>
  cooperative_tensor_column_reduction_destination_t<Left, Right, ElementType, CoordType>
  get_column_reduction_destination_cooperative_tensor() const {
    return {};
  }

  template <class Left, class Right, class Destination>
  void run(const Left& left, const Right& right, Destination& destination) const {
    static_assert(!matmul_detail::is_cooperative_v<Left> &&
                      !matmul_detail::is_cooperative_v<Right>,
                  "matmul2d: cooperative-tensor operands (get_left_input_cooperative_tensor, "
                  "get_right_input_cooperative_tensor) are not supported by the CPU backend of "
                  "coreai_torch; pass tensors in device or threadgroup memory");
    using Acc = accumulator_t<Left, Right>;
    constexpr bool tl = Descriptor.transpose_left, tr = Descriptor.transpose_right;
    const int k = Descriptor.k >= 0 ? Descriptor.k
                                    : static_cast<int>(left.get_extent(tl ? 1 : 0));
    // The part of the tile the operands cover.
    const int left_rows = static_cast<int>(left.get_extent(tl ? 0 : 1));
    const int right_cols = static_cast<int>(right.get_extent(tr ? 1 : 0));
    const int rows = left_rows < Descriptor.m ? left_rows : Descriptor.m;
    const int cols = right_cols < Descriptor.n ? right_cols : Descriptor.n;
    auto product = [&](int r, int c) {
      Acc sum = Acc(0);
      for (int i = 0; i < k; ++i) {
        sum += matmul_detail::read<Acc>(left, r, i, tl) * matmul_detail::read<Acc>(right, i, c, tr);
      }
      return sum;
    };
    constexpr bool accumulate =
        Descriptor.matmul_mode == matmul2d_descriptor::mode::multiply_accumulate;
    if constexpr (matmul_detail::is_cooperative_v<Destination>) {
      using Out = typename Destination::value_type;
      destination.set_valid_extent(rows, cols);
      for (int i = 0; i < destination.get_capacity(); ++i) {
        if (!destination.get_mask(i)) continue;
        const Acc p = product(destination.row_of(i), destination.column_of(i));
        destination[i] = accumulate ? static_cast<Out>(static_cast<Acc>(destination[i]) + p)
                                    : static_cast<Out>(p);
      }
    } else {
      using Out = matmul_detail::element_t<Destination>;
      const metal::cooperative_detail::member me = metal::cooperative_detail::join<Scope>();
      for (int e = static_cast<int>(me.index); e < Descriptor.m * Descriptor.n;
           e += static_cast<int>(me.count)) {
        const int r = e / Descriptor.n, c = e % Descriptor.n;
        if (c >= static_cast<int>(destination.get_extent(0)) ||
            r >= static_cast<int>(destination.get_extent(1))) {
          continue;
        }
        auto& out = destination[c, r];
        const Acc p = product(r, c);
        out = accumulate ? static_cast<Out>(static_cast<Acc>(out) + p) : static_cast<Out>(p);
      }
    }
  }

 private:
  template <class Left, class Right>
  using accumulator_t = matmul_detail::accumulator_t<matmul_detail::element_t<Left>,
                                                     matmul_detail::element_t<Right>>;
};

namespace matmul_detail {

template <class T>
inline T combine(reduction_operation op, T a, T b) {
  switch (op) {
    case reduction_operation::max:
      return b > a ? b : a;
    case reduction_operation::min:
      return b < a ? b : a;
    default:
      return a + b;
  }
}

// destination[j] = op over the valid source elements whose row (by_rows) or
// column is destination j's index.
template <bool by_rows, class E, class SX, class DX, class SL, class DL>
inline void reduce(const metal::cooperative_tensor<E, SX, SL>& source,
                   metal::cooperative_tensor<E, DX, DL>& destination, reduction_operation op,
                   E identity) {
  using Scope = typename SL::scope;
  static_assert(std::is_same_v<Scope, typename DL::scope>,
                "reduce_rows/reduce_columns: both tensors come from one operation's scope");
  using Src = metal::cooperative_tensor<E, SX, SL>;
  auto key = [&](int i) { return by_rows ? source.row_of(i) : source.column_of(i); };
  auto owned_key = [&](int j) { return destination.linear_index(j); };
  for (int j = 0; j < destination.get_capacity(); ++j) destination[j] = identity;

  if constexpr (std::is_same_v<Scope, metal::execution_thread>) {
    for (int i = 0; i < source.get_capacity(); ++i) {
      if (!source.get_mask(i)) continue;
      for (int j = 0; j < destination.get_capacity(); ++j) {
        if (owned_key(j) == key(i)) destination[j] = combine(op, destination[j], source[i]);
      }
    }
  } else if constexpr (std::is_same_v<Scope, metal::execution_simdgroup>) {
    // One exchange per element slot: every lane sees every lane's i-th element.
    struct entry {
      E value;
      int key;
      bool valid;
    };
    for (int i = 0; i < source.get_capacity(); ++i) {
      const entry mine{source[i], key(i), source.get_mask(i)};
      const coreai::simd::cpu::view v = coreai::simd::cpu::exchange(mine, coreai::simd::site::here());
      for (unsigned lane = 0; lane < coreai::simd::kWidth; ++lane) {
        if (!coreai::simd::cpu::active(v, lane)) continue;
        const entry e = coreai::simd::cpu::value_of<entry>(v, lane);
        if (!e.valid) continue;
        for (int j = 0; j < destination.get_capacity(); ++j) {
          if (owned_key(j) == e.key) destination[j] = combine(op, destination[j], e.value);
        }
      }
    }
  } else {
    // The threadgroup's shared scratch holds the tile, then each thread
    // reduces the rows or columns it owns, in index order.
    constexpr int n = Src::elements;
    auto& scratch = metal::cooperative_detail::g_shared.scratch;
    metal::cooperative_detail::sync<Scope>();
    if (scratch.size() < n * (sizeof(E) + 1)) scratch.resize(n * (sizeof(E) + 1));  // by one thread
    E* values = reinterpret_cast<E*>(scratch.data());
    unsigned char* present = scratch.data() + n * sizeof(E);
    const auto& me = source.member();
    for (int e = static_cast<int>(me.index); e < n; e += static_cast<int>(me.count)) present[e] = 0;
    metal::cooperative_detail::sync<Scope>();
    for (int i = 0; i < source.get_capacity(); ++i) {
      if (!source.get_mask(i)) continue;
      values[source.linear_index(i)] = source[i];
      present[source.linear_index(i)] = 1;
    }
    metal::cooperative_detail::sync<Scope>();
    for (int j = 0; j < destination.get_capacity(); ++j) {
      const int want = owned_key(j);
      for (int e = 0; e < n; ++e) {
        const int k = by_rows ? e / Src::columns : e % Src::columns;
        if (present[e] && k == want) destination[j] = combine(op, destination[j], values[e]);
      }
    }
    metal::cooperative_detail::sync<Scope>();
  }
}

}  // namespace matmul_detail

template <class E, class SX, class DX, class SL, class DL>
inline void reduce_rows(const metal::cooperative_tensor<E, SX, SL>& source,
                        metal::cooperative_tensor<E, DX, DL>& destination,
                        reduction_operation op = reduction_operation::sum,
                        E identity = reduction_operation_identity<E>::sum_identity) {
  matmul_detail::reduce<true>(source, destination, op, identity);
}

template <class E, class SX, class DX, class SL, class DL>
inline void reduce_columns(const metal::cooperative_tensor<E, SX, SL>& source,
                           metal::cooperative_tensor<E, DX, DL>& destination,
                           reduction_operation op = reduction_operation::sum,
                           E identity = reduction_operation_identity<E>::sum_identity) {
  matmul_detail::reduce<false>(source, destination, op, identity);
}

}  // namespace mpp::tensor_ops

#endif  // COREAI_MSL_MPP_MATMUL2D_H
