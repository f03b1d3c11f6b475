// Pointers that remember Metal's address space.
//
// In Metal `device float*`, `threadgroup float*`, `constant float*` and
// `thread float*` are different types, and real kernels overload and
// specialise on them: MLX's pointer_element<device T*> /
// pointer_element<threadgroup T*> (steel/utils/type_traits.h), loaders with a
// device and a threadgroup overload. clang's own address_space attribute would
// give distinct types too, but C++ (unlike Metal and OpenCL C++) has no
// address-space-qualified member functions, so objects in such memory could
// not even be copied; the address space therefore lives in the pointer.
//
// The CPU backend's source pass (csrc/cpu/source_scan.cpp) rewrites a pointer
// declarator `device T*`, `threadgroup T*` or `constant T*` into
// coreai::space_ptr<T, space> (constant adds const to T); `thread T*` stays a
// plain T*. Address-space words elsewhere (references, template arguments,
// member-function qualifiers) carry no type and are dropped. A space_ptr
// behaves as the pointer it wraps: *, ->, [], arithmetic, comparisons, null,
// conversion to bool and to a pointer to const, and C-style casts to other
// pointers of the same address space. Like Metal, it does not convert to a
// pointer of another address space: a cast from device to threadgroup memory
// does not compile.
//
// Plain pointers (what & of an element gives) convert implicitly to any
// space_ptr, since the CPU cannot tell which memory they point into; a
// template parameter `device T*` is not deduced from one (write the type, as in
// load<float>(&x[i]), or keep the tagged pointer).
//
// An element access through a threadgroup pointer is a lockstep access
// (fiber_runtime.h). The source pass wraps the accesses whose kind it can
// tell in tg_read / tg_write / tg_other / tg_address (below), which also give
// the access's source position; the pointer's own *, -> and [] count as
// accesses of unknown kind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "call_site.h"
// The address-space pass follows threadgroup storage with COREAI_THREADGROUP_NOTE.
#include "threadgroup_notes.h"
#include "fiber_runtime.h"

namespace metal {
template <class T, int Cols, int Rows>
struct matrix;
}  // namespace metal

namespace coreai {

// Not the Metal words: `device` and `constant` are macros in kernel code.
enum class space : int { device_memory = 1, constant_memory = 2, threadgroup_memory = 3 };

template <class T, space S>
class space_ptr;

namespace space_detail {
// Where a pointer's address is kept: a pointer to const T holds it, and a
// pointer to T derives from the pointer to const T. The base class is what
// lets a template parameter `const device T*` deduce T from a `device T*`
// argument, as the qualification conversion does for plain pointers.
template <class T, space S>
struct root {
  T* p_ = nullptr;
};
template <class T, space S>
using base_of = std::conditional_t<std::is_const_v<T>, root<T, S>, space_ptr<const T, S>>;

// What a tagged pointer points to, aligned as its scalar components: Metal
// code reads vectors and matrices at any element-aligned address of device or
// threadgroup memory (llama.cpp's kernel_mul_mm stores float4s at rows of any
// length), where the C++ types would let the compiler assume 16 bytes.
template <class T, class = void>
struct loose {
  using type = T;
};
template <class T, std::size_t A>
struct aligned_as {
  typedef T type __attribute__((aligned(A)));
};
template <class E, int N>
struct loose<E __attribute__((ext_vector_type(N)))>
    : aligned_as<E __attribute__((ext_vector_type(N))), alignof(E)> {};
template <class E, int C, int R>
struct loose<metal::matrix<E, C, R>> : aligned_as<metal::matrix<E, C, R>, alignof(E)> {};
template <class T>
struct loose<const T> {
  using type = const typename loose<T>::type;
};
template <class T>
struct loose<volatile T> {
  using type = volatile typename loose<T>::type;
};
template <class T>
struct loose<const volatile T> {
  using type = const volatile typename loose<T>::type;
};
template <class T>
using loose_t = typename loose<T>::type;

}  // namespace space_detail

template <class P>
inline constexpr bool is_space_ptr_v = false;
template <class T, space S>
inline constexpr bool is_space_ptr_v<space_ptr<T, S>> = true;

template <class T, space S>
class space_ptr : public space_detail::base_of<T, S> {
  using base = space_detail::base_of<T, S>;

 public:
  using element_type = T;
  static constexpr space address_space = S;

