// Metal 4 tensor views over memory, the `tensor_inline` kind (MSL
// specification 4.0, "Tensor Types"; <metal_tensor>):
//
//   tensor<device float, dextents<int, 2>, tensor_inline> A(ptr, dextents<int, 2>(K, M),
//                                                          array<int, 2>{1, K});
//   A[k, m] = 1.0f;           // dimension 0 is the innermost (torch's last) one
//   A[idx];                   // idx: metal::array<uint or int, 2>
//   A.get_extent(0);          // K
//   A.get(k, m); A.set(v, k, m);   // checked: out of bounds reads 0, drops the store
//   metal::array<uint, A.get_rank()> idx;   // get_rank() is a constant expression
//   auto t = tensor(ptr, dextents<int32_t, 2>(K, M));           // deduced: tensor_inline
//   auto s = A.slice(k0, m0);                 // origin (k0, m0), the rest of A
//   auto f = A.slice<16, 64>(k0, m0);         // a 16 x 64 window, static extents
//
// Extents are extents<IndexT, E...> with each E a size or dynamic_extent
// (dextents<IndexT, R> has all R dynamic), Metal order. The buffer rendering
// builds the views of a kernel's tensors (docs/internals.md §1); kernels build
// more over device or threadgroup memory as PyTorch's mpp_gemm.h and llama.cpp
// do. A slice keeps the strides and moves the origin; a dynamic extent of a
// slice is what remains of the tensor past the origin.
//
// With COREAI_MSL_DEBUG defined (the CPU backend's debug mode) every access is
// checked against the view's extents. A violation is reported to the launcher,
// which raises after the launch; the access itself is redirected to a scratch
// element so that the kernel can run on without touching memory it does not own.
#ifndef COREAI_MSL_TENSOR_H
#define COREAI_MSL_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "address_space.h"
#include "index_sequence.h"
#include "array.h"
#include "runtime.h"

namespace metal {

// Tensor kinds. Only tensor_inline views can be built on the CPU; the other
// kinds exist so that a declaration naming them fails with a clear message.
struct tensor_inline {};
struct tensor_handle {};
struct tensor_offset {};

inline constexpr std::size_t dynamic_extent = static_cast<std::size_t>(-1);

template <class IndexT, std::size_t... E>
struct extents {
  static_assert(std::is_integral_v<IndexT>, "extents: the index type must be an integer type");
  static_assert(sizeof...(E) >= 1, "extents: the rank must be at least 1");
  using index_type = IndexT;
  static constexpr std::size_t static_values[] = {E...};

  IndexT values[sizeof...(E)] = {static_cast<IndexT>(E == dynamic_extent ? 0 : E)...};

  static constexpr std::size_t rank() { return sizeof...(E); }
  static constexpr std::size_t rank_dynamic() { return ((E == dynamic_extent) + ... + 0); }
  static constexpr std::size_t static_extent(std::size_t d) { return static_values[d]; }

  constexpr extents() = default;
  // Every extent, or only the dynamic ones (as std::extents takes them).
  template <class... I>
    requires((sizeof...(I) == rank() || (sizeof...(I) == rank_dynamic() && sizeof...(I) > 0)) &&
             (std::is_integral_v<I> && ...))
  constexpr explicit(sizeof...(I) != rank()) extents(I... given) {
    const IndexT list[] = {static_cast<IndexT>(given)...};
    if constexpr (sizeof...(I) == rank()) {
      for (std::size_t d = 0; d < rank(); ++d) values[d] = list[d];
    } else {
      std::size_t next = 0;
      for (std::size_t d = 0; d < rank(); ++d) {
        if (static_values[d] == dynamic_extent) values[d] = list[next++];
      }
    }
  }
  constexpr IndexT extent(std::size_t d) const { return values[d]; }
};

namespace tensor_detail {
template <class IndexT, std::size_t R, class Seq = detail::make_index_sequence<R>>
struct dynamic_extents;
template <class IndexT, std::size_t R, std::size_t... D>
struct dynamic_extents<IndexT, R, detail::index_sequence<D...>> {
  using type = extents<IndexT, (static_cast<void>(D), dynamic_extent)...>;
};
}  // namespace tensor_detail

template <class IndexT, std::size_t Rank>
using dextents = typename tensor_detail::dynamic_extents<IndexT, Rank>::type;

template <class ElementT, class Extents, class Kind = tensor_handle>
class tensor {
  static_assert(std::is_same_v<Kind, tensor_inline>,
                "the CPU backend of coreai_torch builds only tensor_inline views "
                "(tensor<device T, dextents<int, R>, tensor_inline>); tensor_handle and "
                "tensor_offset tensors are bound by the GPU runtime");
  static_assert(!std::is_same_v<Kind, tensor_inline>,
                "tensor_inline views take extents<IndexT, E...> or dextents<IndexT, Rank>");
};

template <class T, class IndexT, std::size_t... E>
class tensor<T, metal::extents<IndexT, E...>, tensor_inline> {
 public:
  static constexpr std::size_t Rank = sizeof...(E);
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using index_type = IndexT;
  using extents_type = metal::extents<IndexT, E...>;
  using reference = T&;

