// Debug mode's memory access hooks. Debug libraries are compiled with clang's
// -fsanitize=thread, which calls a function before every load and store that
// may touch shared memory (a local whose address never escapes is left alone)
// and turns atomic operations and memcpy/memset into calls. No sanitizer
// runtime is linked: the functions are defined here, in the kernel library,
// and hand each access to the launcher (debug_access in cpu_abi.h) with the
// address of the instruction that made it, which the launcher maps back to the
// kernel's source line. The launcher checks the accesses to threadgroup and
// device memory for races, reads of uninitialised threadgroup memory and
// out-of-bounds pointers (csrc/cpu/access_checker.h; docs/cpu.md, "Checking
// kernels").
//
// The hooks themselves are not instrumented (disable_sanitizer_instrumentation:
// no_sanitize("thread") would still turn their atomic operations into hook
// calls), or every hook would call itself. Accesses of sizes the instrumentation skips (not 1, 2, 4, 8 or
// 16 bytes) and float atomics, which it leaves as they are, go unchecked.
#ifndef COREAI_MSL_DEBUG_ACCESSES_H
#define COREAI_MSL_DEBUG_ACCESSES_H

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu_abi.h"
#include "runtime.h"

#define COREAI_MSL_HOOK \
  extern "C" __attribute__((disable_sanitizer_instrumentation, noinline, used))

namespace coreai::debug_accesses {

[[gnu::always_inline, clang::disable_sanitizer_instrumentation]] inline void note(const volatile void* address,
                                                                     std::uint32_t size,
                                                                     std::uint32_t flags,
                                                                     const void* pc) {
  // Before coreai_cpu_kernel_init (the library's own initialisers, and the
  // init function's store of the table) there is nothing to report to.
  if (coreai::g_runtime == nullptr) return;
  coreai::g_runtime->debug_access(const_cast<const void*>(address), size, flags, pc);
}

// The hooks' memory-order argument; the CPU runs a threadgroup on one OS
// thread, so every atomic operation is done sequentially consistent.
using order = int;

}  // namespace coreai::debug_accesses

// Plain loads and stores of 1, 2, 4, 8 and 16 bytes, aligned or not.
#define COREAI_MSL_ACCESS_HOOKS(size)                                                      \
  COREAI_MSL_HOOK void __tsan_read##size(void* a) {                                        \
    coreai::debug_accesses::note(a, size, 0, __builtin_return_address(0));                 \
  }                                                                                        \
  COREAI_MSL_HOOK void __tsan_write##size(void* a) {                                       \
    coreai::debug_accesses::note(a, size, COREAI_CPU_ACCESS_WRITE,                         \
                                 __builtin_return_address(0));                             \
  }                                                                                        \
  COREAI_MSL_HOOK void __tsan_unaligned_read##size(void* a) {                              \
    coreai::debug_accesses::note(a, size, 0, __builtin_return_address(0));                 \
  }                                                                                        \
  COREAI_MSL_HOOK void __tsan_unaligned_write##size(void* a) {                             \
    coreai::debug_accesses::note(a, size, COREAI_CPU_ACCESS_WRITE,                         \
                                 __builtin_return_address(0));                             \
  }                                                                                        \
  COREAI_MSL_HOOK void __tsan_volatile_read##size(void* a) {                               \
    coreai::debug_accesses::note(a, size, 0, __builtin_return_address(0));                 \
  }                                                                                        \
  COREAI_MSL_HOOK void __tsan_volatile_write##size(void* a) {                              \
    coreai::debug_accesses::note(a, size, COREAI_CPU_ACCESS_WRITE,                         \
                                 __builtin_return_address(0));                             \
  }

COREAI_MSL_ACCESS_HOOKS(1)
COREAI_MSL_ACCESS_HOOKS(2)
COREAI_MSL_ACCESS_HOOKS(4)
COREAI_MSL_ACCESS_HOOKS(8)
COREAI_MSL_ACCESS_HOOKS(16)
#undef COREAI_MSL_ACCESS_HOOKS

