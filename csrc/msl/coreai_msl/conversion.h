// Metal's meaning of casts to vector types, for the code the CPU backend's
// conversion pass writes (csrc/cpu/conversions.cpp).
//
// In Metal `(float4)i4`, `float4(i4)` and `T(i4)` with T a template parameter
// or typedef naming float4 all convert each component. clang compiles a cast
// between two vector types of the same size as a reinterpretation of the bits
// instead, so the pass rewrites
//
//   (T)x   into   ::coreai::cast_to<T>->*x
//   T(a, ...)     ::coreai::construct<T>(a, ...)       (T a typedef or template name)
//   (decltype(e))x  ::coreai::cast_to<std::remove_reference_t<decltype(e)>>->*x
//
// `->*` binds tighter than every binary operator and looser than the unary
// and postfix ones, like a C-style cast, so the operand is the same
// expression. Prefixes compose: `(float4)(half4)x` and `-(float4)x` apply
// their steps right to left. For any type other than a vector the cast is the
// C-style cast itself and construct<T>(args) is T(args), so only vector
// semantics change.
#pragma once

#include <type_traits>

#include "vector.h"

namespace coreai {
namespace conversion_detail {

template <class T>
struct vector_info {
  static constexpr bool is_vector = false;
};
template <class E, int N>
struct vector_info<E __attribute__((ext_vector_type(N)))> {
  static constexpr bool is_vector = true;
  static constexpr int size = N;
  // Metal's boolN are vectors of plain char here (vector.h); their components
  // convert as bools.
  using element = std::conditional_t<std::is_same_v<E, char>, bool, E>;
};

template <class T>
inline constexpr bool is_vector_v = vector_info<std::remove_cvref_t<T>>::is_vector;

}  // namespace conversion_detail

// Metal's conversion of x to T.
template <class T, class X>
[[gnu::always_inline]] constexpr T convert(const X& x) {
  using info = conversion_detail::vector_info<std::remove_cv_t<T>>;
  if constexpr (info::is_vector) {
    if constexpr (conversion_detail::is_vector_v<X>) {
      static_assert(conversion_detail::vector_info<std::remove_cvref_t<X>>::size == info::size,
                    "a vector converts only to a vector with as many components");
    }
    return metal::detail::make_vector<typename info::element, info::size>(x);
  } else {
    return (T)(x);  // NOLINT: the C-style cast is the meaning to keep
  }
}

// T(args...) with Metal's vector constructors.
template <class T, class... A>
[[gnu::always_inline]] constexpr T construct(const A&... args) {
  using info = conversion_detail::vector_info<std::remove_cv_t<T>>;
  if constexpr (info::is_vector) {
    return metal::detail::make_vector<typename info::element, info::size>(args...);
  } else if constexpr (sizeof...(A) == 1) {
    return convert<T>(args...);  // a functional cast of one value is a cast
  } else {
    return T(args...);
  }
}

// A pending prefix of casts and unary operators, applied to the operand by ->*.
template <class F>
struct cast_prefix {
  F apply;
};

template <class T>
struct cast_target {
  static_assert(!std::is_reference_v<T>,
                "a C-style cast to a reference type named by a typedef or a template "
                "parameter is not supported by the CPU backend of coreai_torch; cast the "
                "value (to the type without &) instead");
  using type = T;
};

template <class T>
inline constexpr auto cast_to =
    cast_prefix{[](auto x) -> typename cast_target<T>::type { return convert<T>(x); }};

template <class F, class G>
[[gnu::always_inline]] constexpr auto operator->*(cast_prefix<F> outer, cast_prefix<G> inner) {
  return cast_prefix{[=](auto x) { return outer.apply(inner.apply(x)); }};
}
// The operand is taken by value: a swizzle (v.xy) is not an lvalue one can bind.
template <class F, class X>
[[gnu::always_inline]] constexpr auto operator->*(cast_prefix<F> prefix, X x) {
  return prefix.apply(x);
}

#define COREAI_CAST_PREFIX_UNARY(op)                                                      \
  template <class F>                                                                      \
  [[gnu::always_inline]] constexpr auto operator op(cast_prefix<F> p) {                   \
    return cast_prefix{[=](auto x) { return op p.apply(x); }};                         \
  }
COREAI_CAST_PREFIX_UNARY(-)
COREAI_CAST_PREFIX_UNARY(+)
COREAI_CAST_PREFIX_UNARY(!)
COREAI_CAST_PREFIX_UNARY(~)
#undef COREAI_CAST_PREFIX_UNARY

// reinterpret_cast<device T*>(p) and its kin, once the pointer type is a
// tagged pointer (address_space.h): an explicit conversion.
template <class P, class X>
[[gnu::always_inline]] constexpr P pointer_cast(X x) {
  return P(x);
}

}  // namespace coreai