  tensor() = default;

  // Strides in elements, Metal order; `Strides` is metal::array<IndexT, Rank>
  // (or anything indexable with Rank entries). The data is a pointer, tagged
  // with its address space or not.
  template <coreai::any_pointer P, class Strides>
    requires std::is_convertible_v<decltype(coreai::raw(std::declval<P>())), T*>
  tensor(P data, const extents_type& e, const Strides& strides) : data_(coreai::raw(data)), extents_(e) {
    for (std::size_t d = 0; d < Rank; ++d) strides_[d] = static_cast<IndexT>(strides[d]);
    remember_base();
  }

  // Packed (contiguous) layout: dimension 0 has stride 1.
  template <coreai::any_pointer P>
    requires std::is_convertible_v<decltype(coreai::raw(std::declval<P>())), T*>
  tensor(P data, const extents_type& e) : data_(coreai::raw(data)), extents_(e) {
    IndexT stride = 1;
    for (std::size_t d = 0; d < Rank; ++d) {
      strides_[d] = stride;
      stride *= extents_.values[d];
    }
    remember_base();
  }

  static constexpr std::size_t get_rank() { return Rank; }
  IndexT get_extent(std::size_t d) const { return extents_.values[d]; }
  IndexT get_stride(std::size_t d) const { return strides_[d]; }
  const extents_type& get_extents() const { return extents_; }
  const extents_type& extents() const { return extents_; }
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

  // x.get(i, j, ...) / x.get(idx): the element, or value_type() for an index
  // outside the extents; a positive index into a dimension of extent 1 reads
  // its element 0 (MSL specification §2.21.2, the broadcast rule of get).
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  value_type get(I... index) const {
    std::int64_t idx[Rank] = {static_cast<std::int64_t>(index)...};
    return get_at(idx);
  }
  template <template <class, std::size_t> class Array, class I>
    requires(std::is_integral_v<I>)
  value_type get(const Array<I, Rank>& index) const {
    std::int64_t idx[Rank];
    for (std::size_t d = 0; d < Rank; ++d) idx[d] = static_cast<std::int64_t>(index[d]);
    return get_at(idx);
  }

  // x.set(v, i, j, ...) / x.set(v, idx): stores v, or nothing for an index
  // outside the extents (MSL specification §2.21.2).
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  void set(value_type v, I... index) const {
    const std::int64_t idx[Rank] = {static_cast<std::int64_t>(index)...};
    if (contains(idx)) element(idx) = v;
  }
  template <template <class, std::size_t> class Array, class I>
    requires(std::is_integral_v<I>)
  void set(value_type v, const Array<I, Rank>& index) const {
    std::int64_t idx[Rank];
    for (std::size_t d = 0; d < Rank; ++d) idx[d] = static_cast<std::int64_t>(index[d]);
    if (contains(idx)) element(idx) = v;
  }