  space_ptr() = default;
  [[gnu::always_inline]] constexpr space_ptr(std::nullptr_t) { set(nullptr); }
  // From an untagged pointer: & of an element, threadgroup storage, a tensor's data.
  template <class U>
    requires std::is_convertible_v<U*, T*>
  [[gnu::always_inline]] constexpr space_ptr(U* p) {
    set(p);
  }
  // To a pointer to void in the same address space (to const T is the base class).
  template <class U>
    requires(std::is_void_v<T> && !std::is_void_v<U> && std::is_convertible_v<U*, T*>)
  [[gnu::always_inline]] constexpr space_ptr(const space_ptr<U, S>& p) {
    set(p.get());
  }
  // C-style and explicit casts: any other pointer type of the same address
  // space, or an untagged pointer of any type (reinterpreting, as Metal does).
  template <class U>
    requires(!std::is_convertible_v<U*, T*>)
  [[gnu::always_inline]] constexpr explicit space_ptr(U* p) {
    set((T*)(p));  // NOLINT: a C-style cast, the semantics being emulated
  }
  template <class U, space S2>
    requires(!std::is_convertible_v<U*, T*> || S2 != S)
  [[gnu::always_inline]] constexpr explicit space_ptr(const space_ptr<U, S2>& p) {
    static_assert(S2 == S,
                  "a pointer cannot be cast to another address space (device, threadgroup and "
                  "constant memory are different address spaces in Metal)");
    set((T*)(p.get()));  // NOLINT: as above
  }
  // (ulong)p and friends.
  template <class I>
    requires std::is_integral_v<I>
  [[gnu::always_inline]] constexpr explicit operator I() const {
    return static_cast<I>(reinterpret_cast<std::uintptr_t>(get()));
  }

  [[gnu::always_inline]] constexpr T* get() const { return const_cast<T*>(this->p_); }
  [[gnu::always_inline]] constexpr explicit operator bool() const { return get() != nullptr; }

  template <class U = T>
    requires(!std::is_void_v<U>)
  [[gnu::always_inline]] constexpr space_detail::loose_t<U>& operator*() const {
    note_access();
    return *static_cast<space_detail::loose_t<U>*>(get());
  }
  [[gnu::always_inline]] constexpr space_detail::loose_t<T>* operator->() const {
    note_access();
    return static_cast<space_detail::loose_t<T>*>(get());
  }
  template <class I, class U = T>
    requires(std::is_integral_v<I> && !std::is_void_v<U> && !std::is_array_v<U>)
  [[gnu::always_inline]] constexpr space_detail::loose_t<U>& operator[](I i) const {
    note_access();
    return static_cast<space_detail::loose_t<U>*>(get())[i];
  }
  // A row of a multi-dimensional array decays to a pointer of the same address
  // space, as in Metal: tile[i] of `threadgroup float tile[4][8]` is a
  // threadgroup float*.
  template <class I, class U = T>
    requires(std::is_integral_v<I> && std::is_array_v<U>)
  [[gnu::always_inline]] constexpr space_ptr<std::remove_extent_t<U>, S> operator[](I i) const {
    return space_ptr<std::remove_extent_t<U>, S>(get()[i] + 0);
  }

  template <class I>
    requires std::is_integral_v<I>
  [[gnu::always_inline]] constexpr space_ptr& operator+=(I n) {
    set(get() + n);
    return *this;
  }
  template <class I>
    requires std::is_integral_v<I>
  [[gnu::always_inline]] constexpr space_ptr& operator-=(I n) {
    set(get() - n);
    return *this;
  }
  [[gnu::always_inline]] constexpr space_ptr& operator++() { return *this += 1; }
  [[gnu::always_inline]] constexpr space_ptr& operator--() { return *this -= 1; }
  [[gnu::always_inline]] constexpr space_ptr operator++(int) {
    const space_ptr old = *this;
    *this += 1;
    return old;
  }
  [[gnu::always_inline]] constexpr space_ptr operator--(int) {
    const space_ptr old = *this;
    *this -= 1;
    return old;
  }

  template <class I>
    requires std::is_integral_v<I>
  [[gnu::always_inline]] friend constexpr space_ptr operator+(space_ptr p, I n) {
    return p += n;
  }
  template <class I>
    requires std::is_integral_v<I>
  [[gnu::always_inline]] friend constexpr space_ptr operator+(I n, space_ptr p) {
    return p += n;
  }
  template <class I>
    requires std::is_integral_v<I>
  [[gnu::always_inline]] friend constexpr space_ptr operator-(space_ptr p, I n) {
    return p -= n;
  }
  [[gnu::always_inline]] friend constexpr std::ptrdiff_t operator-(space_ptr a, space_ptr b) {
    return a.get() - b.get();
  }
  [[gnu::always_inline]] friend constexpr bool operator==(space_ptr a, space_ptr b) {
    return a.get() == b.get();
  }
  // The four orderings rather than <=>, whose result types need <compare>
  // (Metal has no <=>).
  [[gnu::always_inline]] friend constexpr bool operator<(space_ptr a, space_ptr b) {
    return a.get() < b.get();
  }
  [[gnu::always_inline]] friend constexpr bool operator>(space_ptr a, space_ptr b) {
    return a.get() > b.get();
  }
  [[gnu::always_inline]] friend constexpr bool operator<=(space_ptr a, space_ptr b) {
    return a.get() <= b.get();
  }
  [[gnu::always_inline]] friend constexpr bool operator>=(space_ptr a, space_ptr b) {
    return a.get() >= b.get();
  }
  [[gnu::always_inline]] friend constexpr bool operator==(space_ptr a, std::nullptr_t) {
    return a.get() == nullptr;
  }

