// Metal's <metal_type_traits>: the std-like traits in namespace metal, with
// Metal's answers for its own types.
//
// The names and their meaning follow Apple's header <metal_type_traits>
// (Xcode toolchain, usr/metal/<platform>/lib/clang/<version>/include/metal/;
// the traits are built on clang's __is_integral / __is_floating_point /
// __is_signed, which Metal's compiler answers for half and bfloat, and are
// specialised for ext_vector_type and packed_vector_type to answer for the
// component type). What differs from C++'s <type_traits>:
//
//  - half and bfloat are floating-point types: is_floating_point_v<half> and
//    is_arithmetic_v<bfloat> are true.
//  - The arithmetic categories look through vectors: is_floating_point_v<float4>,
//    is_integral_v<uint2>, is_signed_v<int3> and is_unsigned_v<ushort4> answer
//    for the component type, and so do packed vectors. is_vector_v<T> is true for
//    vectors and packed vectors; is_scalar_v<float4> is false.
//  - vec_elements<T>::value is the component count (0 for a scalar),
//    make_scalar_t<T> the component type, and make_signed_t / make_unsigned_t
//    map vectors component-wise.
//  - Address spaces are part of a type in Metal; remove_addrspace_t<T> strips
//    them. The CPU backend keeps only pointers tagged (address_space.h), so it
//    is the identity here.
//
// Only names Metal declares live here: real kernels define helpers such as
// is_empty, void_t or pointer_element in namespace metal themselves (MLX's
// steel/utils/type_traits.h does), and a second definition would not compile.
#pragma once

#include <cstddef>
#include <type_traits>

#include "address_space.h"
#include "scalar.h"
#include "vector.h"

