// Metal 4 tensor views over device memory, the `tensor_inline` kind that the
// buffer rendering declares in front of the user's body:
//
//   tensor<device float, dextents<int, 2>, tensor_inline> A(ptr, dextents<int, 2>(K, M),
//                                                          array<int, 2>{1, K});
//   A[k, m] = 1.0f;           // dimension 0 is the innermost (torch's last) one
//   A[idx];                   // idx: metal::array<uint or int, 2>
//   A.get_extent(0);          // K
//   metal::array<uint, A.get_rank()> idx;   // get_rank() is a constant expression
//
// With COREAI_MSL_DEBUG defined (the CPU backend's debug mode) every access is
// checked against the extents. A violation is reported to the launcher, which
// raises after the launch; the access itself is redirected to a scratch element
// so that the kernel can run on without touching memory it does not own.
#ifndef COREAI_MSL_TENSOR_H
#define COREAI_MSL_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "runtime.h"

namespace metal {

// Tensor kinds. Only tensor_inline views can be built on the CPU; the other
// kinds exist so that a declaration naming them fails with a clear message.
struct tensor_inline {};
struct tensor_handle {};
struct tensor_offset {};

// Run-time extents of a rank-`Rank` tensor, Metal order.
template <class IndexT, std::size_t Rank>
struct dextents {
  static_assert(std::is_integral_v<IndexT>, "dextents: the index type must be an integer type");
  static_assert(Rank >= 1, "dextents: the rank must be at least 1");
  using index_type = IndexT;

  IndexT values[Rank] = {};

  constexpr dextents() = default;
  template <class... E>
    requires(sizeof...(E) == Rank && (std::is_integral_v<E> && ...))
  constexpr dextents(E... e) : values{static_cast<IndexT>(e)...} {}

  static constexpr std::size_t rank() { return Rank; }
  constexpr IndexT extent(std::size_t d) const { return values[d]; }
};

template <class ElementT, class Extents, class Kind = tensor_handle>
class tensor {
  static_assert(std::is_same_v<Kind, tensor_inline>,
                "the CPU backend of coreai_torch builds only tensor_inline views "
                "(tensor<device T, dextents<int, R>, tensor_inline>); tensor_handle and "
                "tensor_offset tensors are bound by the GPU runtime");
  static_assert(!std::is_same_v<Kind, tensor_inline>,
                "the CPU backend of coreai_torch builds tensor_inline views with run-time "
                "extents only: dextents<IndexT, Rank>");
};

template <class T, class IndexT, std::size_t Rank>
class tensor<T, dextents<IndexT, Rank>, tensor_inline> {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using index_type = IndexT;
  using extents_type = dextents<IndexT, Rank>;
  using reference = T&;

  // Strides in elements, Metal order; `Strides` is metal::array<IndexT, Rank>
  // (or anything indexable with Rank entries).
  template <class Strides>
  tensor(T* data, const extents_type& extents, const Strides& strides) : data_(data) {
    for (std::size_t d = 0; d < Rank; ++d) {
      extents_[d] = extents.values[d];
      strides_[d] = static_cast<IndexT>(strides[d]);
    }
  }

  // Packed (contiguous) layout: dimension 0 has stride 1.
  tensor(T* data, const extents_type& extents) : data_(data) {
    IndexT stride = 1;
    for (std::size_t d = 0; d < Rank; ++d) {
      extents_[d] = extents.values[d];
      strides_[d] = stride;
      stride *= extents_[d];
    }
  }

  static constexpr std::size_t get_rank() { return Rank; }
  IndexT get_extent(std::size_t d) const { return extents_[d]; }
  IndexT get_stride(std::size_t d) const { return strides_[d]; }
  extents_type get_extents() const {
    extents_type e;
    for (std::size_t d = 0; d < Rank; ++d) e.values[d] = extents_[d];
    return e;
  }
  T* get_data_ptr() const { return data_; }

  // x[i, j, ...]: one index per dimension, any integer types, Metal order.
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  T& operator[](I... index) const {
    const std::int64_t idx[Rank] = {static_cast<std::int64_t>(index)...};
    return at(idx);
  }

  // x[idx] with an index array (metal::array<uint, R>, metal::array<int, R>, ...).
  template <template <class, std::size_t> class Array, class I>
    requires(std::is_integral_v<I>)
  T& operator[](const Array<I, Rank>& index) const {
    std::int64_t idx[Rank];
    for (std::size_t d = 0; d < Rank; ++d) idx[d] = static_cast<std::int64_t>(index[d]);
    return at(idx);
  }

 private:
  T& at(const std::int64_t (&idx)[Rank]) const {
#ifdef COREAI_MSL_DEBUG
    for (std::size_t d = 0; d < Rank; ++d) {
      if (idx[d] < 0 || idx[d] >= static_cast<std::int64_t>(extents_[d])) {
        std::int32_t extents[Rank];
        for (std::size_t e = 0; e < Rank; ++e) extents[e] = static_cast<std::int32_t>(extents_[e]);
        coreai::g_runtime->report_out_of_bounds(data_, Rank, idx, extents,
                                                coreai::g_debug_thread_position);
        static thread_local value_type scratch{};
        scratch = value_type{};
        return scratch;
      }
    }
#endif
    std::ptrdiff_t offset = 0;
    for (std::size_t d = 0; d < Rank; ++d) {
      offset += static_cast<std::ptrdiff_t>(idx[d]) * strides_[d];
    }
    return data_[offset];
  }

  T* data_;
  IndexT extents_[Rank];
  IndexT strides_[Rank];
};

}  // namespace metal

#endif  // COREAI_MSL_TENSOR_H
