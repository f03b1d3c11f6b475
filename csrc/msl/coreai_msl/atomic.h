// Metal atomics. Threadgroups run on several OS threads at once, so every
// operation is a real hardware atomic (the compiler's __atomic builtins), for
// device memory and threadgroup memory alike.
//
// atomic<T> is trivially default constructible so that threadgroup arrays of
// it (static thread_local storage after the backend's rewrite) need no dynamic
// initialisation; like on the GPU its contents start undefined until a kernel
// stores to it.
#pragma once

#include <type_traits>

#include "scalar.h"

namespace metal {

// Metal's memory orders, with the values of the matching __ATOMIC_* orders.
enum memory_order : int {
  memory_order_relaxed = __ATOMIC_RELAXED,
  memory_order_acquire = __ATOMIC_ACQUIRE,
  memory_order_release = __ATOMIC_RELEASE,
  memory_order_acq_rel = __ATOMIC_ACQ_REL,
  memory_order_seq_cst = __ATOMIC_SEQ_CST,
};

template <class T>
struct atomic {
  static_assert(std::is_same_v<T, int> || std::is_same_v<T, uint> || std::is_same_v<T, bool> ||
                    std::is_same_v<T, float> || std::is_same_v<T, ulong> ||
                    std::is_same_v<T, long>,
                "metal::atomic<T>: Metal has atomics of int, uint, bool, float, ulong and long "
                "only");
  atomic() = default;
  atomic(const atomic&) = delete;
  atomic& operator=(const atomic&) = delete;

  T value_;
};

using atomic_int = atomic<int>;
using atomic_uint = atomic<uint>;
using atomic_bool = atomic<bool>;
using atomic_float = atomic<float>;
using atomic_ulong = atomic<ulong>;
using atomic_long = atomic<long>;

namespace detail {

template <class T>
inline constexpr bool is_atomic_integer_v =
    std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Applies update(old) with a compare-and-swap loop and returns the old value,
// for the float operations that have no single instruction.
template <class T, class F>
inline T atomic_update(volatile T* address, F update, memory_order order) {
  T expected;
  __atomic_load(address, &expected, __ATOMIC_RELAXED);
  T desired = update(expected);
  while (!__atomic_compare_exchange(address, &expected, &desired, /*weak=*/true, order,
                                    __ATOMIC_RELAXED)) {
    desired = update(expected);
  }
  return expected;
}

}  // namespace detail

template <class T>
inline void atomic_store_explicit(volatile atomic<T>* object, std::type_identity_t<T> desired,
                                  memory_order order) {
  __atomic_store(&object->value_, &desired, order);
}

template <class T>
inline T atomic_load_explicit(const volatile atomic<T>* object, memory_order order) {
  T result;
  __atomic_load(&object->value_, &result, order);
  return result;
}

template <class T>
inline T atomic_exchange_explicit(volatile atomic<T>* object, std::type_identity_t<T> desired,
                                  memory_order order) {
  T previous;
  __atomic_exchange(&object->value_, &desired, &previous, order);
  return previous;
}

// On failure *expected receives the current value. A strong exchange is a
// valid weak one (a weak exchange may fail spuriously, this one never does).
template <class T>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* object, T* expected,
                                                  std::type_identity_t<T> desired,
                                                  memory_order success, memory_order failure) {
  return __atomic_compare_exchange(&object->value_, expected, &desired, /*weak=*/false, success,
                                   failure);
}

template <class T>
inline bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* object, T* expected,
                                                    std::type_identity_t<T> desired,
                                                    memory_order success, memory_order failure) {
  return __atomic_compare_exchange(&object->value_, expected, &desired, /*weak=*/false, success,
                                   failure);
}

template <class T>
inline T atomic_fetch_add_explicit(volatile atomic<T>* object, std::type_identity_t<T> operand,
                                   memory_order order) {
  if constexpr (std::is_same_v<T, float>) {
    return detail::atomic_update(&object->value_, [operand](float old) { return old + operand; },
                                 order);
  } else {
    static_assert(detail::is_atomic_integer_v<T>,
                  "atomic_fetch_add_explicit: Metal supports it on atomic int, uint, long, "
                  "ulong and float only");
    return __atomic_fetch_add(&object->value_, operand, order);
  }
}

template <class T>
inline T atomic_fetch_sub_explicit(volatile atomic<T>* object, std::type_identity_t<T> operand,
                                   memory_order order) {
  if constexpr (std::is_same_v<T, float>) {
    return detail::atomic_update(&object->value_, [operand](float old) { return old - operand; },
                                 order);
  } else {
    static_assert(detail::is_atomic_integer_v<T>,
                  "atomic_fetch_sub_explicit: Metal supports it on atomic int, uint, long, "
                  "ulong and float only");
    return __atomic_fetch_sub(&object->value_, operand, order);
  }
}

#define COREAI_MSL_ATOMIC_INTEGER_OP(name, builtin)                                          \
  template <class T>                                                                         \
  inline T name(volatile atomic<T>* object, std::type_identity_t<T> operand,                 \
                memory_order order) {                                                        \
    static_assert(detail::is_atomic_integer_v<T>,                                            \
                  #name ": Metal supports it on atomic int, uint, long and ulong only, not " \
                        "on atomic float or bool");                                          \
    return builtin(&object->value_, operand, order);                                         \
  }

COREAI_MSL_ATOMIC_INTEGER_OP(atomic_fetch_and_explicit, __atomic_fetch_and)
COREAI_MSL_ATOMIC_INTEGER_OP(atomic_fetch_or_explicit, __atomic_fetch_or)
COREAI_MSL_ATOMIC_INTEGER_OP(atomic_fetch_xor_explicit, __atomic_fetch_xor)
COREAI_MSL_ATOMIC_INTEGER_OP(atomic_fetch_min_explicit, __atomic_fetch_min)
COREAI_MSL_ATOMIC_INTEGER_OP(atomic_fetch_max_explicit, __atomic_fetch_max)

#undef COREAI_MSL_ATOMIC_INTEGER_OP

}  // namespace metal