namespace metal {

template <class T, T v>
struct integral_constant {
  using value_type = T;
  using type = integral_constant;
  static constexpr T value = v;
  constexpr operator value_type() const noexcept { return value; }
  constexpr value_type operator()() const noexcept { return value; }
};

template <bool B>
using bool_constant = integral_constant<bool, B>;
using true_type = bool_constant<true>;
using false_type = bool_constant<false>;

template <bool B, class T = void>
struct enable_if {};
template <class T>
struct enable_if<true, T> {
  using type = T;
};
template <bool B, class T = void>
using enable_if_t = typename enable_if<B, T>::type;

template <bool B, class T, class F>
struct conditional {
  using type = T;
};
template <class T, class F>
struct conditional<false, T, F> {
  using type = F;
};
template <bool B, class T, class F>
using conditional_t = typename conditional<B, T, F>::type;

template <class T>
struct remove_const {
  using type = T;
};
template <class T>
struct remove_const<const T> {
  using type = T;
};
template <class T>
using remove_const_t = typename remove_const<T>::type;

template <class T>
struct remove_volatile {
  using type = T;
};
template <class T>
struct remove_volatile<volatile T> {
  using type = T;
};
template <class T>
using remove_volatile_t = typename remove_volatile<T>::type;

template <class T>
struct remove_cv {
  using type = remove_volatile_t<remove_const_t<T>>;
};
template <class T>
using remove_cv_t = typename remove_cv<T>::type;

// Address spaces are not part of types on the CPU (see the top of this file).
template <class T>
struct remove_addrspace {
  using type = T;
};
template <class T>
using remove_addrspace_t = typename remove_addrspace<T>::type;
// The spelling Apple's MetalPerformancePrimitives documentation uses.
template <class T>
using __remove_addrspace_t = remove_addrspace_t<T>;

namespace traits_detail {

template <class T>
inline constexpr bool narrow_float = std::is_same_v<T, half> || std::is_same_v<T, bfloat>;

// The component type of a vector or packed vector; T itself otherwise.
template <class T>
struct component {
  using type = T;
  static constexpr std::size_t count = 0;
};
template <class T, int N>
struct component<T __attribute__((ext_vector_type(N)))> {
  using type = T;
  static constexpr std::size_t count = N;
};
template <class T, int N>
struct component<packed_vec<T, N>> {
  using type = T;
  static constexpr std::size_t count = N;
};

template <class T>
inline constexpr bool integral_scalar = std::is_integral_v<T>;
template <class T>
inline constexpr bool floating_scalar = std::is_floating_point_v<T> || narrow_float<T>;
template <class T>
inline constexpr bool signed_scalar = (std::is_integral_v<T> && std::is_signed_v<T>) ||
                                      floating_scalar<T>;
template <class T>
inline constexpr bool unsigned_scalar = std::is_integral_v<T> && std::is_unsigned_v<T>;

template <class T>
using component_t = typename component<std::remove_cv_t<T>>::type;

template <class From, class To>
struct with_component {
  using type = To;
};
template <class From, int N, class To>
struct with_component<From __attribute__((ext_vector_type(N))), To> {
  using type = To __attribute__((ext_vector_type(N)));
};
template <class From, int N, class To>
struct with_component<packed_vec<From, N>, To> {
  using type = packed_vec<To, N>;
};

// Signed and unsigned counterparts of the integer types Metal has.
template <class T>
struct signed_of {};
template <class T>
struct unsigned_of {};
#define COREAI_MSL_SIGN_PAIR(S, U) \
  template <>                      \
  struct signed_of<S> {            \
    using type = S;                \
  };                               \
  template <>                      \
  struct signed_of<U> {            \
    using type = S;                \
  };                               \
  template <>                      \
  struct unsigned_of<S> {          \
    using type = U;                \
  };                               \
  template <>                      \
  struct unsigned_of<U> {          \
    using type = U;                \
  };
COREAI_MSL_SIGN_PAIR(signed char, unsigned char)
COREAI_MSL_SIGN_PAIR(short, unsigned short)
COREAI_MSL_SIGN_PAIR(int, unsigned int)
COREAI_MSL_SIGN_PAIR(long, unsigned long)
#undef COREAI_MSL_SIGN_PAIR
// char is signed in Metal, as on the targets we compile for.
template <>
struct signed_of<char> {
  using type = signed char;
};
template <>
struct unsigned_of<char> {
  using type = unsigned char;
};

}  // namespace traits_detail

#define COREAI_MSL_COMPONENT_TRAIT(name, test)                                         \
  template <class T>                                                                   \
  struct name : bool_constant<traits_detail::test<traits_detail::component_t<T>>> {}; \
  template <class T>                                                                   \
  inline constexpr bool name##_v = name<T>::value;

COREAI_MSL_COMPONENT_TRAIT(is_integral, integral_scalar)
COREAI_MSL_COMPONENT_TRAIT(is_floating_point, floating_scalar)
COREAI_MSL_COMPONENT_TRAIT(is_signed, signed_scalar)
COREAI_MSL_COMPONENT_TRAIT(is_unsigned, unsigned_scalar)

#undef COREAI_MSL_COMPONENT_TRAIT

template <class T>
struct is_arithmetic : bool_constant<is_integral_v<T> || is_floating_point_v<T>> {};
template <class T>
inline constexpr bool is_arithmetic_v = is_arithmetic<T>::value;

template <class T>
struct is_vector : bool_constant<(traits_detail::component<std::remove_cv_t<T>>::count > 0)> {};
template <class T>
inline constexpr bool is_vector_v = is_vector<T>::value;

// Arithmetic types (half and bfloat included), enums, pointers (tagged
// pointers included, see address_space.h) and nullptr_t; not vectors.
template <class T>
struct is_scalar : bool_constant<std::is_scalar_v<std::remove_cv_t<T>> ||
                                 traits_detail::narrow_float<std::remove_cv_t<T>> ||
                                 coreai::is_space_ptr_v<std::remove_cv_t<T>>> {};
template <class T>
inline constexpr bool is_scalar_v = is_scalar<T>::value;

template <class T>
struct vec_elements
    : integral_constant<std::size_t, traits_detail::component<std::remove_cv_t<T>>::count> {};

template <class T>
struct make_scalar {
  using type = traits_detail::component_t<T>;
};
template <class T>
using make_scalar_t = typename make_scalar<T>::type;

template <class T>
struct make_signed {
  using type = typename traits_detail::with_component<
      std::remove_cv_t<T>,
      typename traits_detail::signed_of<traits_detail::component_t<T>>::type>::type;
};
template <class T>
using make_signed_t = typename make_signed<T>::type;

template <class T>
struct make_unsigned {
  using type = typename traits_detail::with_component<
      std::remove_cv_t<T>,
      typename traits_detail::unsigned_of<traits_detail::component_t<T>>::type>::type;
};
template <class T>
using make_unsigned_t = typename make_unsigned<T>::type;

template <class U, class V>
struct is_same : bool_constant<std::is_same_v<U, V>> {};
template <class U, class V>
inline constexpr bool is_same_v = is_same<U, V>::value;

template <class From, class To>
struct is_convertible : bool_constant<std::is_convertible_v<From, To>> {};
template <class From, class To>
inline constexpr bool is_convertible_v = is_convertible<From, To>::value;

template <class T>
struct is_class : bool_constant<std::is_class_v<T>> {};
template <class T>
inline constexpr bool is_class_v = is_class<T>::value;

template <class T>
struct is_enum : bool_constant<std::is_enum_v<T>> {};
template <class T>
inline constexpr bool is_enum_v = is_enum<T>::value;

template <class T>
struct is_const : bool_constant<std::is_const_v<T>> {};
template <class T>
inline constexpr bool is_const_v = is_const<T>::value;

template <class T>
struct underlying_type {
  using type = std::underlying_type_t<T>;
};
template <class T>
using underlying_type_t = typename underlying_type<T>::type;

template <class... B>
struct disjunction : false_type {};
template <class B>
struct disjunction<B> : B {};
template <class B, class... Rest>
struct disjunction<B, Rest...> : conditional_t<bool(B::value), B, disjunction<Rest...>> {};
template <class... B>
inline constexpr bool disjunction_v = disjunction<B...>::value;

template <class... B>
struct conjunction : true_type {};
template <class B>
struct conjunction<B> : B {};
template <class B, class... Rest>
struct conjunction<B, Rest...> : conditional_t<bool(B::value), conjunction<Rest...>, B> {};
template <class... B>
inline constexpr bool conjunction_v = conjunction<B...>::value;

// declval, from Metal's <metal_type_traits> as in C++ (PyTorch's
// c10/metal/utils.h writes ::metal::declval<F>() in its result_of).
using std::declval;

// The names Metal's own headers use, which kernels reach after
// `#pragma METAL internals : enable` (MLX's atomic.h does).
template <class... B>
using _disjunction = disjunction<B...>;
template <class... B>
using _conjunction = conjunction<B...>;

}  // namespace metal
