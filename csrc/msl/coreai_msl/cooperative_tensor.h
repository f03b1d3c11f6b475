// Execution scopes and cooperative tensors of Metal 4 (<metal_cooperative_tensor>,
// as used by MetalPerformancePrimitives; Apple documents both in
// MetalPerformancePrimitives.framework/Headers/MPPTensorOpsMatMul2d.h).
//
// A cooperative tensor is a tile of an operation's result spread over the
// threads of the operation's execution scope: execution_thread (one thread),
// execution_simdgroup (the 32 lanes of a SIMD-group) or
// execution_simdgroups<N> (N SIMD-groups, a whole threadgroup). Apple leaves
// the distribution to the implementation and gives accessors; this one is:
//
//  - The scope's threads are numbered 0..T-1: the lane among the SIMD-group's
//    running lanes or, for execution_simdgroups<N>, the rank of the thread's
//    stack among the threadgroup's threads (each thread has a stack of its
//    own, so the numbering is the same at every call: two tensors of one
//    operation have the same layout). T counts the threads that take part, so
//    a scope of another size than the threadgroup still covers the tile.
//  - Thread t owns the elements with linear index t, t + T, t + 2T, ... of the
//    tile in row-major order (row = index / columns): get_capacity() is
//    ceil(elements / T), and element i of thread t is linear index t + i * T.
//  - get_mask(i) / is_valid_element(i) is false past the end of the tile and,
//    after an operation, for elements outside its operands' extents (the edge
//    tiles of a slice).
//  - get_multidimensional_index(i) is {column, row} (Metal order) for a 2-D
//    tile and {index} for the 1-D results of reduce_rows / reduce_columns.
//
// Creating a tensor of a multi-SIMD-group scope is a threadgroup barrier
// (three, in fact: every thread of the scope must reach it, as on the GPU).
#ifndef COREAI_MSL_COOPERATIVE_TENSOR_H
#define COREAI_MSL_COOPERATIVE_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "array.h"
#include "sync.h"
#include "tensor.h"

namespace metal {

struct execution_thread {
  static constexpr int simdgroups = 0;
};
struct execution_simdgroup {
  static constexpr int simdgroups = 1;
};
template <int N>
struct execution_simdgroups {
  static_assert(N >= 1, "execution_simdgroups<N> takes at least one SIMD-group");
  static constexpr int simdgroups = N;
};

namespace cooperative_detail {

template <class S>
inline constexpr bool is_scope_v = std::is_same_v<S, execution_thread> ||
                                   std::is_same_v<S, execution_simdgroup>;
template <int N>
inline constexpr bool is_scope_v<execution_simdgroups<N>> = true;

// This thread's number among the scope's T threads.
struct member {
  unsigned index = 0;
  unsigned count = 1;
};

// Heap storage that grows and copies (the standard containers' headers would
// double the time every kernel takes to compile).
template <class T>
class buffer {
 public:
  buffer() = default;
  buffer(const buffer& o) { assign(o.data_, o.size_); }
  buffer& operator=(const buffer& o) {
    if (this != &o) assign(o.data_, o.size_);
    return *this;
  }
  ~buffer() { delete[] data_; }

  void resize(std::size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return;
    }
    T* grown = new T[n]();
    for (std::size_t i = 0; i < size_; ++i) grown[i] = data_[i];
    delete[] data_;
    data_ = grown;
    size_ = capacity_ = n;
  }
  void assign(const T* from, std::size_t n) {
    resize(n);
    for (std::size_t i = 0; i < n; ++i) data_[i] = from[i];
  }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* data() { return data_; }
  std::size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

// What the threads of the running threadgroup share (all of them run on one
// OS thread, so thread_local storage is the group's).
struct group_shared {
  const void* stacks[1024] = {};  // at most 1024 threads in a threadgroup
  unsigned stack_count = 0;
  buffer<unsigned char> scratch;
};
inline thread_local group_shared g_shared;

template <class Scope>
inline member join() {
  if constexpr (std::is_same_v<Scope, execution_thread>) {
    return {0, 1};
  } else if constexpr (std::is_same_v<Scope, execution_simdgroup>) {
    const coreai::simd::lanes_state v = coreai::simd::meet(coreai::simd::site::here());
    const std::uint32_t below = v.active & ((std::uint32_t{1} << v.lane) - 1u);
    return {static_cast<unsigned>(__builtin_popcount(below)),
            static_cast<unsigned>(__builtin_popcount(v.active))};
  } else {
    // Every thread publishes where its stack is, then ranks itself among the
    // published addresses. The list is emptied after a third barrier: nobody
    // publishes again before every thread has passed it, because publishing
    // needs the first barrier, which needs every thread.
    const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    g_shared.stacks[g_shared.stack_count++] = __builtin_frame_address(0);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    member me{0, g_shared.stack_count};
    for (unsigned i = 0; i < g_shared.stack_count; ++i) {
      me.index += reinterpret_cast<std::uintptr_t>(g_shared.stacks[i]) < here;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    g_shared.stack_count = 0;
    return me;
  }
}

// A rendezvous of the scope's threads.
template <class Scope>
inline void sync() {
  if constexpr (std::is_same_v<Scope, execution_simdgroup>) {
    coreai::simd::meet(coreai::simd::site::here());
  } else if constexpr (!std::is_same_v<Scope, execution_thread>) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}

}  // namespace cooperative_detail

// The layout of a cooperative tensor of this implementation: a Rows x Cols
// tile (Cols == 1 for the 1-D results of reductions, indexed by row) over the
// threads of Scope.
template <int Rows, int Cols, class Scope>
struct cooperative_layout {
  static constexpr int rows = Rows;
  static constexpr int columns = Cols;
  using scope = Scope;
};

template <class ElementType, class Extents, class Layout>
class cooperative_tensor {
 public:
  using element_type = ElementType;
  using value_type = std::remove_cv_t<ElementType>;
  using extents_type = Extents;
  using index_type = typename Extents::index_type;
  using scope = typename Layout::scope;
  static constexpr int rows = Layout::rows;
  static constexpr int columns = Layout::columns;
  static constexpr std::size_t rank = Extents::rank();
  static constexpr int elements = rows * columns;