// Atomic operations: done here, and noted as atomic accesses (which never
// race with each other, only with plain accesses).
#define COREAI_MSL_ATOMIC_HOOKS(bits, type)                                                  \
  COREAI_MSL_HOOK type __tsan_atomic##bits##_load(const volatile type* a,                    \
                                                  coreai::debug_accesses::order) {           \
    coreai::debug_accesses::note(a, sizeof(type), COREAI_CPU_ACCESS_ATOMIC,                  \
                                 __builtin_return_address(0));                               \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                             \
  }                                                                                          \
  COREAI_MSL_HOOK void __tsan_atomic##bits##_store(volatile type* a, type v,                 \
                                                   coreai::debug_accesses::order) {          \
    coreai::debug_accesses::note(a, sizeof(type),                                            \
                                 COREAI_CPU_ACCESS_ATOMIC | COREAI_CPU_ACCESS_WRITE,         \
                                 __builtin_return_address(0));                               \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                \
  }                                                                                          \
  COREAI_MSL_ATOMIC_RMW(bits, type, exchange, __atomic_exchange_n)                           \
  COREAI_MSL_ATOMIC_RMW(bits, type, fetch_add, __atomic_fetch_add)                           \
  COREAI_MSL_ATOMIC_RMW(bits, type, fetch_sub, __atomic_fetch_sub)                           \
  COREAI_MSL_ATOMIC_RMW(bits, type, fetch_and, __atomic_fetch_and)                           \
  COREAI_MSL_ATOMIC_RMW(bits, type, fetch_or, __atomic_fetch_or)                             \
  COREAI_MSL_ATOMIC_RMW(bits, type, fetch_xor, __atomic_fetch_xor)                           \
  COREAI_MSL_ATOMIC_RMW(bits, type, fetch_nand, __atomic_fetch_nand)                         \
  COREAI_MSL_HOOK type __tsan_atomic##bits##_compare_exchange_val(                           \
      volatile type* a, type expected, type desired, coreai::debug_accesses::order,          \
      coreai::debug_accesses::order) {                                                       \
    coreai::debug_accesses::note(a, sizeof(type),                                            \
                                 COREAI_CPU_ACCESS_ATOMIC | COREAI_CPU_ACCESS_WRITE,         \
                                 __builtin_return_address(0));                               \
    __atomic_compare_exchange_n(a, &expected, desired, false, __ATOMIC_SEQ_CST,              \
                                __ATOMIC_SEQ_CST);                                           \
    return expected;                                                                         \
  }                                                                                          \
  COREAI_MSL_HOOK int __tsan_atomic##bits##_compare_exchange_strong(                         \
      volatile type* a, type* expected, type desired, coreai::debug_accesses::order,         \
      coreai::debug_accesses::order) {                                                       \
    coreai::debug_accesses::note(a, sizeof(type),                                            \
                                 COREAI_CPU_ACCESS_ATOMIC | COREAI_CPU_ACCESS_WRITE,         \
                                 __builtin_return_address(0));                               \
    return __atomic_compare_exchange_n(a, expected, desired, false, __ATOMIC_SEQ_CST,        \
                                       __ATOMIC_SEQ_CST);                                    \
  }                                                                                          \
  COREAI_MSL_HOOK int __tsan_atomic##bits##_compare_exchange_weak(                           \
      volatile type* a, type* expected, type desired, coreai::debug_accesses::order,         \
      coreai::debug_accesses::order) {                                                       \
    coreai::debug_accesses::note(a, sizeof(type),                                            \
                                 COREAI_CPU_ACCESS_ATOMIC | COREAI_CPU_ACCESS_WRITE,         \
                                 __builtin_return_address(0));                               \
    return __atomic_compare_exchange_n(a, expected, desired, true, __ATOMIC_SEQ_CST,         \
                                       __ATOMIC_SEQ_CST);                                    \
  }

#define COREAI_MSL_ATOMIC_RMW(bits, type, op, builtin)                                       \
  COREAI_MSL_HOOK type __tsan_atomic##bits##_##op(volatile type* a, type v,                  \
                                                  coreai::debug_accesses::order) {           \
    coreai::debug_accesses::note(a, sizeof(type),                                            \
                                 COREAI_CPU_ACCESS_ATOMIC | COREAI_CPU_ACCESS_WRITE,         \
                                 __builtin_return_address(0));                               \
    return builtin(a, v, __ATOMIC_SEQ_CST);                                                  \
  }

COREAI_MSL_ATOMIC_HOOKS(8, std::int8_t)
COREAI_MSL_ATOMIC_HOOKS(16, std::int16_t)
COREAI_MSL_ATOMIC_HOOKS(32, std::int32_t)
COREAI_MSL_ATOMIC_HOOKS(64, std::int64_t)
#undef COREAI_MSL_ATOMIC_RMW
#undef COREAI_MSL_ATOMIC_HOOKS