  // The view from `origin` to the end of every dimension.
  template <class... I>
    requires(sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  tensor<T, dextents<IndexT, Rank>, tensor_inline> slice(I... origin) const {
    return sliced<dextents<IndexT, Rank>>({static_cast<std::int64_t>(origin)...});
  }

  // A window of extents W... from `origin`; dynamic_extent takes what remains.
  template <std::size_t... W, class... I>
    requires(sizeof...(W) == Rank && sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  tensor<T, metal::extents<IndexT, W...>, tensor_inline> slice(I... origin) const {
    return sliced<metal::extents<IndexT, W...>>({static_cast<std::int64_t>(origin)...});
  }
  template <std::size_t... W, class... I>
    requires(sizeof...(W) == Rank && sizeof...(I) == Rank && (std::is_integral_v<I> && ...))
  tensor<T, metal::extents<IndexT, W...>, tensor_inline> static_slice(I... origin) const {
    return sliced<metal::extents<IndexT, W...>>({static_cast<std::int64_t>(origin)...});
  }

  // Whether an index lies inside the extents (used by cooperative tensors).
  bool contains(const std::int64_t (&idx)[Rank]) const {
    for (std::size_t d = 0; d < Rank; ++d) {
      if (idx[d] < 0 || idx[d] >= static_cast<std::int64_t>(extents_.values[d])) return false;
    }
    return true;
  }

 private:
  template <class, class, class>
  friend class tensor;

  template <class SliceExtents>
  tensor<T, SliceExtents, tensor_inline> sliced(const std::int64_t (&origin)[Rank]) const {
    tensor<T, SliceExtents, tensor_inline> out;
    std::ptrdiff_t offset = 0;
    for (std::size_t d = 0; d < Rank; ++d) {
      offset += static_cast<std::ptrdiff_t>(origin[d]) * strides_[d];
      out.strides_[d] = strides_[d];
      const std::int64_t rest = static_cast<std::int64_t>(extents_.values[d]) - origin[d];
      out.extents_.values[d] = SliceExtents::static_extent(d) == dynamic_extent
                                   ? static_cast<IndexT>(rest > 0 ? rest : 0)
                                   : static_cast<IndexT>(SliceExtents::static_extent(d));
    }
    out.data_ = data_ + offset;
#ifdef COREAI_MSL_DEBUG
    out.base_ = base_;
#endif
    return out;
  }

  void remember_base() {
#ifdef COREAI_MSL_DEBUG
    base_ = data_;
#endif
  }

  T& at(const std::int64_t (&idx)[Rank]) const {
#ifdef COREAI_MSL_DEBUG
    if (!contains(idx)) {
      std::int32_t extents_list[Rank];
      for (std::size_t e = 0; e < Rank; ++e) {
        extents_list[e] = static_cast<std::int32_t>(extents_.values[e]);
      }
      coreai::g_runtime->report_out_of_bounds(base_, Rank, idx, extents_list,
                                              coreai::g_debug_thread_position);
      static thread_local value_type scratch{};
      scratch = value_type{};
      return scratch;
    }
#endif
    return element(idx);
  }

  value_type get_at(std::int64_t (&idx)[Rank]) const {
    for (std::size_t d = 0; d < Rank; ++d) {
      if (idx[d] > 0 && extents_.values[d] == 1) idx[d] = 0;
    }
    return contains(idx) ? value_type(element(idx)) : value_type();
  }

  // The element at an index inside the extents.
  T& element(const std::int64_t (&idx)[Rank]) const {
    // An index inside the extents fits their index type, and so does a
    // stride: one multiplication of two such values, widened (on the GPU one
    // instruction rather than a 64-bit multiply). An index outside, whose
    // access Metal leaves undefined, is cut to that type.
    std::ptrdiff_t offset = 0;
    for (std::size_t d = 0; d < Rank; ++d) {
      offset += static_cast<std::ptrdiff_t>(static_cast<IndexT>(idx[d])) *
                static_cast<std::ptrdiff_t>(strides_[d]);
    }
    return data_[offset];
  }

  T* data_ = nullptr;
  extents_type extents_;
  IndexT strides_[Rank] = {};
#ifdef COREAI_MSL_DEBUG
  const void* base_ = nullptr;  // the viewed tensor's data, which names it in reports
#endif
};

// tensor(ptr, extents[, strides]) deduces a tensor_inline view of the
// pointer's element type.
template <coreai::any_pointer P, class IndexT, std::size_t... E>
tensor(P, extents<IndexT, E...>)
    -> tensor<std::remove_pointer_t<decltype(coreai::raw(std::declval<P>()))>,
              extents<IndexT, E...>, tensor_inline>;
template <coreai::any_pointer P, class IndexT, std::size_t... E, class Strides>
tensor(P, extents<IndexT, E...>, Strides)
    -> tensor<std::remove_pointer_t<decltype(coreai::raw(std::declval<P>()))>,
              extents<IndexT, E...>, tensor_inline>;

}  // namespace metal

#endif  // COREAI_MSL_TENSOR_H