  // A thread's share of a new tile (the scope's threads must all call this).
  cooperative_tensor() : me_(cooperative_detail::join<scope>()) {
    values_.resize(static_cast<std::size_t>(capacity()));
    for (int i = 0; i < capacity(); ++i) values_[static_cast<std::size_t>(i)] = value_type(0);
    valid_rows_ = rows;
    valid_columns_ = columns;
  }

  std::uint16_t get_capacity() const { return static_cast<std::uint16_t>(capacity()); }

  // The linear (row-major) tile index of element i of this thread.
  int linear_index(int i) const { return static_cast<int>(me_.index + i * me_.count); }
  int row_of(int i) const { return linear_index(i) / columns; }
  int column_of(int i) const { return linear_index(i) % columns; }

  bool get_mask(int i) const {
    const int e = linear_index(i);
    return i >= 0 && i < capacity() && e < elements && e / columns < valid_rows_ &&
           e % columns < valid_columns_;
  }
  bool is_valid_element(int i) const { return get_mask(i); }

  value_type& operator[](int i) { return values_[static_cast<std::size_t>(i)]; }
  const value_type& operator[](int i) const { return values_[static_cast<std::size_t>(i)]; }

  array<index_type, rank> get_multidimensional_index(int i) const {
    if constexpr (rank == 1) {
      return {static_cast<index_type>(columns == 1 ? row_of(i) : column_of(i))};
    } else {
      return {static_cast<index_type>(column_of(i)), static_cast<index_type>(row_of(i))};
    }
  }

  class iterator {
   public:
    iterator(cooperative_tensor* t, int i) : t_(t), i_(i) {}
    value_type& operator*() const { return (*t_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const iterator& o) const { return i_ == o.i_; }
    array<index_type, rank> get_multidimensional_index() const {
      return t_->get_multidimensional_index(i_);
    }
    int index() const { return i_; }

   private:
    cooperative_tensor* t_;
    int i_;
  };
  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, capacity()); }

  // Loads this thread's elements from a tensor in device, threadgroup or
  // thread memory with the same layout (elements outside its extents read 0).
  template <class Tensor>
  void load(const Tensor& source) {
    for (int i = 0; i < capacity(); ++i) {
      std::int64_t at[rank];
      if (!tensor_index(i, at)) continue;
      values_[static_cast<std::size_t>(i)] =
          source.contains(at) ? static_cast<value_type>(element_of(source, at)) : value_type(0);
    }
  }

  // Stores this thread's valid elements; those outside the tensor's extents are skipped.
  template <class Tensor>
  void store(const Tensor& destination) const {
    for (int i = 0; i < capacity(); ++i) {
      std::int64_t at[rank];
      if (!get_mask(i) || !tensor_index(i, at) || !destination.contains(at)) continue;
      element_of(destination, at) =
          static_cast<std::remove_reference_t<decltype(element_of(destination, at))>>(
              values_[static_cast<std::size_t>(i)]);
    }
  }

  // For operations: which part of the tile their operands covered.
  void set_valid_extent(int valid_rows, int valid_columns) {
    valid_rows_ = valid_rows;
    valid_columns_ = valid_columns;
  }
  const cooperative_detail::member& member() const { return me_; }

 private:
  int capacity() const { return (elements + static_cast<int>(me_.count) - 1) / me_.count; }

  bool tensor_index(int i, std::int64_t (&at)[rank]) const {
    if (linear_index(i) >= elements) return false;
    if constexpr (rank == 1) {
      at[0] = columns == 1 ? row_of(i) : column_of(i);
    } else {
      at[0] = column_of(i);
      at[1] = row_of(i);
    }
    return true;
  }

  template <class Tensor>
  static auto& element_of(const Tensor& t, const std::int64_t (&at)[rank]) {
    if constexpr (rank == 1) {
      return t[at[0]];
    } else {
      return t[at[0], at[1]];
    }
  }

  cooperative_detail::member me_;
  cooperative_detail::buffer<value_type> values_;
  int valid_rows_ = rows;
  int valid_columns_ = columns;
};

}  // namespace metal

#endif  // COREAI_MSL_COOPERATIVE_TENSOR_H