COREAI_MSL_HOOK void __tsan_atomic_thread_fence(coreai::debug_accesses::order) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
COREAI_MSL_HOOK void __tsan_atomic_signal_fence(coreai::debug_accesses::order) {}

// memcpy, memmove and memset (of structs, arrays, vectors the compiler copies
// as a block): a read of the source and a write of the destination.
COREAI_MSL_HOOK void* __tsan_memcpy(void* dst, const void* src, std::size_t n) {
  coreai::debug_accesses::note(src, static_cast<std::uint32_t>(n), 0, __builtin_return_address(0));
  coreai::debug_accesses::note(dst, static_cast<std::uint32_t>(n), COREAI_CPU_ACCESS_WRITE,
                               __builtin_return_address(0));
  return __builtin_memcpy(dst, src, n);
}
COREAI_MSL_HOOK void* __tsan_memmove(void* dst, const void* src, std::size_t n) {
  coreai::debug_accesses::note(src, static_cast<std::uint32_t>(n), 0, __builtin_return_address(0));
  coreai::debug_accesses::note(dst, static_cast<std::uint32_t>(n), COREAI_CPU_ACCESS_WRITE,
                               __builtin_return_address(0));
  return __builtin_memmove(dst, src, n);
}
COREAI_MSL_HOOK void* __tsan_memset(void* dst, int value, std::size_t n) {
  coreai::debug_accesses::note(dst, static_cast<std::uint32_t>(n), COREAI_CPU_ACCESS_WRITE,
                               __builtin_return_address(0));
  return __builtin_memset(dst, value, n);
}
COREAI_MSL_HOOK void __tsan_read_range(void* a, std::size_t n) {
  coreai::debug_accesses::note(a, static_cast<std::uint32_t>(n), 0, __builtin_return_address(0));
}
COREAI_MSL_HOOK void __tsan_write_range(void* a, std::size_t n) {
  coreai::debug_accesses::note(a, static_cast<std::uint32_t>(n), COREAI_CPU_ACCESS_WRITE,
                               __builtin_return_address(0));
}

// What the instrumentation also calls, with nothing to do here: the module's
// initialiser, function entry and exit (the JIT turns those off), vtable
// pointer updates (Metal has no virtual functions).
COREAI_MSL_HOOK void __tsan_init() {}
COREAI_MSL_HOOK void __tsan_func_entry(void*) {}
COREAI_MSL_HOOK void __tsan_func_exit() {}
COREAI_MSL_HOOK void __tsan_vptr_update(void*, void*) {}
COREAI_MSL_HOOK void __tsan_vptr_read(void*) {}

#undef COREAI_MSL_HOOK

namespace coreai {

// Debug mode: a threadgroup variable as the running thread sees it, for the
// launcher's checks (COREAI_THREADGROUP_NOTE, threadgroup_notes.h).
template <class T>
[[clang::disable_sanitizer_instrumentation]] inline void debug_threadgroup_storage(const T& storage,
                                                                     const char* name,
                                                                     const char* file,
                                                                     std::uint32_t line) {
  coreai_cpu_threadgroup_storage s{};
  s.address = __builtin_addressof(storage);
  s.bytes = sizeof(T);
  s.element_bytes = sizeof(std::remove_all_extents_t<T>);
  // Up to four dimensions are named in reports; deeper arrays by flat index.
  s.rank = std::rank_v<T> <= 4 ? static_cast<std::uint32_t>(std::rank_v<T>) : 0u;
  if constexpr (std::rank_v<T> >= 1 && std::rank_v<T> <= 4) s.extents[0] = std::extent_v<T, 0>;
  if constexpr (std::rank_v<T> >= 2 && std::rank_v<T> <= 4) s.extents[1] = std::extent_v<T, 1>;
  if constexpr (std::rank_v<T> >= 3 && std::rank_v<T> <= 4) s.extents[2] = std::extent_v<T, 2>;
  if constexpr (std::rank_v<T> >= 4) s.extents[3] = std::extent_v<T, 3>;
  s.name = name;
  s.file = file;
  s.line = line;
  g_runtime->debug_threadgroup_storage(&s);
}

}  // namespace coreai

#endif  // COREAI_MSL_DEBUG_ACCESSES_H