 private:
  [[gnu::always_inline]] constexpr void set(const T* p) { this->p_ = p; }
  // An access the source pass did not classify (a pointer it did not see
  // declared, a macro): a lockstep point of its own.
  [[gnu::always_inline]] constexpr void note_access() const {
    if constexpr (S == space::threadgroup_memory) {
      if (!std::is_constant_evaluated()) coreai::lockstep::access(coreai::lockstep::other);
    }
  }
};

// What the address-space pass writes for `device T*`, `constant T*` and
// `threadgroup T*` (csrc/cpu/source_scan.h).
template <class T>
using device_ptr = space_ptr<T, space::device_memory>;
template <class T>
using constant_ptr = space_ptr<T, space::constant_memory>;
template <class T>
using threadgroup_ptr = space_ptr<T, space::threadgroup_memory>;

// The address the pointer holds, tagged or not.
template <class T>
[[gnu::always_inline]] constexpr T* raw(T* p) {
  return p;
}
template <class T, space S>
[[gnu::always_inline]] constexpr T* raw(const space_ptr<T, S>& p) {
  return p.get();
}

// A pointer, tagged or not.
template <class P>
concept any_pointer = std::is_pointer_v<std::remove_cvref_t<P>> ||
                      is_space_ptr_v<std::remove_cvref_t<P>>;

// ---- lockstep accesses to threadgroup memory ---------------------------------

template <class P>
inline constexpr bool is_threadgroup_ptr_v = false;
template <class T>
inline constexpr bool is_threadgroup_ptr_v<space_ptr<T, space::threadgroup_memory>> = true;

// An access of kind K through a threadgroup pointer, at a known position in
// the source: what tg_read(p)[i] and its kin are before the [i].
template <class T, lockstep::kind K>
class tg_access {
 public:
  [[gnu::always_inline]] constexpr tg_access(T* p, std::uint64_t order) : p_(p), order_(order) {}

  template <class I, class U = T>
    requires(std::is_integral_v<I> && !std::is_array_v<U>)
  [[gnu::always_inline]] constexpr space_detail::loose_t<U>& operator[](I i) const {
    note();
    return static_cast<space_detail::loose_t<U>*>(p_)[i];
  }
  // A row of a multi-dimensional array: the access is its element's.
  template <class I, class U = T>
    requires(std::is_integral_v<I> && std::is_array_v<U>)
  [[gnu::always_inline]] constexpr tg_access<std::remove_extent_t<U>, K> operator[](I i) const {
    return tg_access<std::remove_extent_t<U>, K>(p_[i] + 0, order_);
  }
  [[gnu::always_inline]] constexpr space_detail::loose_t<T>& operator*() const {
    note();
    return *static_cast<space_detail::loose_t<T>*>(p_);
  }
  [[gnu::always_inline]] constexpr space_detail::loose_t<T>* operator->() const {
    note();
    return static_cast<space_detail::loose_t<T>*>(p_);
  }

 private:
  [[gnu::always_inline]] constexpr void note() const {
    if constexpr (K != lockstep::none) {
      if (!std::is_constant_evaluated()) lockstep::access(K, order_);
    }
  }
  T* p_;
  std::uint64_t order_;
};

// What the source pass wraps around the name of threadgroup memory in an
// access (csrc/cpu/source_scan.h): on a threadgroup pointer, the access of
// that kind; on anything else (a name the pass took for threadgroup memory
// that is not, in this scope), the operand itself.
template <lockstep::kind K, class P>
[[gnu::always_inline]] constexpr decltype(auto) tg_access_of(P&& p, simd::site at) {
  using Q = std::remove_cvref_t<P>;
  if constexpr (is_threadgroup_ptr_v<Q>) {
    return tg_access<typename Q::element_type, K>(p.get(), at.order);
  } else {
    return static_cast<P&&>(p);
  }
}
template <class P>
[[gnu::always_inline]] constexpr decltype(auto) tg_read(P&& p, COREAI_CALL_SITE) {
  return tg_access_of<lockstep::read>(static_cast<P&&>(p), at);
}
template <class P>
[[gnu::always_inline]] constexpr decltype(auto) tg_write(P&& p, COREAI_CALL_SITE) {
  return tg_access_of<lockstep::write>(static_cast<P&&>(p), at);
}
template <class P>
[[gnu::always_inline]] constexpr decltype(auto) tg_other(P&& p, COREAI_CALL_SITE) {
  return tg_access_of<lockstep::other>(static_cast<P&&>(p), at);
}
// `&p[i]`: an address, no access.
template <class P>
[[gnu::always_inline]] constexpr decltype(auto) tg_address(P&& p, COREAI_CALL_SITE) {
  return tg_access_of<lockstep::none>(static_cast<P&&>(p), at);
}

}  // namespace coreai
