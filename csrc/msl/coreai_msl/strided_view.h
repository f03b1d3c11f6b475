// coreai::strided_view<T, Rank>: the buffer rendering's view of a tensor of
// element type T in device memory that a Metal tensor cannot hold.
// MTLTensorDataType has no int64, uint64 or bool element type, and a rank-0
// result has no extents to build a tensor from, so the rendering declares these
// with this view instead:
//
//   coreai::strided_view<int64_t, 2> idx(coreai_buf_idx, coreai_meta + 4);
//   coreai::strided_view<float, 0> total(coreai_buf_total);
//
// It offers what a body uses of a Metal tensor, with the same meaning (MSL
// specification §2.21.2 "Tensor Type"): x[i, j, ...] (dimension 0 innermost),
// x[idx] with a metal::array index, x.get(i, j, ...) and x.set(v, i, j, ...),
// x.get_extent(d), x.get_stride(d) and a constant-expression x.get_rank().
// Extents and strides are read from the metadata buffer (docs/internals.md §1):
// Rank extents, then Rank strides, Metal order.
//
// A rank-0 view is read with x.get() and written with x.set(v): the
// specification's get and set with an empty index list, which any C++ compiler
// parses. An empty subscript x[] is C++23 syntax that Metal's language (C++17
// based) is not documented to accept, so it is refused here as it may be on
// the GPU (docs/mps.md lists it among the assumptions a Mac run settles).
//
// One text serves both backends: the CPU prelude includes it, and the buffer
// rendering pastes it for the GPU, whose compiler sees only the source (there
// the include guard is not yet defined). So it is written in the language the
// two share: no #include, explicit address spaces on every pointer and
// reference (`device`, `constant`, `thread` expand to nothing on the CPU),
// no fold expressions, and the CPU-only debug check behind COREAI_MSL_DEBUG.
#ifndef COREAI_MSL_STRIDED_VIEW_H
#define COREAI_MSL_STRIDED_VIEW_H

namespace coreai {

template <typename T, int Rank>
struct strided_view {
  static_assert(Rank >= 0 && Rank <= 16, "a tensor has rank 0 to 16");

  // Rank >= 1: the view's extents and strides start at `meta`.
  strided_view(device T* data, constant int* meta) : data_(data) {
    for (int d = 0; d < Rank; ++d) {
      extents_[d] = meta[d];
      strides_[d] = meta[Rank + d];
    }
  }
  // Rank 0: one element, no metadata.
  explicit strided_view(device T* data) : data_(data) {
    static_assert(Rank == 0, "a view of rank >= 1 reads its extents from the metadata");
  }

  static constexpr int get_rank() { return Rank; }
  int get_extent(int d) const { return extents_[d]; }
  int get_stride(int d) const { return strides_[d]; }
  // The first element, as a Metal tensor's get_data_ptr() gives it.
  device T* get_data_ptr() const { return data_; }

  // x[i, j, ...]: one integer index per dimension.
  template <typename... I>
  device T& operator[](I... index) const {
    static_assert(sizeof...(I) != 0,
                  "a rank-0 tensor is read with x.get() and written with x.set(v); the empty "
                  "subscript x[] is not known to compile with Metal's compiler (docs/mps.md)");
    static_assert(sizeof...(I) == Rank, "index a view with one integer per dimension");
    // One spare slot keeps the array non-empty for rank 0.
    const long flat[sizeof...(I) + 1] = {static_cast<long>(index)..., 0};
    return at(flat);
  }

  // x[idx] with idx a metal::array of Rank integers.
  template <template <typename, decltype(sizeof(0))> class Array, typename I>
  device T& operator[](Array<I, Rank> index) const {
    long flat[Rank + 1] = {0};
    for (int d = 0; d < Rank; ++d) flat[d] = static_cast<long>(index[d]);
    return at(flat);
  }

  // x.get(i, j, ...): the element, or T() for an index outside the extents;
  // a positive index into a dimension of extent 1 reads its element 0 (the
  // specification's broadcast rule). x.get() for rank 0.
  template <typename... I>
  T get(I... index) const {
    static_assert(sizeof...(I) == Rank, "x.get takes one integer per dimension");
    long flat[sizeof...(I) + 1] = {static_cast<long>(index)..., 0};
    return get_at(flat);
  }
  template <template <typename, decltype(sizeof(0))> class Array, typename I>
  T get(Array<I, Rank> index) const {
    long flat[Rank + 1] = {0};
    for (int d = 0; d < Rank; ++d) flat[d] = static_cast<long>(index[d]);
    return get_at(flat);
  }

  // x.set(v, i, j, ...): stores v, or nothing for an index outside the
  // extents. x.set(v) for rank 0.
  template <typename... I>
  void set(T value, I... index) const {
    static_assert(sizeof...(I) == Rank, "x.set takes the value, then one integer per dimension");
    const long flat[sizeof...(I) + 1] = {static_cast<long>(index)..., 0};
    set_at(value, flat);
  }
  template <template <typename, decltype(sizeof(0))> class Array, typename I>
  void set(T value, Array<I, Rank> index) const {
    long flat[Rank + 1] = {0};
    for (int d = 0; d < Rank; ++d) flat[d] = static_cast<long>(index[d]);
    set_at(value, flat);
  }

 private:
  bool contains(thread const long* index) const {
    for (int d = 0; d < Rank; ++d) {
      if (index[d] < 0 || index[d] >= extents_[d]) return false;
    }
    return true;
  }

  T get_at(thread long* index) const {
    for (int d = 0; d < Rank; ++d) {
      if (index[d] > 0 && extents_[d] == 1) index[d] = 0;
    }
    if (!contains(index)) return T();
    return data_[offset_of(index)];
  }

  void set_at(T value, thread const long* index) const {
    if (contains(index)) data_[offset_of(index)] = value;
  }

  long offset_of(thread const long* index) const {
    long offset = 0;
    for (int d = 0; d < Rank; ++d) offset += index[d] * strides_[d];
    return offset;
  }

  device T& at(thread const long* index) const {
#ifdef COREAI_MSL_DEBUG
    if (!contains(index)) {
      std::int64_t wide[Rank + 1] = {0};
      for (int e = 0; e < Rank; ++e) wide[e] = index[e];
      coreai::g_runtime->report_out_of_bounds(data_, Rank, wide, extents_,
                                              coreai::g_debug_thread_position);
      static thread_local std::remove_cv_t<T> scratch{};
      scratch = {};
      return scratch;
    }
#endif
    return data_[offset_of(index)];
  }

  device T* data_;
  int extents_[Rank + 1];  // one spare slot keeps the arrays non-empty for rank 0
  int strides_[Rank + 1];
};

}  // namespace coreai

#endif  // COREAI_MSL_STRIDED_VIEW_H
